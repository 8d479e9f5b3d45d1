"""The host CPU's state over the benchmark window: who else used the CPUs, and what the hypervisor took.

The GPU's state (toolkit.run.gpustate) says whether the GPUs were the run's alone; the host can
slow a run as surely: sglang's scheduler, tokenizer and detokenizer are Python processes whose
per-step CPU work sets the step time at small batches, and on the CPU tier the host *is* the
device. `HostSampler(own_tree).start()` snapshots the machine's CPU times (psutil.cpu_times) and
every process's; `stop()` snapshots again and returns the window's record:

    {"available": True, "window_s", "cpus", "busy_cores", "own_cores", "foreign_cores",
     "steal_share", "foreign_top": [{"pid", "name", "cpu_s"}, ...], "foreign_rest": {"processes", "cpu_s"}}

busy_cores: the machine's CPU time in user/nice/system/irq/softirq over the window, in cores;
own_cores: that of patchbench's process tree and the server's (`own_tree()` at the stop; a process
reaped during the window counts through its parent's children times); foreign_cores: busy minus
own (everything else on the box, kernel work included; processes that came and went during the
window too); steal_share: the share of the CPU time the hypervisor gave to other guests;
foreign_top: up to `top` (3 for a run's record; the doctor names more) foreign processes with the most
CPU in the window (each at least 1% of it); foreign_rest: the other foreign processes that used CPU in
the window, how many and their CPU seconds together, so the named ones never read as all of the
foreign load. `summarize` is pure.
Effects: reads /proc through psutil; nothing written.
"""

from __future__ import annotations

import time
from typing import Callable, Iterable, Mapping

TOP = 3
_BUSY = ("user", "nice", "system", "irq", "softirq")


def cpu_snapshot() -> dict:
    """The machine's CPU times (seconds, summed over CPUs) now."""
    import psutil

    t = psutil.cpu_times()
    return {k: float(getattr(t, k, 0.0) or 0.0) for k in (*_BUSY, "idle", "iowait", "steal")}


def process_snapshot() -> dict[int, dict]:
    """pid -> {"name", "created", "cpu" (own user+system), "children" (reaped children's)} for every
    process psutil can read now."""
    import psutil

    out = {}
    for p in psutil.process_iter(["name", "create_time", "cpu_times"]):
        info = p.info
        t = info.get("cpu_times")
        if t is None:
            continue
        out[p.pid] = {"name": info.get("name") or "", "created": info.get("create_time"),
                      "cpu": t.user + t.system,
                      "children": getattr(t, "children_user", 0.0) + getattr(t, "children_system", 0.0)}
    return out


def _delta(pid: int, before: Mapping[int, dict], after: Mapping[int, dict], key: str) -> float:
    now = after[pid]
    then = before.get(pid)
    start = then[key] if then is not None and then["created"] == now["created"] else 0.0
    return max(0.0, now[key] - start)


def summarize(cpu_before: Mapping[str, float], cpu_after: Mapping[str, float], procs_before: Mapping[int, dict],
              procs_after: Mapping[int, dict], own: Iterable[int], window_s: float, cpus: int, top: int = TOP) -> dict:
    """The window's record (see the module doc) from two snapshots and the own process tree."""
    own = set(own)
    d = {k: max(0.0, cpu_after.get(k, 0.0) - cpu_before.get(k, 0.0)) for k in cpu_after}
    total = sum(d.values())
    busy = sum(d.get(k, 0.0) for k in _BUSY)
    own_s = sum(_delta(p, procs_before, procs_after, "cpu") + _delta(p, procs_before, procs_after, "children")
                for p in own if p in procs_after)
    window = max(window_s, 1e-9)
    foreign = sorted(((p, _delta(p, procs_before, procs_after, "cpu")) for p in procs_after if p not in own),
                     key=lambda x: -x[1])
    named = [(p, s) for p, s in foreign[:top] if s >= 0.01 * window]
    rest = [s for _, s in foreign[len(named):] if s > 0]
    top_rows = [{"pid": p, "name": procs_after[p]["name"], "cpu_s": round(s, 2)} for p, s in named]
    return {"available": True, "window_s": round(window_s, 3), "cpus": cpus,
            "busy_cores": round(busy / window, 3), "own_cores": round(own_s / window, 3),
            "foreign_cores": round(max(0.0, busy - own_s) / window, 3),
            "steal_share": round(d.get("steal", 0.0) / total, 4) if total > 0 else 0.0,
            "foreign_top": top_rows, "foreign_rest": {"processes": len(rest), "cpu_s": round(sum(rest), 2)}}


class HostSampler:
    """`start()` then `stop()` around the benchmark; `stop()` returns the record, or
    {"available": False, "reason"} when the host cannot be read (psutil missing or refused)."""

    def __init__(self, own_tree: Callable[[], set[int]], top: int = TOP):
        self.own_tree = own_tree
        self.top = top
        self._start = None

    def start(self) -> "HostSampler":
        try:
            self._start = (time.monotonic(), cpu_snapshot(), process_snapshot())
        except Exception as exc:  # noqa: BLE001 - no /proc (not Linux), psutil refused
            self._start = None
            self.reason = f"host CPU times unreadable: {exc}"
        return self

    def stop(self) -> dict:
        if self._start is None:
            return {"available": False, "reason": getattr(self, "reason", "not started")}
        t0, cpu0, procs0 = self._start
        try:
            import psutil

            own = self.own_tree()
            cpu1, procs1 = cpu_snapshot(), process_snapshot()
            return summarize(cpu0, cpu1, procs0, procs1, own, time.monotonic() - t0, psutil.cpu_count() or 1,
                             top=self.top)
        except Exception as exc:  # noqa: BLE001
            return {"available": False, "reason": f"host CPU times unreadable: {exc}"}
