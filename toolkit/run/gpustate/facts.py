"""What `patchbench doctor` reads about the box before a campaign (the facts its rules judge).

`gather(recipe, runs, module)` returns a plain dict: NVML's view of each GPU the recipe would use
(its layout's CUDA positions within CUDA_VISIBLE_DEVICES, mapped as toolkit.run.gpustate.scope
maps them; without a recipe every visible GPU), with persistence, power limits, clocks set, ECC, memory, processes, PCIe link), P2P and topology
between them, whether CUPTI (torch's profiler, `patchbench profile`) is open to this user, the
recipe's GPU count and `mem-fraction-static`, and the CUDA builds of the recipe's env (its torch and
sgl-kernel, read from the env record of the recipe's newest stored run), and the host's CPU over one
second (toolkit.run.hoststate: other processes' CPU, steal). Without NVML the GPU part is
{"available": False, "reason"}. Effects: NVML queries, reading /proc/driver/nvidia/params and /proc.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from toolkit.run.gpustate import owners
from toolkit.run.gpustate.nvml import open_nvml
from toolkit.run.gpustate.sampler import visible_devices
from toolkit.run.gpustate.scope import describe_layout, layout_positions, resolve

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
    """The recipe's GPU count (server.gpus, else [target] count, else its layout's), mem-fraction-static,
    and the CUDA positions its layout uses (tp x pp, x dp without DP attention, from base-gpu-id)."""
    if recipe is None:
        return {}
    args = dict(recipe.server.args)
    frac = args.get("mem-fraction-static", args.get("mem_fraction_static"))
    positions = layout_positions(args)
    count = recipe.server.gpus
    if count is None:
        count = recipe.target.count if recipe.target else len(positions)
    return {"name": recipe.name, "gpus": count, "mem_fraction_static": None if frac is None else float(frac),
            "env": dict(recipe.server.env), "positions": positions if count != 0 else [],
            "layout": describe_layout(args)}


def env_cuda(runs: list) -> dict:
    """The CUDA builds of the env the newest run of the recipe used ({} when none is recorded)."""
    for run in reversed(runs or []):
        packages = ((run.extra or {}).get("env") or {}).get("packages")
        if packages:
            return {"run": run.run_id[:8], **cuda_of_packages(packages)}
    return {}


def gpu_facts(module: Any = None, environ: dict | None = None, positions: list[int] | None = None,
              *, matchable: bool | None = None) -> dict:
    """NVML's view of the GPUs this box would give the run: `positions` (CUDA ordinals, None: all)
    within CUDA_VISIBLE_DEVICES. Each GPU's "processes" are the foreign compute ones; "graphics"
    and "unmatched" (pids that cannot be matched in a nested PID namespace) are listed apart."""
    nv, reason = open_nvml(module)
    if nv is None:
        return {"available": False, "reason": reason}
    environ = environ if environ is not None else dict(os.environ)
    matchable = (owners.pid_namespace_nested() is not True) if matchable is None else matchable
    try:
        scope = resolve(nv, visible_devices(environ), order=environ.get("CUDA_DEVICE_ORDER"), positions=positions)
        own = owners.patchbench_tree() if matchable else set()
        gpus = []
        for d in scope.devices:
            g = nv.device(d.index, d.handle)
            now = nv.tick(d.handle)
            g["unread"].update(now.pop("unread"))
            g["getters"], g["driver_lacks"] = dict(nv.used), dict(nv.driver_lacks)
            g["cuda"], g["reading_now"] = d.cuda, now
            if d.mig_uuid:
                g["mig"] = d.mig_uuid
                mem = nv.read("mem", d.mig_handle) if d.mig_handle is not None else None
                if mem is not None:  # the instance's own slice, which the recipe's memory fraction is of
                    g["mem_total_mib"], g["mem_free_mib"] = round(mem.total / 2**20), round(mem.free / 2**20)
            procs, refused = nv.processes(d.mig_handle if d.mig_handle is not None else d.handle)
            kinds = owners.classify(procs, own, matchable=matchable)
            g["processes"], g["graphics"], g["unmatched"] = kinds["foreign"], kinds["graphics"], kinds["unmatched"]
            g["processes_unread"] = refused
            gpus.append(g)
        pairs = []
        devs = scope.devices
        for a in range(len(devs)):
            for b in range(a + 1, len(devs)):
                if devs[a].index == devs[b].index:
                    continue  # two MIG instances of one GPU
                ok, level = nv.p2p(devs[a].handle, devs[b].handle)
                pairs.append({"a": devs[a].index, "b": devs[b].index, "p2p": ok, "link": level})
        return {"available": True, **nv.driver(), "gpus": gpus, "pairs": pairs, "scope": scope.to_dict(),
                "pid_match": None if matchable else owners.UNMATCHABLE}
    finally:
        nv.close()


def gather(recipe: Any = None, runs: list | None = None, *, module: Any = None, home: Any = None) -> dict:
    """Every fact the doctor's rules read (see the module doc); "jobs": the process groups other patchbench
    processes launched on this box (owners.patchbench_jobs; run ids where `home` recorded them)."""
    rf = recipe_facts(recipe)
    environ = {**os.environ, **(rf.get("env") or {})}
    return {"nvml": gpu_facts(module, environ, rf.get("positions")), "cupti": cupti_access(), "recipe": rf,
            "env_cuda": env_cuda(runs or []), "host": host_sample(), "jobs": owners.patchbench_jobs(home)}


DOCTOR_TOP = 10  # the doctor names this many of the busiest other processes (a run's record keeps 3)


def host_sample(seconds: float = 1.0) -> dict:
    """The host's CPU over `seconds` now (toolkit.run.hoststate; this process's tree is its own): the
    DOCTOR_TOP busiest other processes named, the rest counted."""
    import time

    from toolkit.run.hoststate import HostSampler

    sampler = HostSampler(owners.patchbench_tree, top=DOCTOR_TOP).start()
    time.sleep(seconds)
    return sampler.stop()
