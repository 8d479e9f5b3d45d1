"""Read a torch profiler Chrome trace into plain events.

A stdlib loader (json + gzip), not HolisticTraceAnalysis: HTA's parser wants pandas, plotly and
jupyterlab in the toolkit's env, and its analyzers count only GPU kernels (`cat == "kernel"`), while
a CPU trace of the miniature has only `cpu_op` and `user_annotation` events. The events keep HTA's
vocabulary (name, cat, ts, dur in microseconds, pid, tid, args) so a user can hand the same files
to HTA (`TraceAnalysis(trace_dir=...)`) for its other questions.
"""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from toolkit.errors import BadInput

RANK_RE = re.compile(r"-TP-(\d+)")


@dataclass(frozen=True)
class Event:
    name: str
    cat: str
    ts: float  # microseconds
    dur: float  # microseconds
    pid: object
    tid: object
    args: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def end(self) -> float:
        return self.ts + self.dur


@dataclass(frozen=True)
class Trace:
    path: str
    rank: int
    events: tuple[Event, ...]
    meta: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def has_gpu_kernels(self) -> bool:
        return any(e.cat == "kernel" for e in self.events)


def rank_of(path: str | Path, data: dict) -> int:
    """`distributedInfo.rank` when the trace has it, else the `-TP-N` of sglang's file name, else 0."""
    info = data.get("distributedInfo") or {}
    if isinstance(info, dict) and isinstance(info.get("rank"), int):
        return int(info["rank"])
    m = RANK_RE.search(Path(path).name)
    return int(m.group(1)) if m else 0


def load_trace(path: str | Path) -> Trace:
    """Parse one trace file (`.json` or `.json.gz`); only complete ('X') events are kept."""
    p = Path(path)
    try:
        opener = gzip.open if p.name.endswith(".gz") else open
        with opener(p, "rt", encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError, EOFError) as exc:
        raise BadInput(f"cannot read trace {p}: {exc}") from None
    if isinstance(data, list):
        data = {"traceEvents": data}
    raw = data.get("traceEvents") if isinstance(data, dict) else None
    if not isinstance(raw, list):
        raise BadInput(f"{p} is not a Chrome trace (no traceEvents)")
    events = []
    for e in raw:
        if not isinstance(e, dict) or e.get("ph") != "X" or "dur" not in e:
            continue
        try:
            events.append(Event(str(e.get("name", "")), str(e.get("cat", "")), float(e["ts"]), float(e["dur"]),
                                e.get("pid"), e.get("tid"), e.get("args") or {}))
        except (TypeError, ValueError, KeyError):
            continue
    events.sort(key=lambda ev: (ev.ts, -ev.dur))
    meta = {k: v for k, v in data.items() if k != "traceEvents"}
    return Trace(str(p), rank_of(p, data), tuple(events), meta)
