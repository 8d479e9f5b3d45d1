"""What builds and runs an env, probed now (cheap: it runs on every ensure_env, reuse included):
the interpreter (through `toolkit/probes/interpreter_probe.py`, run by that interpreter), nvcc, uv.

An interpreter's probe is kept for the process while nothing it read has changed (the interpreter,
its site dirs, torch's version file: installing, removing or upgrading a package changes its site
dir): a sweep, bisect or attribute asks once per env, and started a Python each time (~0.17 CPU-s,
0.4-1 s on a busy box) to learn the same thing again."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from toolkit.errors import BadInput, PatchbenchError
from toolkit.recipe.spec import BuildSpec
from toolkit.resources import PROBES_DIR

PROBE = PROBES_DIR / "interpreter_probe.py"


_PROBED: dict[str, tuple[tuple, dict]] = {}


def _signature(python: str, probed: dict) -> tuple:
    """What a probe of `python` read, as (path, mtime_ns, size) of each: a change means probe again."""
    paths = [python, *probed.get("site_dirs", [])]
    torch = probed.get("torch") or {}
    if torch.get("path"):
        paths.append(os.path.join(torch["path"], "version.py"))
    out = []
    for path in paths:
        try:
            st = os.stat(path)
            out.append((path, st.st_mtime_ns, st.st_size))
        except OSError:
            out.append((path, None, None))
    return tuple(out)


def probe_python(python: str | os.PathLike) -> dict:
    """Version, real interpreter, site dirs, package set and torch of an interpreter (kept for the
    process while its files are as they were; see the module doc)."""
    key = str(python)
    kept = _PROBED.get(key)
    if kept is not None and _signature(key, kept[1]) == kept[0]:
        return json.loads(json.dumps(kept[1]))  # a copy: callers may change theirs
    probed = _probe_python(key)
    _PROBED[key] = (_signature(key, probed), probed)
    return json.loads(json.dumps(probed))


def _probe_python(python: str) -> dict:
    try:
        out = subprocess.run([str(python), "-I", str(PROBE)], capture_output=True, text=True,
                             timeout=120, stdin=subprocess.DEVNULL)
    except OSError as e:
        raise BadInput(f"cannot run Python interpreter {python}: {e}") from e
    if out.returncode != 0:
        raise BadInput(f"Python interpreter {python} failed: {out.stderr.strip()[-500:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def uv_bin() -> str:
    try:
        import uv  # the `uv` PyPI package ships the binary

        return uv.find_uv_bin()
    except Exception:  # noqa: BLE001 - any failure means: look on PATH
        found = shutil.which("uv")
        if not found:
            raise PatchbenchError("uv is not installed (pip install uv)") from None
        return found


def resolve_python(spec: BuildSpec) -> str:
    """The interpreter the env is built on: overlay -> base_python; full -> python or ours."""
    want = spec.base_python if spec.mode == "overlay" else spec.python
    if not want:
        return sys.executable
    if os.sep in want or Path(want).exists():
        p = Path(want).expanduser()
        if not p.exists():
            raise BadInput(f"Python interpreter {want} does not exist")
        return str(p.absolute())
    found = subprocess.run([uv_bin(), "python", "find", "--no-config", "--no-python-downloads", want],
                           capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if found.returncode != 0 or not found.stdout.strip():
        raise BadInput(f"no Python interpreter found for {want!r}",
                       hint="give a path, or install that version")
    return found.stdout.strip().splitlines()[-1]


def find_nvcc(environ: Mapping[str, str] | None = None) -> Path | None:
    """The real nvcc: $CUDA_HOME/bin, /usr/local/cuda/bin, then PATH (often a wrapper)."""
    environ = os.environ if environ is None else environ
    for home in (environ.get("CUDA_HOME"), environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and (Path(home) / "bin" / "nvcc").is_file():
            return Path(home) / "bin" / "nvcc"
    found = shutil.which("nvcc", path=environ.get("PATH"))
    return Path(found) if found else None


@dataclass(frozen=True)
class Toolchain:
    """What builds and runs the env, as probed now."""

    python: dict  # probe_python() of the interpreter the env is built on
    nvcc: str | None  # nvcc path
    nvcc_version: str | None  # "Cuda compilation tools, release 13.0, V13.0.88"
    cuda_home: str | None
    uv: str

    def identity(self, mode: str) -> dict:
        py = self.python
        d: dict[str, Any] = {
            "python": {"version": py["version"], "implementation": py["implementation"]},
            "nvcc": self.nvcc_version,
        }
        if mode == "overlay":  # the base's packages are part of what runs
            d["base"] = {
                "python": py["real_executable"],
                "site_dirs": py["site_dirs"],
                "torch": None if not py["torch"] else
                {"version": py["torch"]["version"], "cuda": py["torch"]["cuda"]},
                "dists_sha256": py["dists_sha256"],
            }
        return d


def probe_toolchain(spec: BuildSpec) -> Toolchain:
    python = probe_python(resolve_python(spec))
    nvcc = find_nvcc()
    version = None
    if nvcc:
        out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True,
                             stdin=subprocess.DEVNULL)
        lines = [ln.strip() for ln in out.stdout.splitlines() if "release" in ln or "Build" in ln]
        version = " / ".join(lines) or out.stdout.strip()
    return Toolchain(python=python, nvcc=str(nvcc) if nvcc else None, nvcc_version=version,
                     cuda_home=str(nvcc.parent.parent) if nvcc else None, uv=uv_bin())
