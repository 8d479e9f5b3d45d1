"""Sample the run's GPUs on a background thread over the benchmark window (NVML, in patchbench's own
process, every `interval_s`, 0.2 s by default).

`Sampler(environ=..., positions=...).start()` resolves the run's GPUs (toolkit.run.gpustate.scope:
the layout's CUDA positions within CUDA_VISIBLE_DEVICES, mapped to NVML by UUID / PCI bus id / MIG),
reads what each GPU is (name, power limit, persistence, ECC, clocks set) and its ECC error count,
then one reading per GPU per tick (clocks, power, temperature, clock-event reasons, utilization,
memory used); every `slow_every` ticks also the processes on the GPUs (toolkit.run.gpustate.owners:
outside patchbench's tree and the server's, compute ones are "foreign", graphics ones are listed
apart, and in a nested PID namespace none is matched) and the PCIe link. `stop()` returns the
record: {"available": True, "interval_s", "driver", "cuda_driver", "scope", "gpus": [device facts +
"series" (columns) + "pcie_seen" + "ecc_uncorrected_end" + "unread"], "t": [s], "foreign_processes",
"graphics_processes", "unmatched_processes", "pid_match"}, or {"available": False, "reason"}.
Effects: a daemon thread and NVML queries; nothing written.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable, Mapping

from toolkit.run.gpustate import owners
from toolkit.run.gpustate.nvml import open_nvml
from toolkit.run.gpustate.scope import resolve, why_empty

FIELDS = ("sm_mhz", "mem_mhz", "power_w", "temp_c", "reasons", "util_pct", "mem_used_mib")
DEFAULT_INTERVAL_S = 0.2
patchbench_tree = owners.patchbench_tree


def visible_devices(environ: Mapping) -> str | None:
    """CUDA_VISIBLE_DEVICES as CUDA reads it: None when unset (every GPU); set but empty: none."""
    value = environ.get("CUDA_VISIBLE_DEVICES")
    return None if value is None else str(value)


class Sampler:
    """Start/stop NVML sampling; `stop()` returns the record (see the module doc)."""

    def __init__(self, *, environ: Mapping | None = None, positions: list[int] | None = None,
                 interval_s: float = DEFAULT_INTERVAL_S, own_tree: Callable[[], set[int]] = patchbench_tree,
                 module: Any = None, slow_every: int = 5, matchable: bool | None = None):
        self.environ = dict(os.environ if environ is None else environ)
        self.positions, self.interval_s, self.own_tree = positions, interval_s, own_tree
        self.module, self.slow_every = module, max(1, slow_every)
        self.matchable = (owners.pid_namespace_nested() is not True) if matchable is None else matchable
        self.nv = None
        self.reason = "not started"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> "Sampler":
        self.nv, self.reason = open_nvml(self.module)
        if self.nv is None:
            return self
        self.scope = resolve(self.nv, visible_devices(self.environ), order=self.environ.get("CUDA_DEVICE_ORDER"),
                             positions=self.positions)
        if not self.scope.devices:
            self.nv.close()
            self.nv, self.reason = None, why_empty(self.scope) or "no NVIDIA GPU for the run"
            return self
        self.gpus = []
        for d in self.scope.devices:
            g = self.nv.device(d.index, d.handle)
            g.update({"cuda": d.cuda, "series": {f: [] for f in FIELDS}, "pcie_seen": dict(g["pcie"])})
            if d.mig_uuid:
                g["mig"] = d.mig_uuid
            self.gpus.append(g)
        self.t: list[float] = []
        self.seen: dict[str, dict[tuple[int, int], dict]] = {"foreign": {}, "graphics": {}, "unmatched": {}}
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._loop, name="patchbench-gpu-state", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        n = 0
        while True:
            self._tick(n)
            n += 1
            if self._stop.wait(self.interval_s):
                return

    def _tick(self, n: int) -> None:
        self.t.append(round(time.monotonic() - self._t0, 3))
        slow = n % self.slow_every == 0
        own = self.own_tree() if slow and self.matchable else set()
        for g, d in zip(self.gpus, self.scope.devices):
            reading = self.nv.tick(d.handle)
            for f in FIELDS:
                g["series"][f].append(reading[f])
            for f, why in reading["unread"].items():
                g["unread"].setdefault(f, why)  # the first reason a reading was missing, kept
            if slow:
                self._slow(g, d, own)

    def _slow(self, g: dict, d: Any, own: set[int]) -> None:
        procs, refused = self.nv.processes(d.mig_handle if d.mig_handle is not None else d.handle)
        for why in refused:  # a list NVML refused: the run's foreign processes are unknown, not none
            g["unread"].setdefault("processes", why)
        for kind, found in owners.classify(procs, own, matchable=self.matchable).items():
            if kind == "own":
                continue
            for p in found:
                key = (g["index"], p["pid"])
                if key not in self.seen[kind]:
                    self.seen[kind][key] = {"gpu": g["index"], "pid": p["pid"], "name": owners.name_of(p["pid"]),
                                            "used_mib": p["used_mib"]}
        link = self.nv.link(d.handle)
        seen = g["pcie_seen"]
        for k in ("gen", "width"):
            if link.get(k) is not None and (seen.get(k) is None or link[k] > seen[k]):
                seen[k] = link[k]

    def stop(self) -> dict:
        """End sampling and return the record (one last tick first, so a short window has one)."""
        if self.nv is None:
            return {"available": False, "reason": self.reason}
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if not self.t:
            self._tick(0)
        for g, d in zip(self.gpus, self.scope.devices):
            g["ecc_uncorrected_end"] = self.nv.ecc_uncorrected(d.handle)
            g["getters"] = dict(self.nv.used)  # reading -> the function that answered it

        def listed(kind):
            return sorted(self.seen[kind].values(), key=lambda p: (p["gpu"], p["pid"]))

        record = {"available": True, "interval_s": self.interval_s, **self.nv.driver(), "scope": self.scope.to_dict(),
                  "t": self.t, "gpus": self.gpus, "foreign_processes": listed("foreign"),
                  "graphics_processes": listed("graphics"), "unmatched_processes": listed("unmatched"),
                  "pid_match": None if self.matchable else owners.UNMATCHABLE}
        self.nv.close()
        self.nv, self.reason = None, "stopped"
        return record
