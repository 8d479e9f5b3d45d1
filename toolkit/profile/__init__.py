"""Where a decode step goes: torch profiler traces of a recipe's server, kernel families, floors.

  trace.py      read a Chrome trace (JSON, maybe gzipped) into plain events (a stdlib loader)
  families.py   the kernel-family rules (toolkit/data/kernel_families.toml + a user's file)
  breakdown.py  pure questions over a parsed trace: steps, kernels, time per family per step
  floors.py     each family's roofline floor for the same batch and context (toolkit.roofline)
  diff.py       the kernel-family diff of two recipes' profiles, with the run-to-run spread
  figure.py     the stacked bar per recipe (matplotlib)
  capture.py    the effects: drive a decode load, /start_profile at steady decode, wait for the traces
"""
