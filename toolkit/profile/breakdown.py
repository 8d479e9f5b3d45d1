"""Pure questions over a parsed trace (one function per question, HTA-style): which spans are
steps, which events are the kernels, and how each step's time splits into kernel families.

Kernels: on a GPU trace, `kernel`, `gpu_memcpy` and `gpu_memset` events; their scope is the innermost
`gpu_user_annotation` around them. On a CPU-only trace (the miniature without a GPU), the top-level
`cpu_op` events (an op inside another op is part of it), scoped by the innermost `user_annotation`.
Steps: sglang's `step[DECODE bs=B]` / `step[EXTEND ...]` spans (GPU annotations first on a GPU
trace). A step's time = its span; its families = kernel time clipped to the span, summed per family;
idle = span minus the union of its kernels, so families + idle - overlap = step time exactly, where
overlap is kernel time that ran concurrently (several streams).
"""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from dataclasses import dataclass, field

from toolkit.profile.families import IDLE, Family, classify
from toolkit.profile.trace import Event, Trace

STEP_RE = re.compile(r"^step\[(?P<stage>[A-Z_]+) bs=(?P<bs>\d+)")
GPU_KERNEL_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


@dataclass(frozen=True)
class Kernel:
    name: str
    scope: str | None
    ts: float
    dur: float
    shapes: str = ""

    @property
    def end(self) -> float:
        return self.ts + self.dur


@dataclass(frozen=True)
class Step:
    stage: str  # DECODE, EXTEND, ...
    batch: int
    ts: float
    dur: float  # microseconds
    times: dict  # family -> microseconds (IDLE included)
    counts: dict  # family -> kernels
    overlap: float = 0.0


@dataclass
class Breakdown:
    """Per decode step, per family: mean time (ms), kernels per step, shapes seen; for one rank."""

    rank: int
    path: str
    mode: str  # "gpu" | "cpu"
    steps: list[Step]
    shapes: dict = field(default_factory=dict)  # family -> {shape: count}
    warmup_ms: list = field(default_factory=list)  # the recorded steps left out (the profiler's start-up), ms each

    @property
    def step_ms(self) -> float:
        return statistics.fmean(s.dur for s in self.steps) / 1e3 if self.steps else 0.0

    def family_ms(self) -> dict[str, float]:
        """Mean milliseconds per step per family (idle included), largest first."""
        if not self.steps:
            return {}
        tot: dict[str, float] = defaultdict(float)
        for s in self.steps:
            for fam, us in s.times.items():
                tot[fam] += us
        n = len(self.steps)
        return dict(sorted(((f, v / n / 1e3) for f, v in tot.items()), key=lambda kv: -kv[1]))

    def per_step_ms(self, family: str) -> list[float]:
        return [s.times.get(family, 0.0) / 1e3 for s in self.steps]

    def counts_per_step(self) -> dict[str, float]:
        tot: dict[str, int] = defaultdict(int)
        for s in self.steps:
            for fam, c in s.counts.items():
                tot[fam] += c
        n = max(len(self.steps), 1)
        return {f: c / n for f, c in tot.items()}

    @property
    def overlap_ms(self) -> float:
        return statistics.fmean(s.overlap for s in self.steps) / 1e3 if self.steps else 0.0

    def to_dict(self) -> dict:
        return {"rank": self.rank, "path": self.path, "mode": self.mode, "steps": len(self.steps),
                "stage": self.steps[0].stage if self.steps else None,
                "step_ms": self.step_ms, "family_ms": self.family_ms(), "counts_per_step": self.counts_per_step(),
                "overlap_ms": self.overlap_ms, "per_step_ms": {f: self.per_step_ms(f) for f in self.family_ms()},
                "warmup_ms": list(self.warmup_ms),
                "batches": sorted({s.batch for s in self.steps}),
                "shapes": {f: dict(sorted(v.items(), key=lambda kv: -kv[1])[:3]) for f, v in self.shapes.items()}}


def step_spans(trace: Trace, stage: str | None = "DECODE") -> list[Event]:
    """sglang's step spans (`step[DECODE bs=4]`), GPU-side annotations when the trace has them."""
    spans = [e for e in trace.events if e.cat in ("gpu_user_annotation", "user_annotation") and STEP_RE.match(e.name)]
    gpu = [e for e in spans if e.cat == "gpu_user_annotation"]
    spans = gpu or spans
    if stage:
        spans = [e for e in spans if STEP_RE.match(e.name).group("stage") == stage]
    return spans


def decode_stage(trace: Trace) -> str:
    """The stage of a rank's decode steps: DECODE, or VERIFY when the server decodes speculatively
    (sglang names the target model's steps `step[VERIFY ...]`, the draft model's `step[DRAFT ...]`)."""
    stages = {STEP_RE.match(e.name).group("stage") for e in step_spans(trace, None)}
    return "VERIFY" if "DECODE" not in stages and "VERIFY" in stages else "DECODE"


def idle_only(trace: Trace) -> bool:
    """The rank ran only idle steps (DP attention with fewer requests than attention-DP groups)."""
    stages = {STEP_RE.match(e.name).group("stage") for e in step_spans(trace, None)}
    return stages == {"IDLE"}


def _shapes(e: Event) -> str:
    dims = e.args.get("Input Dims")
    if dims:
        return str([d for d in dims if d])
    grid = e.args.get("grid")
    return f"grid={grid} block={e.args.get('block')}" if grid else ""


def kernels(trace: Trace) -> list[Kernel]:
    """The kernels of a trace with their innermost non-step scope (see the module docstring)."""
    if trace.has_gpu_kernels:
        scopes = sorted((e for e in trace.events if e.cat == "gpu_user_annotation" and not STEP_RE.match(e.name)),
                        key=lambda e: (e.ts, -e.dur))
        out, active, j = [], [], 0
        for k in sorted((e for e in trace.events if e.cat in GPU_KERNEL_CATS), key=lambda e: e.ts):
            while j < len(scopes) and scopes[j].ts <= k.ts:
                active.append(scopes[j])
                j += 1
            active = [s for s in active if s.end >= k.ts]
            inner = min((s for s in active if s.end >= k.end), key=lambda s: s.dur, default=None)
            out.append(Kernel(k.name, inner.name if inner else None, k.ts, k.dur, _shapes(k)))
        return out
    by_thread: dict = defaultdict(list)
    for e in trace.events:
        if e.cat in ("cpu_op", "user_annotation"):
            by_thread[(e.pid, e.tid)].append(e)
    out = []
    for evs in by_thread.values():
        stack: list[Event] = []  # open events, outermost first
        for e in evs:  # sorted by (ts, -dur)
            while stack and stack[-1].end <= e.ts:
                stack.pop()
            if e.cat == "cpu_op" and not any(s.cat == "cpu_op" for s in stack):
                scope = next((s.name for s in reversed(stack) if not STEP_RE.match(s.name)), None)
                out.append(Kernel(e.name, scope, e.ts, e.dur, _shapes(e)))
            stack.append(e)
    out.sort(key=lambda k: k.ts)
    return out


def _union(intervals: list[tuple[float, float]]) -> float:
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def breakdown(trace: Trace, families: tuple[Family, ...], stage: str | None = "DECODE", warmup: int = 0) -> Breakdown:
    """Time per family in each `stage` step of one rank's trace. `warmup`: the first steps left out
    (their durations kept in `warmup_ms`) when more were recorded: torch's profiler pays its start-up
    in the first step it traces (real sglang 0.5.23 on CPU: 100.6 ms against 8.5-19.5 ms for the next
    seven, its GEMMs 77.9 ms against 2.0-6.1), which a mean over the steps would spread over every family."""
    ks = kernels(trace)
    fam_of = {}
    shapes: dict = defaultdict(lambda: defaultdict(int))
    steps = []
    i0 = 0
    for span in step_spans(trace, stage):
        m = STEP_RE.match(span.name)
        times: dict = defaultdict(float)
        counts: dict = defaultdict(int)
        ivs = []
        while i0 < len(ks) and ks[i0].end <= span.ts:
            i0 += 1
        for k in ks[i0:]:
            if k.ts >= span.end:
                break
            s, e = max(k.ts, span.ts), min(k.end, span.end)
            if e <= s:
                continue
            key = (k.name, k.scope)
            fam = fam_of.get(key) or fam_of.setdefault(key, classify(families, k.name, k.scope))
            times[fam] += e - s
            counts[fam] += 1
            ivs.append((s, e))
            if k.shapes:
                shapes[fam][k.shapes] += 1
        busy = _union(ivs)
        times[IDLE] = span.dur - busy
        steps.append(Step(m.group("stage"), int(m.group("bs")), span.ts, span.dur, dict(times), dict(counts),
                          overlap=sum(e - s for s, e in ivs) - busy))
    skip = warmup if len(steps) > warmup else 0
    return Breakdown(trace.rank, trace.path, "gpu" if trace.has_gpu_kernels else "cpu", steps[skip:],
                     {f: dict(v) for f, v in shapes.items()}, [s.dur / 1e3 for s in steps[:skip]])


def classified_share(trace: Trace, families: tuple[Family, ...]) -> float:
    """Fraction of all kernel time (whole trace) that some family rule claims (not "other")."""
    total = claimed = 0.0
    for k in kernels(trace):
        total += k.dur
        if classify(families, k.name, k.scope) != "other":
            claimed += k.dur
    return claimed / total if total else 0.0
