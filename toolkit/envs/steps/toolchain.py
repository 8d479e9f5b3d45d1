"""What an nvcc build on a machine without a GPU or a full CUDA toolkit needs, set up once under
`PATCHBENCH_HOME/toolchain` and shared: cuobjdump and cuBLAS/cuRAND headers from PyPI, a link-only
libcuda stub, and the nvcc-through-ccache launcher FlashInfer's ninja uses."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from filelock import FileLock

from toolkit.envs.steps.ccache import find_compiler_cache
from toolkit.envs.steps.pipconf import PipSources
from toolkit.envs.steps.steps import Steps, version_of
from toolkit.errors import PatchbenchError


@dataclass
class ToolDir:
    root: Path
    cuobjdump: Path | None = None
    include_dirs: list[Path] = field(default_factory=list)
    libcuda_dir: Path | None = None
    launcher: Path | None = None
    packages: dict[str, str] = field(default_factory=dict)

    def record(self) -> dict:
        return {"root": str(self.root), "cuobjdump": str(self.cuobjdump) if self.cuobjdump else None,
                "cuobjdump_version": version_of([str(self.cuobjdump), "--version"])
                if self.cuobjdump else None,
                "include_dirs": [str(p) for p in self.include_dirs],
                "libcuda_stub_dir": str(self.libcuda_dir) if self.libcuda_dir else None,
                "nvcc_launcher": str(self.launcher) if self.launcher else None,
                "packages": dict(self.packages)}


_LAUNCHER = """#!/bin/sh
# patchbench: nvcc through ccache. FlashInfer's ninja passes nvcc's long dependency flags, which
# ccache does not parse (it then refuses to cache); the short spellings mean the same to nvcc.
for a in "$@"; do
  shift
  case "$a" in
    --generate-dependencies-with-compile) set -- "$@" -MD ;;
    --generate-nonsystem-dependencies-with-compile) set -- "$@" -MMD ;;
    *) set -- "$@" "$a" ;;
  esac
done
exec {ccache} "$@"
"""

_LIBCUDA_DIRS = ("lib64/stubs", "lib64", "lib/stubs", "targets/x86_64-linux/lib/stubs")
_SYSTEM_LIBCUDA = ("/usr/lib/x86_64-linux-gnu/libcuda.so", "/usr/lib64/libcuda.so",
                   "/usr/lib/aarch64-linux-gnu/libcuda.so", "/usr/lib/wsl/lib/libcuda.so")


def find_cuobjdump(home: Path | None = None, cuda_home: str | None = None) -> Path | None:
    """cuobjdump from the CUDA toolkit, PATH, or patchbench's toolchain dir (PyPI wheel)."""
    cands = []
    for h in (cuda_home, os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if h:
            cands.append(Path(h) / "bin" / "cuobjdump")
    which = shutil.which("cuobjdump")
    if which:
        cands.append(Path(which))
    homes = [home] if home else []
    if os.environ.get("PATCHBENCH_HOME"):
        homes.append(Path(os.environ["PATCHBENCH_HOME"]).expanduser())
    for h in homes:
        cands += sorted((Path(h) / "toolchain" / "py").glob("nvidia/**/bin/cuobjdump"))
    return next((c for c in cands if c.is_file() and os.access(c, os.X_OK)), None)


def _cuda_major(nvcc_version: str | None) -> int | None:
    m = re.search(r"release (\d+)\.", nvcc_version or "")
    return int(m.group(1)) if m else None


def ensure_tools(home: Path, need: Sequence[str], *, cuda_home: str | None,
                 nvcc_version: str | None, uv: str, uv_cache: Path, sources: PipSources,
                 console, steps: Steps | None = None) -> ToolDir:
    """Set up what an nvcc build on a machine without a GPU or a full CUDA toolkit needs, under
    `home/toolchain` (once; later builds reuse it), and say what was set up.

    need: "cuobjdump" (PyPI nvidia-cuda-cuobjdump unless the toolkit has one), "headers"
    (cuBLAS/cuRAND headers from PyPI nvidia-cublas/nvidia-curand unless CUDA_HOME has them),
    "stub" (a link-only libcuda.so built with the C compiler unless one exists), "launcher"
    (the nvcc-through-ccache wrapper FlashInfer's ninja uses).
    """
    root = Path(home) / "toolchain"
    root.mkdir(parents=True, exist_ok=True)
    tools = ToolDir(root=root)
    record_path = root / "toolchain.json"
    with FileLock(str(root / ".lock"), thread_local=False):
        try:
            tools.packages = json.loads(record_path.read_text()).get("packages", {})
        except (OSError, ValueError):
            tools.packages = {}
        said: list[str] = []
        install: list[str] = []
        major = _cuda_major(nvcc_version) or 13
        if "cuobjdump" in need:
            tools.cuobjdump = find_cuobjdump(home, cuda_home)
            if tools.cuobjdump is None:
                install.append("nvidia-cuda-cuobjdump" if major >= 13 else
                               "nvidia-cuda-cuobjdump-cu12")
        if "headers" in need:
            inc = Path(cuda_home or "/usr/local/cuda") / "include"
            if not ((inc / "cublasLt.h").exists() and (inc / "curand.h").exists()):
                found = _header_dirs(root)
                if found is None:
                    install += ([f"nvidia-cublas=={major}.*", "nvidia-curand"] if major >= 13
                                else ["nvidia-cublas-cu12", "nvidia-curand-cu12"])
        if install:
            log = steps.log("toolchain") if steps else None
            console.print(f"  toolchain: installing {', '.join(install)} from PyPI into {root}/py")
            argv = [uv, "pip", "install", "--no-config", "--cache-dir", str(uv_cache), "--target",
                    str(root / "py"), "--no-deps", "--link-mode", "hardlink",
                    "--python", sys.executable, *sources.uv_install_args(), *install]
            out = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
            if log:
                with open(log, "a") as f:
                    f.write(f"$ {shlex.join(argv)}\n{out.stdout}{out.stderr}[exit {out.returncode}]\n")
            if out.returncode != 0:
                msg = f"cannot install {', '.join(install)}: {out.stderr.strip()[-400:]}"
                raise PatchbenchError(msg, step="toolchain", log=log)
            for line in out.stderr.splitlines():
                m = re.match(r"\s*\+ (\S+)==(\S+)", line)
                if m:
                    tools.packages[m.group(1)] = m.group(2)
        if "cuobjdump" in need:
            tools.cuobjdump = find_cuobjdump(home, cuda_home)
            if tools.cuobjdump is None:
                raise PatchbenchError("cuobjdump not found (CUDA toolkit, PATH, or PyPI "
                                      "nvidia-cuda-cuobjdump)", step="toolchain")
            if str(tools.cuobjdump).startswith(str(root)):
                said.append(f"cuobjdump from PyPI ({tools.cuobjdump})")
        if "headers" in need:
            inc = Path(cuda_home or "/usr/local/cuda") / "include"
            if not ((inc / "cublasLt.h").exists() and (inc / "curand.h").exists()):
                found = _header_dirs(root)
                if found is None:
                    raise PatchbenchError("cuBLAS/cuRAND headers not found after installing "
                                          "nvidia-cublas/nvidia-curand", step="toolchain")
                tools.include_dirs = found
                said.append("cuBLAS/cuRAND headers from PyPI nvidia-cublas/nvidia-curand "
                            f"(-isystem {' '.join(map(str, found))})")
        if "stub" in need:
            if not has_libcuda(cuda_home):
                stub = root / "stub" / "libcuda.so"
                if not stub.exists():
                    stub.parent.mkdir(parents=True, exist_ok=True)
                    (stub.parent / "empty.c").write_text("/* link-only libcuda stub */\n")
                    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc") or "cc"
                    tmp = stub.with_suffix(f".so.{os.getpid()}")
                    out = subprocess.run([cc, "-shared", "-Wl,-soname,libcuda.so.1", "-o", str(tmp),
                                          str(stub.parent / "empty.c")], capture_output=True,
                                         text=True, stdin=subprocess.DEVNULL)
                    if out.returncode != 0:
                        raise PatchbenchError(f"cannot build the libcuda stub with {cc}: "
                                              f"{out.stderr.strip()[-300:]}", step="toolchain")
                    os.replace(tmp, stub)
                tools.libcuda_dir = stub.parent
                said.append(f"link-only libcuda.so stub ({stub}; soname libcuda.so.1; nothing "
                            "can run it here)")
        if "launcher" in need:
            cache = find_compiler_cache()
            if cache is not None and cache.kind == "ccache":
                launcher = root / "bin" / "nvcc-ccache"
                text = _LAUNCHER.format(ccache=shlex.quote(str(cache.path)))
                if not launcher.exists() or launcher.read_text() != text:
                    launcher.parent.mkdir(parents=True, exist_ok=True)
                    tmp = launcher.with_name(f".nvcc-ccache.{os.getpid()}")
                    tmp.write_text(text)
                    tmp.chmod(0o755)
                    os.replace(tmp, launcher)
                tools.launcher = launcher
            elif cache is not None:
                tools.launcher = cache.path
        record_path.write_text(json.dumps({"packages": tools.packages}, indent=2) + "\n")
    if said:
        console.print("  toolchain (set up by patchbench under "
                      f"{root}): " + "; ".join(said))
    return tools


def _header_dirs(root: Path) -> list[Path] | None:
    dirs = []
    for header in ("cublasLt.h", "curand.h"):
        hits = sorted((root / "py").glob(f"nvidia/**/include/{header}"))
        if not hits:
            return None
        dirs.append(hits[0].parent)
    return list(dict.fromkeys(dirs))


def has_libcuda(cuda_home: str | None) -> bool:
    if cuda_home and any((Path(cuda_home) / d / "libcuda.so").exists() for d in _LIBCUDA_DIRS):
        return True
    return any(Path(p).exists() for p in _SYSTEM_LIBCUDA)
