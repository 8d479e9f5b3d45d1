"""A sampling record -> the run's GPU-state summary (pure).

`summarize(record)` gives {"available": True, "metrics": {gpu_* registry name: value}, "box": {what
the GPUs were: names, driver, power limits, persistence, clocks set, PCIe}, "foreign_processes",
"reasons_seen", "ticks"}; a record without GPU state gives {"available": False, "reason"}: no metric
at all, never zeros. Shares are over ticks: a tick counts as throttled when any of the run's GPUs
reported a power, thermal or hardware-slowdown clock-event reason in it.
"""

from __future__ import annotations

import statistics
from typing import Any

from toolkit.results.box_flags import NO_GPU_STATE
from toolkit.run.gpustate.nvml import CLOCK_SETTING_BIT, POWER_BITS, THERMAL_BITS, THROTTLE_BITS, decode_reasons



def _values(gpus: list[dict], field: str) -> list[float]:
    return [v for g in gpus for v in g["series"].get(field, []) if v is not None]


def _share(gpus: list[dict], bits: int) -> float | None:
    columns = [g["series"].get("reasons", []) for g in gpus]
    n = max((len(c) for c in columns), default=0)
    known = [i for i in range(n) if any(i < len(c) and c[i] is not None for c in columns)]
    if not known:
        return None
    hit = sum(1 for i in known if any(i < len(c) and c[i] is not None and c[i] & bits for c in columns))
    return round(hit / len(known), 4)


def _ecc_new(gpus: list[dict]) -> int | None:
    pairs = [(g.get("ecc_uncorrected"), g.get("ecc_uncorrected_end")) for g in gpus]
    known = [(a, b) for a, b in pairs if a is not None and b is not None]
    return sum(max(0, b - a) for a, b in known) if known else None


def _rounded(v: float | None, nd: int = 1) -> float | None:
    return None if v is None else round(float(v), nd)


def summarize(record: dict | None) -> dict:
    """The summary stored in the run's extra["gpu_state"] (see the module doc)."""
    if not record or not record.get("available"):
        return {"available": False, "reason": (record or {}).get("reason") or NO_GPU_STATE}
    gpus = record.get("gpus") or []
    sm, mem = _values(gpus, "sm_mhz"), _values(gpus, "mem_mhz")
    power, temp = _values(gpus, "power_w"), _values(gpus, "temp_c")
    util, used = _values(gpus, "util_pct"), _values(gpus, "mem_used_mib")
    limits = [g["power_limit_w"] for g in gpus if g.get("power_limit_w") is not None]
    pcie_gen = [g["pcie_seen"]["gen"] for g in gpus if (g.get("pcie_seen") or {}).get("gen") is not None]
    pcie_width = [g["pcie_seen"]["width"] for g in gpus if (g.get("pcie_seen") or {}).get("width") is not None]
    foreign = record.get("foreign_processes") or []
    metrics: dict[str, Any] = {
        "gpu_sm_clock_mhz_median": _rounded(statistics.median(sm)) if sm else None,
        "gpu_mem_clock_mhz_median": _rounded(statistics.median(mem)) if mem else None,
        "gpu_power_w_mean": _rounded(statistics.fmean(power)) if power else None,
        "gpu_power_limit_w": _rounded(min(limits)) if limits else None,
        "gpu_temp_c_max": _rounded(max(temp)) if temp else None,
        "gpu_util_pct_mean": _rounded(statistics.fmean(util)) if util else None,
        "gpu_mem_used_mib_max": _rounded(max(used), 0) if used else None,
        "gpu_throttled_share": _share(gpus, THROTTLE_BITS),
        "gpu_thermal_throttled_share": _share(gpus, THERMAL_BITS),
        "gpu_power_throttled_share": _share(gpus, POWER_BITS),
        # unknown (not 0) when NVML refused a GPU's process list or its pids cannot be matched here
        "gpu_foreign_processes": None if record.get("pid_match") or any("processes" in (g.get("unread") or {})
                                                                        for g in gpus)
        else len({(p["gpu"], p["pid"]) for p in foreign}),
        "gpu_ecc_errors_new": _ecc_new(gpus),
        "gpu_pcie_gen_min": min(pcie_gen) if pcie_gen else None,
        "gpu_pcie_width_min": min(pcie_width) if pcie_width else None,
    }
    masks = 0
    for g in gpus:
        for r in g["series"].get("reasons", []):
            masks |= r or 0
    box = {"driver": record.get("driver"), "cuda_driver": record.get("cuda_driver"),
           "names": [g.get("name") for g in gpus], "indices": [g.get("index") for g in gpus],
           "power_limits_w": [g.get("power_limit_w") for g in gpus],
           "persistence": [g.get("persistence") for g in gpus],
           "app_clocks": [g.get("app_clocks") for g in gpus],
           "max_clocks": [g.get("max_clocks") for g in gpus],
           "ecc_mode": [g.get("ecc_mode") for g in gpus]}
    unread = [f"{field} on GPU {g.get('index')}: {why}" for g in gpus for field, why in (g.get("unread") or {}).items()]
    return {"available": True, "metrics": {k: v for k, v in metrics.items() if v is not None}, "box": box,
            "foreign_processes": foreign[:20], "graphics_processes": (record.get("graphics_processes") or [])[:20],
            "unmatched_processes": (record.get("unmatched_processes") or [])[:20], "pid_match": record.get("pid_match"),
            "scope": record.get("scope"), "unread": unread, "reasons_seen": decode_reasons(masks),
            "clock_setting_share": _share(gpus, CLOCK_SETTING_BIT),
            "ticks": len(record.get("t") or []), "interval_s": record.get("interval_s")}
