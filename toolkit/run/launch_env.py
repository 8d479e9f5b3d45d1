"""The environment one launch's server (or one-batch engine) runs with.

The env's run variables (its private JIT caches, toolkit.envs.manifest), then what one launch must not
inherit from an earlier one: compiled kernels are content and may be shared by the launches of one env,
but tuned choices are measurements, and a launch that loads an earlier launch's winners is not an
independent replicate of "this build, tuned at start" (a close race decided once by noise is never
redrawn, and the launch-to-launch spread the verdicts are built on leaves it out). Read against sglang
0.5.23 and its FlashInfer 0.7.2:

- SGLANG_FLASHINFER_AUTOTUNE_CACHE: sglang tunes FlashInfer's tactics at start
  (model_executor/runner/flashinfer_autotune.py) and by default saves the winners under
  SGLANG_CACHE_DIR and loads them at the next launch, which then skips the profiling. "0": every launch
  tunes afresh (it writes a fresh file under .../runs/ and loads none).
- FLASHINFER_AUTOTUNE_DIR: FlashInfer's SM120 sparse-MLA cost profile (mla/_sparse_mla_sm120/
  _calibration.py, measured while tuning and reloaded by every DSA attention call; GLM-5 on SM120 with
  sglang's defaults) and the PCIe-IPC all-reduce tactics (comm/pcie_ipc_tuning.py, opt-in
  SGLANG_ENABLE_PCIE_IPC_ALLREDUCE) live there, by default in the env's FlashInfer workspace: here in
  the launch's own run directory.
- FLA_CACHE_RESULTS: sglang's FLA kernels (linear attention, GDN, KDA, Mamba models) ask Triton to save
  their autotune winners in TRITON_CACHE_DIR (kernels/ops/attention/fla/utils.py); "0": measured afresh.

Left as they are: Inductor's `.best_config` files (torch.compile or piecewise CUDA graphs only; its
switch, autotune_local_cache, has no environment variable, and a launch-private TORCHINDUCTOR_CACHE_DIR
would also throw its compiled kernels away).

The recipe's `[server.env]` comes last and may set any of them (the deployment's reuse, said in the run).
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

PER_LAUNCH = {"SGLANG_FLASHINFER_AUTOTUNE_CACHE": "0", "FLA_CACHE_RESULTS": "0"}
PER_LAUNCH_DIRS = {"FLASHINFER_AUTOTUNE_DIR": "flashinfer-autotune"}  # under the launch's run directory


def launch_environ(env_vars: Mapping[str, str], server_env: Mapping, run_dir: Path) -> dict[str, str]:
    """The launch's environment: `env_vars` (the env's run_environ()), the per-launch settings above
    (directories under `run_dir`, created), then the recipe's `[server.env]`."""
    per_launch = {**PER_LAUNCH, **{name: str(Path(run_dir) / sub) for name, sub in PER_LAUNCH_DIRS.items()}}
    environ = {**env_vars, **per_launch, **{str(k): str(v) for k, v in dict(server_env).items()}}
    for name in PER_LAUNCH_DIRS:  # made here: not every FlashInfer writer creates its directory
        Path(environ[name]).mkdir(parents=True, exist_ok=True)
    return environ


def record(environ: Mapping[str, str]) -> dict[str, str]:
    """What a run stores of its launch's per-launch settings (`extra["launch_env"]`): their values as
    launched, the recipe's own where it set them."""
    return {name: environ[name] for name in (*PER_LAUNCH, *PER_LAUNCH_DIRS) if name in environ}
