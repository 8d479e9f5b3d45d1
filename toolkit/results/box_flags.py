"""Flags on runs from their GPU and host state (pure): what makes a measurement suspect, and what
else differed on the box between two runs.

A run is flagged when, over its benchmark window, its GPUs were power- or thermal-throttled (or
slowed by hardware) for more than `THROTTLE_SHARE` of the ticks, other processes used its GPUs,
new uncorrected ECC errors appeared, or its median SM clock is more than `CLOCK_TOLERANCE` from the
median of the runs it is compared with (same GPU kind). `results`, `compare` and `report` show the
flags; `--strict-box` (or `[benchmark] strict_box = true`) stores such a run `invalid` with them.
Runs without GPU state are never flagged for it: they say "no GPU state".

The host (toolkit.run.hoststate, `extra["host_state"]`): a run is flagged when processes outside
patchbench's tree and the server's used more than `HOST_FOREIGN_SHARE` of the machine's CPUs over
its window, or the hypervisor gave more than `HOST_STEAL_SHARE` of the CPU time to other guests.
These are measured facts of the window, shown wherever GPU flags are (results' box column, compare,
report); `--strict-box` judges the GPU flags only (a CI box running tests beside the run is busy by
design, and the CPU tier's runs would all be invalid there).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Any, Iterable

NO_GPU_STATE = "no GPU state"


HOST_FOREIGN_SHARE = 0.10  # of the machine's CPUs: 0.2 of 2, 6.4 of 64
HOST_STEAL_SHARE = 0.02
THROTTLE_SHARE = 0.05
CLOCK_TOLERANCE = 0.02
# The clock flag's promise: on a steady box whose runs' median SM clocks vary by STEADY_CLOCK_NOISE
# (relative standard deviation, a quarter of the tolerance), a run is flagged at most
# STEADY_FALSE_FLAGS of the time (measured in benchmarks/verdict_calibration.py, 8 runs compared).
STEADY_CLOCK_NOISE = CLOCK_TOLERANCE / 4
STEADY_FALSE_FLAGS = 0.001
CLOCK = "gpu_sm_clock_mhz_median"


def state_of(run: Any) -> dict:
    """The run's stored GPU-state summary; {"available": False} for runs stored without one."""
    return (getattr(run, "extra", None) or {}).get("gpu_state") or {"available": False, "reason": NO_GPU_STATE}


def host_of(run: Any) -> dict:
    """The run's stored host-state record; {"available": False} for runs stored without one."""
    return (getattr(run, "extra", None) or {}).get("host_state") or {"available": False}


def cpu_seconds(s: float) -> str:
    """CPU seconds as read: "0.38 s" under 10 s (a 1 s doctor window), "12 s" above."""
    return f"{s:.2f} s" if s < 10 else f"{s:.0f} s"


def host_flags(host: dict) -> list[str]:
    """Flags the host's CPU state earns a run: other processes' CPU time, the hypervisor's steal."""
    if not host.get("available"):
        return []
    out = []
    cpus, foreign = host.get("cpus") or 1, host.get("foreign_cores") or 0.0
    if foreign > HOST_FOREIGN_SHARE * cpus:
        named = [f"pid {p['pid']} {p['name']} {cpu_seconds(p['cpu_s'])}" for p in host.get("foreign_top") or []]
        rest = host.get("foreign_rest") or {}
        if rest.get("processes"):
            named.append(f"{rest['processes']} other process{'es' if rest['processes'] > 1 else ''} "
                         f"{cpu_seconds(rest['cpu_s'])} together")
        top = ", ".join(named)
        out.append(f"other processes used {foreign:.1f} of {cpus} CPUs over the window" + (f" ({top})" if top else ""))
    steal = host.get("steal_share") or 0.0
    if steal > HOST_STEAL_SHARE:
        out.append(f"the hypervisor gave {steal:.0%} of the CPU time to other guests (steal)")
    return out


def own_flags(summary: dict, *, share: float = THROTTLE_SHARE) -> list[str]:
    """Flags a run earns on its own (throttling, foreign processes, ECC errors)."""
    if not summary.get("available"):
        return []
    m = summary.get("metrics") or {}
    out = []
    power, thermal = m.get("gpu_power_throttled_share"), m.get("gpu_thermal_throttled_share")
    if power is not None and power > share:
        out.append(f"power-throttled {power:.0%} of the window")
    if thermal is not None and thermal > share:
        out.append(f"thermal-throttled {thermal:.0%} of the window")
    other = m.get("gpu_throttled_share")
    if other is not None and other > share and not out:
        out.append(f"clocks slowed (hardware slowdown) {other:.0%} of the window")
    n = m.get("gpu_foreign_processes") or 0
    if n:
        procs = summary.get("foreign_processes") or []
        named = ", ".join(f"pid {p['pid']}{' ' + p['name'] if p.get('name') else ''} on GPU {p['gpu']}" for p in procs[:3])
        out.append(f"{n} foreign process{'es' if n > 1 else ''} on its GPUs ({named})")
    ecc = m.get("gpu_ecc_errors_new")
    if ecc:
        out.append(f"{ecc} new uncorrected ECC error{'s' if ecc > 1 else ''}")
    return out


def clock_outlier(clock: float, peers: Iterable[float], *, tolerance: float = CLOCK_TOLERANCE) -> str | None:
    """A flag when `clock` is more than `tolerance` from the median of `peers` (None otherwise)."""
    peers = [p for p in peers if p]
    if not peers or not clock:
        return None
    ref = statistics.median(peers)
    dev = clock / ref - 1
    if abs(dev) <= tolerance:
        return None
    return f"SM clock {clock:.0f} MHz, {dev:+.1%} from the {ref:.0f} MHz median of the runs compared"


def clock_flags(runs: Iterable[Any], *, tolerance: float = CLOCK_TOLERANCE) -> dict[str, str]:
    """run id -> flag, for runs whose median SM clock is off the median of the runs given (per GPU kind)."""
    by_gpu: dict[str, dict[str, float]] = defaultdict(dict)
    for r in runs:
        clock = (state_of(r).get("metrics") or {}).get(CLOCK)
        if clock:
            by_gpu[getattr(r, "gpu_key", "")][r.run_id] = clock
    out = {}
    for clocks in by_gpu.values():
        if len(clocks) < 2:
            continue
        for rid, c in clocks.items():
            flag = clock_outlier(c, clocks.values(), tolerance=tolerance)
            if flag:
                out[rid] = flag
    return out


def run_flags(runs: Iterable[Any]) -> dict[str, list[str]]:
    """run id -> every flag (own, then clocks against the other runs given)."""
    runs = list(runs)
    clocks = clock_flags(runs)
    return {r.run_id: own_flags(state_of(r)) + host_flags(host_of(r)) + ([clocks[r.run_id]] if r.run_id in clocks else [])
            for r in runs}


def short(run: Any, flags: list[str]) -> str:
    """The `box` cell of a results table: "no GPU state", "ok", or the flags, briefly (the GPU's,
    then the host's: "power 25%, foreign 1, CPU 1.3/2 foreign")."""
    words, host = [], []
    for f in flags:
        if f.startswith("other processes used"):
            host.append("CPU " + "/".join(f.split()[3:6:2]) + " foreign")
        elif f.endswith("(steal)"):
            host.append("steal " + f.split()[3])
        elif f.startswith("power-throttled"):
            words.append("power " + f.split()[1])
        elif f.startswith("thermal-throttled"):
            words.append("thermal " + f.split()[1])
        elif f.startswith("clocks slowed"):
            words.append("slowdown")
        elif "foreign process" in f:
            words.append(f"foreign {f.split()[0]}")
        elif "ECC" in f:
            words.append("ECC")
        elif f.startswith("SM clock"):
            words.append("clock " + f.split(", ")[1].split()[0])
    if not state_of(run).get("available"):
        words = [NO_GPU_STATE]
    return ", ".join([*words, *host]) or "ok"


def notes(runs: Iterable[Any], label: dict[str, str] | None = None) -> list[str]:
    """One line per flagged run (for compare and report), "RECIPE run ID: flag; flag"."""
    label = label or {}
    runs = list(runs)
    every = run_flags(runs)
    out = []
    for r in runs:
        fl = every[r.run_id]
        if fl:
            out.append(f"{label.get(r.run_id, r.recipe)} run {r.run_id[:8]}: " + "; ".join(fl))
    return out


def box_lines(runs: Iterable[Any], label: dict[str, str] | None = None) -> list[str]:
    """`notes` for compare and report, or one line saying no run used has GPU state; and one line
    per run whose GPU processes could not be matched to its server (a nested PID namespace)."""
    runs = list(runs)
    if not any(state_of(r).get("available") for r in runs):
        return notes(runs, label) + [f"{NO_GPU_STATE} recorded for the runs used"]
    label = label or {}
    unchecked = [f"{label.get(r.run_id, r.recipe)} run {r.run_id[:8]}: foreign processes not checked: "
                 f"{state_of(r)['pid_match']}" for r in runs if state_of(r).get("pid_match")]
    return notes(runs, label) + unchecked


def _fmt_list(values: list) -> str:
    vals = list(dict.fromkeys(str(v) for v in values))
    return "/".join(vals) if vals else "(unknown)"


def differences(a: dict, b: dict, *, tolerance: float = CLOCK_TOLERANCE) -> list[str]:
    """What else differed on the box between two runs' GPU-state summaries (a -> b): GPU model
    (edition), driver, power limit, persistence mode, clocks set and measured clocks."""
    if not (a.get("available") and b.get("available")):
        if a.get("available") != b.get("available"):
            return [f"GPU state: recorded for one run only ({NO_GPU_STATE} for the other)"]
        return []
    ba, bb = a.get("box") or {}, b.get("box") or {}
    out = []
    for key, label in (("names", "GPU model/edition"), ("driver", "GPU driver"), ("power_limits_w", "power limit (W)"),
                       ("persistence", "persistence mode"), ("app_clocks", "application clocks")):
        va, vb = ba.get(key), bb.get(key)
        if va != vb:
            fa = _fmt_list(va) if isinstance(va, list) else str(va)
            fb = _fmt_list(vb) if isinstance(vb, list) else str(vb)
            out.append(f"{label}: {fa} -> {fb}")
    ma, mb = a.get("metrics") or {}, b.get("metrics") or {}
    for key, label in ((CLOCK, "median SM clock"), ("gpu_mem_clock_mhz_median", "median memory clock")):
        ca, cb = ma.get(key), mb.get(key)
        if ca and cb and abs(cb / ca - 1) > tolerance:
            out.append(f"{label}: {ca:.0f} -> {cb:.0f} MHz ({cb / ca - 1:+.1%})")
    return out
