"""What `patchbench doctor` reads about the box before a campaign (the facts its rules judge).

`gather(recipe, runs, module)` returns a plain dict: NVML's view of each GPU the recipe would use
(persistence, power limits, clocks set, ECC, memory, processes, PCIe link), P2P and topology
between them, whether CUPTI (torch's profiler, `patchbench profile`) is open to this user, the
recipe's GPU count and `mem-fraction-static`, and the CUDA builds of the recipe's env (its torch and
sgl-kernel, read from the env record of the recipe's newest stored run). Without NVML the GPU part
is {"available": False, "reason"}. Effects: NVML queries, reading /proc/driver/nvidia/params.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from toolkit.run.gpustate.nvml import open_nvml
from toolkit.run.gpustate.sampler import patchbench_tree, visible_devices

PARAMS = Path("/proc/driver/nvidia/params")
_CU_TAG = re.compile(r"\+cu(\d+)(\d)\b")


def cupti_access(params: Path = PARAMS) -> dict:
    """{"admin_only": profiling restricted to admins (None: unknown), "root": running as root}."""
    admin_only = None
    try:
        for line in params.read_text().splitlines():
            if line.startswith("RmProfilingAdminOnly"):
                admin_only = line.split(":", 1)[1].strip() == "1"
    except OSError:
        pass
    return {"admin_only": admin_only, "root": hasattr(os, "geteuid") and os.geteuid() == 0}


def cuda_of_packages(lines: list[str]) -> dict:
    """CUDA builds named in an env's freeze lines: torch / sgl-kernel local tags (+cu128 -> 12.8) and
    the CUDA runtime wheel's version."""
    out: dict[str, str] = {}
    for line in lines or []:
        name, _, version = str(line).partition("==")
        name = re.sub(r"[-_.]+", "-", name.strip()).lower()
        tag = _CU_TAG.search(version)
        if name in ("torch", "sgl-kernel", "sglang-kernel") and tag:
            out[name] = f"{tag.group(1)}.{tag.group(2)}"
        elif name.startswith("nvidia-cuda-runtime") and version:
            out["cuda-runtime"] = ".".join(version.split(".")[:2])
    return out


def recipe_facts(recipe: Any) -> dict:
    """The recipe's GPU count (server.gpus, else [target] count, else tp-size) and mem-fraction-static."""
    if recipe is None:
        return {}
    args = dict(recipe.server.args)
    frac = args.get("mem-fraction-static", args.get("mem_fraction_static"))
    tp = args.get("tp-size", args.get("tp", 1))
    count = recipe.server.gpus
    if count is None:
        count = recipe.target.count if recipe.target else tp
    return {"name": recipe.name, "gpus": count, "mem_fraction_static": None if frac is None else float(frac),
            "env": dict(recipe.server.env)}


def env_cuda(runs: list) -> dict:
    """The CUDA builds of the env the newest run of the recipe used ({} when none is recorded)."""
    for run in reversed(runs or []):
        packages = ((run.extra or {}).get("env") or {}).get("packages")
        if packages:
            return {"run": run.run_id[:8], **cuda_of_packages(packages)}
    return {}


def gpu_facts(module: Any = None, environ: dict | None = None) -> dict:
    """NVML's view of the GPUs this box would give the run (CUDA_VISIBLE_DEVICES, else all)."""
    nv, reason = open_nvml(module)
    if nv is None:
        return {"available": False, "reason": reason}
    try:
        refs = visible_devices(environ if environ is not None else dict(os.environ))
        refs = refs if refs is not None else [str(i) for i in range(nv.count())]
        handles = [f for f in (nv.handle_of(r) for r in refs) if f is not None and f[1] is not None]
        own = patchbench_tree()
        gpus = []
        for i, h in handles:
            g = nv.device(i, h)
            g["processes"] = [p for p in nv.processes(h) if p["pid"] not in own]
            gpus.append(g)
        pairs = []
        for a in range(len(handles)):
            for b in range(a + 1, len(handles)):
                ok, level = nv.p2p(handles[a][1], handles[b][1])
                pairs.append({"a": handles[a][0], "b": handles[b][0], "p2p": ok, "link": level})
        return {"available": True, **nv.driver(), "gpus": gpus, "pairs": pairs}
    finally:
        nv.close()


def gather(recipe: Any = None, runs: list | None = None, *, module: Any = None) -> dict:
    """Every fact the doctor's rules read (see the module doc)."""
    rf = recipe_facts(recipe)
    environ = {**os.environ, **(rf.get("env") or {})}
    return {"nvml": gpu_facts(module, environ), "cupti": cupti_access(), "recipe": rf, "env_cuda": env_cuda(runs or [])}
