"""Sample the run's GPUs on a background thread over the benchmark window (NVML, in patchbench's own
process, every `interval_s`, 0.2 s by default).

`Sampler(devices=...).start()` reads what each GPU is (name, power limit, persistence, ECC, clocks
set) and its ECC error count, then one reading per GPU per tick (clocks, power, temperature,
clock-event reasons, utilization, memory used); every `slow_every` ticks also the processes on the
GPUs (those outside patchbench's own process tree, which holds the server, are "foreign") and the
PCIe link. `stop()` returns the record: {"available": True, "interval_s", "driver", "cuda_driver",
"gpus": [device facts + "series" (columns) + "pcie_seen" + "ecc_uncorrected_end"], "t": [s],
"foreign_processes": [...]}, or {"available": False, "reason"} when there is no GPU state.
Effects: a daemon thread and NVML queries; nothing written.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable

from toolkit.run.gpustate.nvml import open_nvml

FIELDS = ("sm_mhz", "mem_mhz", "power_w", "temp_c", "reasons", "util_pct", "mem_used_mib")
DEFAULT_INTERVAL_S = 0.2


def patchbench_tree() -> set[int]:
    """This process and every descendant (the server's process tree, one-batch, the client)."""
    pids = {os.getpid()}
    try:
        import psutil

        pids |= {c.pid for c in psutil.Process().children(recursive=True)}
    except Exception:  # noqa: BLE001 - psutil may be refused: this process at least
        pass
    return pids


def _name(pid: int) -> str | None:
    try:
        import psutil

        return psutil.Process(pid).name()
    except Exception:  # noqa: BLE001 - another pid namespace or gone
        return None


def visible_devices(environ: dict) -> list[str] | None:
    """CUDA_VISIBLE_DEVICES as a list of indices/UUIDs, or None (every GPU)."""
    value = environ.get("CUDA_VISIBLE_DEVICES")
    if value is None or not value.strip():
        return None
    return [v.strip() for v in value.split(",") if v.strip()]


class Sampler:
    """Start/stop NVML sampling; `stop()` returns the record (see the module doc)."""

    def __init__(self, *, devices: list[str] | None = None, interval_s: float = DEFAULT_INTERVAL_S,
                 own_tree: Callable[[], set[int]] = patchbench_tree, module: Any = None, slow_every: int = 5):
        self.devices, self.interval_s, self.own_tree = devices, interval_s, own_tree
        self.module, self.slow_every = module, max(1, slow_every)
        self.nv = None
        self.reason = "not started"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> "Sampler":
        self.nv, self.reason = open_nvml(self.module)
        if self.nv is None:
            return self
        refs = self.devices if self.devices is not None else [str(i) for i in range(self.nv.count())]
        found = [self.nv.handle_of(r) for r in refs]
        self.handles = [f for f in found if f is not None and f[1] is not None]
        if not self.handles:
            self.nv.close()
            self.nv, self.reason = None, f"no NVIDIA GPU matches CUDA_VISIBLE_DEVICES={','.join(refs)}"
            return self
        self.gpus = [self.nv.device(i, h) for i, h in self.handles]
        for g in self.gpus:
            g["series"] = {f: [] for f in FIELDS}
            g["pcie_seen"] = dict(g["pcie"])
        self.t: list[float] = []
        self.foreign: dict[tuple[int, int], dict] = {}
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
        own = self.own_tree() if slow else set()
        for g, (_, h) in zip(self.gpus, self.handles):
            reading = self.nv.tick(h)
            for f in FIELDS:
                g["series"][f].append(reading[f])
            if slow:
                self._slow(g, h, own)

    def _slow(self, g: dict, h: Any, own: set[int]) -> None:
        for p in self.nv.processes(h):
            key = (g["index"], p["pid"])
            if p["pid"] not in own and key not in self.foreign:
                self.foreign[key] = {"gpu": g["index"], "pid": p["pid"], "name": _name(p["pid"]),
                                     "used_mib": p["used_mib"]}
        link = self.nv.link(h)
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
        for g, (_, h) in zip(self.gpus, self.handles):
            g["ecc_uncorrected_end"] = self.nv.ecc_uncorrected(h)
        record = {"available": True, "interval_s": self.interval_s, **self.nv.driver(), "t": self.t,
                  "gpus": self.gpus, "foreign_processes": sorted(self.foreign.values(), key=lambda p: (p["gpu"], p["pid"]))}
        self.nv.close()
        self.nv, self.reason = None, "stopped"
        return record
