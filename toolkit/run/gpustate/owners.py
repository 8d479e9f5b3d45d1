"""Whose processes are on the run's GPUs: patchbench's own tree (the server and its children),
graphics clients, and foreign compute jobs; and whether NVML's pids can be matched at all.

NVML reports pids in the host's PID namespace (the driver has no PID-namespace support). In a
container without the host PID namespace (`pid_namespace_nested()`: this process's PID namespace is
not the kernel's initial one) those
pids mean nothing here, so `classify` matches none of them and says so: nothing is called foreign
or own by guess. Graphics processes (Xorg, a desktop on a workstation card) are reported apart,
never as foreign compute jobs. `patchbench_jobs`: the process groups other patchbench processes launched
(their supervisors), running campaigns' and strays alike. Effects: reads /proc, psutil and
HOME/live records; `classify` is pure.
"""

from __future__ import annotations

import os
from pathlib import Path

UNMATCHABLE = ("NVML reports host PIDs and this process runs in a nested PID namespace (a container without "
               "the host's): the GPU's processes cannot be matched to the server's, none is called foreign")


def tree_of(pid: int) -> set[int]:
    """`pid` and every descendant it has now (empty when it is gone or psutil refuses)."""
    try:
        import psutil

        return {pid} | {c.pid for c in psutil.Process(pid).children(recursive=True)}
    except Exception:  # noqa: BLE001 - gone, or another namespace
        return set()


def patchbench_tree(server_pid: int | None = None) -> set[int]:
    """This process and its descendants, plus the server's tree when its pid is given (a server
    started in its own session stays patchbench's)."""
    pids = {os.getpid()} | tree_of(os.getpid())
    if server_pid:
        pids |= tree_of(server_pid)
    return pids


INIT_PID_NS = "pid:[4026531836]"  # the kernel's fixed inode of the initial PID namespace (PROC_PID_INIT_INO)


def pid_namespace_nested(status: Path = Path("/proc/self/status"), ns: Path = Path("/proc/self/ns/pid")) -> bool | None:
    """Whether this process lives in a PID namespace below the host's (None: cannot tell). A
    container mounts its own /proc, where NSpid lists one pid only (proc(5): the first is relative to
    the namespace that mounted procfs), so the namespace's inode decides: any but the initial one's
    is nested. NSpid with more than one pid (a /proc of an outer namespace) is nested too."""
    try:
        if os.readlink(ns) != INIT_PID_NS:
            return True
        outer = False
    except OSError:
        outer = None
    try:
        for line in status.read_text().splitlines():
            if line.startswith("NSpid:"):
                return len(line.split()[1:]) > 1 or bool(outer)
    except OSError:
        return outer
    return outer


def name_of(pid: int) -> str | None:
    try:
        import psutil

        return psutil.Process(pid).name()
    except Exception:  # noqa: BLE001 - another pid namespace or gone
        return None


def classify(processes: list[dict], own: set[int], *, matchable: bool = True) -> dict[str, list[dict]]:
    """{"foreign": compute processes outside `own`, "graphics": graphics-only processes, "own": ours,
    "unmatched": compute processes whose pid cannot be matched (`matchable` False)}."""
    out: dict[str, list[dict]] = {"foreign": [], "graphics": [], "own": [], "unmatched": []}
    for p in processes:
        if p.get("kind") == "graphics":
            out["graphics"].append(p)
        elif not matchable:
            out["unmatched"].append(p)
        elif p["pid"] in own:
            out["own"].append(p)
        else:
            out["foreign"].append(p)
    return out


def _supervisor_owner(cmdline: list[str]) -> int | None:
    """The patchbench pid a toolkit/run/supervisor.py command line names (`supervisor.py PARENT -- ARGV`)."""
    for i, arg in enumerate(cmdline[:-1]):
        p = Path(arg)
        if p.name == "supervisor.py" and p.parent.name == "run" and cmdline[i + 1].isdigit():
            return int(cmdline[i + 1])
    return None


def patchbench_jobs(home: Path | None = None) -> list[dict]:
    """Every process group a patchbench launched on this box (its server, or a one-batch benchmark: the
    group of a toolkit/run/supervisor.py), whichever PATCHBENCH_HOME: {"pgid", "owner" (the patchbench
    pid), "alive" (that patchbench still runs: another campaign; else the group is a stray it left),
    "pids" (the group's and, while it runs, the owner's tree: its benchmark client), "run_id" (from
    HOME/live/<pgid>.json when `home` recorded it, else None)}. Groups this process launched are left out."""
    import json

    import psutil

    jobs = []
    for p in psutil.process_iter(["pid", "cmdline", "create_time"]):
        owner = _supervisor_owner(p.info.get("cmdline") or [])
        if owner is None or owner == os.getpid():
            continue
        try:
            alive = psutil.Process(owner).create_time() <= p.info["create_time"]  # not a reused pid
        except psutil.Error:
            alive = False
        pids = {p.info["pid"]} | tree_of(p.info["pid"]) | (tree_of(owner) if alive else set())
        for q in psutil.process_iter(["pid"]):
            try:
                if os.getpgid(q.info["pid"]) == p.info["pid"]:
                    pids.add(q.info["pid"])
            except OSError:
                pass
        run_id = None
        if home is not None:
            try:
                run_id = json.loads((Path(home) / "live" / f"{p.info['pid']}.json").read_text()).get("run_id")
            except (OSError, ValueError, AttributeError):
                pass
        jobs.append({"pgid": p.info["pid"], "owner": owner, "alive": alive, "pids": sorted(pids), "run_id": run_id})
    return jobs
