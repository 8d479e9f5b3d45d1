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

The launch's temporary files (TMPDIR, PROMETHEUS_MULTIPROC_DIR) go to a directory of its own that is
removed when the launch ends (toolkit.run.scratch).

The recipe's `[server.env]` comes last and may set any of them (the deployment's reuse, said in the run).

What the calling shell hands the server is recorded too (`record`'s "inherited"): the variables sglang,
NCCL, Triton, torch and CUDA read at run time (`RUNTIME_PREFIXES`) that neither the env, this module nor
the recipe set. sglang 0.5.23 reads dozens (SGLANG_ENABLE_PCIE_IPC_ALLREDUCE, SGLANG_FLASHINFER_AUTOTUNE_
EXTEND, SGLANG_ENABLE_POST_CAPTURE_KV_SIZING, ...; TRITON_CACHE_AUTOTUNING=1 keeps every Triton
autotuner's winners across launches), so a variable exported in one shell and not in the next is a
difference between two runs; `compare` names it (toolkit.analysis.provenance).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

from toolkit.run import scratch

PER_LAUNCH = {"SGLANG_FLASHINFER_AUTOTUNE_CACHE": "0", "FLA_CACHE_RESULTS": "0"}
PER_LAUNCH_DIRS = {"FLASHINFER_AUTOTUNE_DIR": "flashinfer-autotune"}  # under the launch's run directory


def launch_environ(env_vars: Mapping[str, str], server_env: Mapping, run_dir: Path) -> dict[str, str]:
    """The launch's environment: `env_vars` (the env's run_environ()), the per-launch settings above
    (directories under `run_dir`, created), its scratch directory's variables (scratch_dir(run_dir),
    created by the spawn that uses it), then the recipe's `[server.env]`."""
    per_launch = {**PER_LAUNCH, **{name: str(Path(run_dir) / sub) for name, sub in PER_LAUNCH_DIRS.items()}}
    environ = {**env_vars, **per_launch, **scratch.variables(scratch_dir(run_dir)),
               **{str(k): str(v) for k, v in dict(server_env).items()}}
    for name in PER_LAUNCH_DIRS:  # made here: not every FlashInfer writer creates its directory
        Path(environ[name]).mkdir(parents=True, exist_ok=True)
    return environ


def scratch_dir(run_dir: Path) -> Path:
    """The directory of the launch's temporary files, owned and removed by patchbench (toolkit.run.scratch)."""
    return scratch.path_for(run_dir)


RUNTIME_PREFIXES = ("SGLANG_", "SGL_", "NCCL_", "TRITON_", "TORCH", "PYTORCH_", "CUDA_", "CUBLAS", "CUDNN_",
                    "NVSHMEM_", "TILELANG_", "CUTE_", "FLA_", "DG_", "OMP_", "MKL_", "HF_")


def record(environ: Mapping[str, str], server_env: Mapping = (), ambient: Mapping[str, str] | None = None) -> dict:
    """What a run stores of its launch's settings (`extra["launch_env"]`): the per-launch ones as
    launched (the recipe's own where it set them), and under "inherited" the run-time variables the
    launch took unchanged from the calling shell (`ambient`, default os.environ) that the recipe's
    `[server.env]` does not set."""
    ambient = os.environ if ambient is None else ambient
    own = {*PER_LAUNCH, *PER_LAUNCH_DIRS, *(str(k) for k in dict(server_env))}
    out: dict = {name: environ[name] for name in (*PER_LAUNCH, *PER_LAUNCH_DIRS) if name in environ}
    out["inherited"] = {k: v for k, v in sorted(environ.items())
                        if k.startswith(RUNTIME_PREFIXES) and k not in own and ambient.get(k) == v}
    return out


def inherited_differences(a: Mapping | None, b: Mapping | None) -> list[str]:
    """"shell variable SGLANG_X: unset -> 1" for each inherited variable two runs' launches differ in
    (runs stored before the record say nothing)."""
    if not a or not b or "inherited" not in a or "inherited" not in b:
        return []
    ia, ib = a["inherited"], b["inherited"]
    return [f"shell variable {k}: {ia.get(k, 'unset')} -> {ib.get(k, 'unset')}"
            for k in sorted(set(ia) | set(ib)) if ia.get(k) != ib.get(k)]
