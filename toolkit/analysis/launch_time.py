"""How long one launch of a recipe will take, from the best stored evidence (pure: rows in, estimate out),
for `plan`.

In order: the recipe's runs of its configuration as defined now (launch to ready + benchmark + the checks
in the same launch); else, for a recipe without such runs, stored launches that reached a ready server
(status ok or invalid), first the recipe's own other launches (profile, `--until verify`, an older
definition), then other recipes' launches of the same env, then of the same model on as many GPUs: their
whole launch time where they ran this benchmark, else their launch-to-ready time alone (said: the
benchmark's share is not known); else the recipe's `[server] timeout_s`, an upper bound, said so. The
timeout used to stand in for every recipe without benchmark runs: 1800 s ("3.4 h" for a pair) for the
CPU recipes whose launches take 0.5-4 min. Each figure is the median of its launches: an env's first launch
also compiles its bytecode (real sglang on this box: 66-72 s, then 39-40 s a launch), which a campaign
launching an existing env does not pay again.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median
from typing import Sequence

from toolkit.analysis.launch_cost import launch_seconds
from toolkit.results.records import RunRow

REACHED = ("ok", "invalid")  # statuses of a launch whose server became ready (invalid: a later check failed)


@dataclass(frozen=True)
class LaunchTime:
    seconds: float
    source: str  # runs | recipe | env | model | timeout_s
    text: str  # where the figure comes from, for the plan's line


def ready_seconds(run: RunRow) -> float:
    """Seconds from the server's start to ready (0 where not recorded: a one-batch run starts no server)."""
    return float((run.timings or {}).get("launch", 0.0) or 0.0)


def _names(rows: Sequence[RunRow]) -> str:
    names = sorted({r.recipe for r in rows})
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def estimate(timed: Sequence[RunRow], pools: Sequence[tuple[str, str, Sequence[RunRow]]], *, bench_key: str,
             timeout_s: float) -> LaunchTime:
    """`timed`: the configuration's own benchmark runs (their mean launch_seconds wins); `pools`: (source,
    what, rows) in order of preference, e.g. ("env", "the same env", rows); `bench_key`: the recipe's
    benchmark identity (toolkit.results.records.bench_key), whose stored runs give a whole launch's time."""
    own = [launch_seconds(r) for r in timed if launch_seconds(r) > 0]
    if own:
        return LaunchTime(median(own), "runs", f"median of {len(own)} recorded launches")
    for source, what, rows in pools:
        reached = [r for r in rows if r.status in REACHED]
        same = [r for r in reached if r.kind == "benchmark" and r.bench_key == bench_key and launch_seconds(r) > 0]
        if same:
            return LaunchTime(median([launch_seconds(r) for r in same]), source,
                              f"no run of this configuration: the median of {len(same)} stored launches of {what} "
                                            f"with this benchmark ({_names(same)})")
        ready = [r for r in reached if ready_seconds(r) > 0]
        if ready:
            return LaunchTime(median([ready_seconds(r) for r in ready]), source,
                              f"no run of this configuration: the median launch to ready of {len(ready)} stored "
                                            f"launches of {what} ({_names(ready)}); the benchmark's time not known, "
                                            "not counted")
    return LaunchTime(float(timeout_s), "timeout_s", "no launch recorded: assuming [server] timeout_s, an upper bound")
