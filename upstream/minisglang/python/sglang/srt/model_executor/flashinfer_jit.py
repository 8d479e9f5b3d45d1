"""The miniature's stand-in for FlashInfer's run-time JIT as sglang 0.5.23 drives it on an SM120 box,
for the contract patchbench reads (where a module lands, which arch it holds), not for any speed.

What it reproduces, read against sglang 0.5.23 and FlashInfer 0.7.2:

- FlashInfer reads FLASHINFER_CUDA_ARCH_LIST once, when it is imported (compilation_context.py,
  CompilationContext.__init__; jit/core.py builds `current_compilation_context` at import; it re-reads
  the variable only when that set came out empty, refresh_current_compilation_context), names its
  workspace from that list, $FLASHINFER_WORKSPACE_BASE/.cache/flashinfer/<version>/<archs>/cached_ops
  (jit/env.py, _get_workspace_dir_name: "120f" for 12.0f), and builds each module for it into
  cached_ops/<name>/<name>.so (jit/core.py, JitSpec.jit_library_path).
- sglang's model load calls set_cuda_arch (srt/model_executor/model_runner.py, load_model), which sets
  FLASHINFER_CUDA_ARCH_LIST to the device's "<major>.<minor>" plus "a" from major 9 up
  (srt/utils/common.py). sglang 0.5.23's scheduler imports FlashInfer before that (importing
  sglang.srt.managers.scheduler imports flashinfer.jit.core), so the recipe's list holds there; a
  process that imports FlashInfer after the reset (a child inheriting the environment, a patch that
  defers the import) builds for the device's "a" arch instead.

The miniature has no GPU: `SGLANG_MINI_CUDA_CAPABILITY` ("12.0") is the device set_cuda_arch sees
(unset: no set_cuda_arch, as without flashinfer or a CUDA device); `SGLANG_MINI_FLASHINFER_IMPORT`
"after" imports FlashInfer after set_cuda_arch (default: before, as 0.5.23's scheduler does); and
`SGLANG_MINI_FLASHINFER_JIT` names a .cu file the module is compiled from with nvcc ($CUDA_HOME/bin or
PATH). A module whose .so exists and whose flags did not change is loaded as it is (FlashInfer writes
build.ninja beside it and ninja rebuilds only when the command changed). Either way the server process
dlopens it and keeps it, as FlashInfer does (tvm_ffi.load_module): a CUDA .so loads without a GPU (its
fatbin is registered, nothing runs).
"""

from __future__ import annotations

import ctypes
import logging
import os
import shutil
import subprocess
from pathlib import Path

logger = logging.getLogger("flashinfer.jit")

VERSION = "0.7.2"
_LOADED: list = []  # the modules this process loaded (never unloaded)


def _arches(value: str) -> list[tuple[int, str]]:
    out = []
    for arch in value.split():
        major, minor = arch.split(".")
        out.append((int(major), minor))
    return sorted(set(out))


def _set_cuda_arch() -> None:
    cap = os.environ.get("SGLANG_MINI_CUDA_CAPABILITY")
    if cap:
        major = int(cap.split(".")[0])
        os.environ["FLASHINFER_CUDA_ARCH_LIST"] = f"{cap}{'a' if major >= 9 else ''}"


def _nvcc() -> str:
    home = os.environ.get("CUDA_HOME")
    if home and (Path(home) / "bin" / "nvcc").is_file():
        return str(Path(home) / "bin" / "nvcc")
    found = shutil.which("nvcc")
    if not found:
        raise RuntimeError("SGLANG_MINI_FLASHINFER_JIT needs nvcc ($CUDA_HOME/bin or PATH)")
    return found


def maybe_build() -> None:
    source = os.environ.get("SGLANG_MINI_FLASHINFER_JIT")
    if not source:
        return
    late = os.environ.get("SGLANG_MINI_FLASHINFER_IMPORT") == "after"
    if late:
        _set_cuda_arch()  # model load first, FlashInfer imported afterwards
    now = _arches(os.environ.get("FLASHINFER_CUDA_ARCH_LIST", "12.0f"))  # FlashInfer's import reads the list
    if not late:
        _set_cuda_arch()  # model load after FlashInfer's import: too late for its compilation context
    base = Path(os.path.expanduser(os.environ.get("FLASHINFER_WORKSPACE_BASE", "~")))
    workspace = base / ".cache" / "flashinfer" / VERSION / "_".join(f"{m}{n}" for m, n in now)
    name = "mini_" + Path(source).stem
    so = workspace / "cached_ops" / name / f"{name}.so"
    gencode = [f"-gencode=arch=compute_{m}{n},code=sm_{m}{n}" for m, n in now]
    ninja = so.parent / "build.ninja"
    if so.exists() and ninja.is_file() and ninja.read_text() == " ".join(gencode):
        logger.info("Loading JIT module %s from %s", name, so)
        _LOADED.append(ctypes.CDLL(str(so)))
        return
    so.parent.mkdir(parents=True, exist_ok=True)
    ninja.write_text(" ".join(gencode))
    logger.info("Building JIT module %s; this can take several minutes on first use.", name)
    subprocess.run([_nvcc(), "-shared", "-Xcompiler", "-fPIC", *gencode, source, "-o", str(so)],
                   check=True, stdin=subprocess.DEVNULL)
    logger.info("JIT module %s built for %s: %s", name, " ".join(f"sm_{m}{n}" for m, n in now), so)
    _LOADED.append(ctypes.CDLL(str(so)))
