"""Machine provenance: GPUs (names, UUIDs, driver, CUDA, clocks, topology), CPU and host."""

from __future__ import annotations

import functools
import platform
import shutil
import socket
import subprocess


def _run(argv: list[str], timeout: float = 20) -> str | None:
    if not shutil.which(argv[0]):
        return None
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


def gpus() -> list[dict]:
    """One dict per GPU from nvidia-smi; [] without a driver."""
    fields = ["index", "name", "uuid", "driver_version", "memory.total", "clocks.max.sm", "clocks.max.mem",
              "pci.bus_id", "power.limit"]
    out = _run(["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"])
    if not out:
        return []
    rows = []
    for line in out.strip().splitlines():
        values = [v.strip() for v in line.split(",")]
        rows.append(dict(zip(fields, values)))
    return rows


def has_cuda_gpu() -> bool:
    return bool(gpus())


def cpu_has_amx() -> bool | None:
    """Whether this CPU offers Intel AMX tiles (the `amx_tile` flag of /proc/cpuinfo); None where unknown."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return "amx_tile" in line.split()
    except OSError:
        return None
    return None


def gpu_key(gpu_rows: list[dict]) -> str:
    """'8x NVIDIA RTX PRO 6000 Blackwell ...' or 'none': what results must share to be compared."""
    if not gpu_rows:
        return "none"
    names = sorted({g.get("name", "?") for g in gpu_rows})
    return " + ".join(f"{sum(1 for g in gpu_rows if g.get('name') == n)}x {n}" for n in names)


@functools.cache
def this_gpu_key() -> str:
    """`gpu_key(gpus())` of this machine, probed once per process (what its new runs will store)."""
    return gpu_key(gpus())


def cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def provenance() -> dict:
    g = gpus()
    smi = _run(["nvidia-smi"]) or ""
    cuda = None
    for token in smi.split("|"):
        if "CUDA Version" in token:
            cuda = token.split("CUDA Version:")[-1].strip().split()[0]
    import os

    return {
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "gpus": g,
        "gpu_key": gpu_key(g),
        "driver": g[0]["driver_version"] if g else None,
        "cuda": cuda,
        "topology": _run(["nvidia-smi", "topo", "-m"]),
    }
