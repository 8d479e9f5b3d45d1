"""SLA search (pure): the concurrencies at which every bound holds, and the verdict at one point.

Bounds. `parse_bounds(["itl_ms_p99<=50", "output_tok_s>=500"])` reads bounds on registry metrics
(toolkit/run/metrics.py) that the serving benchmark measures at every concurrency. Each such metric
moves one way with load (`LOAD`: latencies, throughputs and failed requests rise with concurrency),
so a bound is a *ceiling*, holding at low load (`itl_ms_p99<=50`), or a *floor*, holding at high
load (`output_tok_s>=500`). A bound on a metric measured elsewhere (once per run: the box's
`gpu_*`; by the output check or the eval: `answer_agreement`, `eval_accuracy`; ...) is BadInput
naming where it is measured (`where_measured`).

Search. `Search(lo, hi, bounds)`: with ceilings, the highest concurrency in lo..hi meeting all of
them (`lo` measured first: failing there fails everywhere); with floors, the lowest meeting all of
them (`hi` first: failing there, the load never reaches them); with both, the floors searched in
lo..(the ceilings' highest), the passing range between. Each half is a `Bisection` assuming
passing is monotone in load: at most `max_points(lo, hi)` = `1 + ceil(log2(hi - lo + 1))` points.
Every measured point informs both halves; one contradicting monotony (a pass beyond a known fail)
is kept in `breaks`, and `load_breaks` names a metric that moved against its direction between
measured points beyond the runs' spread. Several searches advance together, one point each per
round (`next_point` / `feed`), so a sweep can interleave their measurements.

Verdict at a point (`judge`, legend from `legend(n)`): the search decides by the mean of the
point's runs; the verdict states the noise: "passes" when every run meets the bound, "fails" when
none does, "at the bound" when the runs straddle it, each with the mean and the runs' spread. Its
stated error: a point whose typical run (the median) sits on the bound or beyond reads "passes"
with probability at most 0.5^n over n independent runs (benchmarks/sla_calibration.py measures it).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Callable, Sequence

from toolkit.errors import BadInput
from toolkit.results import metrics

_BOUND = re.compile(r"^\s*([A-Za-z0-9_]+)\s*(<=|>=|<|>)\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*$")
_OPS = {"<=": lambda v, b: v <= b, ">=": lambda v, b: v >= b, "<": lambda v, b: v < b, ">": lambda v, b: v > b}

RISES = 1  # the metric grows with concurrency
# Serving metrics measured at every concurrency, and which way they move with load (more requests in
# flight: more tokens per second, longer latencies, more failures under timeouts).
LOAD: dict[str, int] = {
    **{m: RISES for m in ("output_tok_s", "input_tok_s", "total_tok_s", "request_s", "concurrency_achieved", "failed")},
    **{m.name: RISES for m in metrics.METRICS.values()
       if m.point_kind == "concurrency" and m.unit == "ms"},  # ttft/itl/tpot/e2e latencies, every statistic
}
CEILING, FLOOR = "ceiling", "floor"
_TAKES = ("SLA bounds take what is measured at every concurrency: latencies (ttft/itl/tpot/e2e, e.g. itl_ms_p99), "
          "throughputs (output_tok_s, input_tok_s, total_tok_s, request_s), concurrency_achieved, failed")

_ELSEWHERE = {  # where a metric without a value at each concurrency is measured
    "gpu_": "once per run over the whole benchmark window (the box's GPU state, all points together; "
            "`patchbench compare`/`report` flag a run whose box was throttled or shared)",
    "answer_agreement": "by the output check ([quality]) at its own points, in the first launches of a "
                        "configuration only (`patchbench compare` gives the answers' verdict)",
    "first_divergence": "by the output check ([quality]) at its own points, in the first launches of a "
                        "configuration only (`patchbench compare` gives the answers' verdict)",
    "output_sanity": "by the output check ([quality]) at its own points, in the first launches of a "
                     "configuration only (a broken answer makes the run invalid)",
    "eval_accuracy": "by the gate's evaluation ([quality] eval) once per launch, not at a concurrency "
                     "(`patchbench compare` gives the gate's verdict)",
    "distinct_experts": "from the patch's evidence log once per run (point 0), not at a concurrency",
    "completed": "per point, but it counts the recipe's prompts, not load: bound `failed` instead (e.g. failed<=0)",
    "duration_s": "per point, but it grows with the number of prompts, not only with load: bound a latency "
                  "(e2e_ms_p99) or a throughput instead",
}


def where_measured(name: str) -> str | None:
    """None for a metric measured at each concurrency point of a serving benchmark (an SLA bound or a
    sweep's ranking can use it), else where it is measured."""
    if name in LOAD:
        return None
    info = metrics.lookup(name)
    if info is not None and info.point_kind == "batch":
        return "at static batches (bench_one_batch), not at a concurrency"
    for key, text in _ELSEWHERE.items():
        if name == key or (key.endswith("_") and name.startswith(key)):
            return text
    return "not at each concurrency of the serving benchmark"


@dataclass(frozen=True)
class Bound:
    metric: str
    op: str
    value: float

    def holds(self, measured: float) -> bool:
        return _OPS[self.op](measured, self.value)

    @property
    def kind(self) -> str:
        """CEILING (holds at low load) or FLOOR (holds at high load), from the metric's direction."""
        below = self.op in ("<=", "<")
        return CEILING if below == (LOAD.get(self.metric, RISES) == RISES) else FLOOR

    def __str__(self) -> str:
        return f"{self.metric}{self.op}{self.value:g}"


def parse_bound(text: str, *, option: str = "--sla") -> Bound:
    """`METRIC<=X` (or >=, <, >); BadInput naming the expression, or the metric with the known ones,
    or where a metric not measured at each concurrency is measured."""
    m = _BOUND.match(text or "")
    if not m:
        raise BadInput(f"{option} `{text}` is not a bound: write METRIC<=VALUE (or >=, <, >), e.g. itl_ms_p99<=50",
                       hint=f"known metrics: {', '.join(metrics.names())}")
    name = m.group(1)
    if metrics.lookup(name) is None:
        raise BadInput(f"{option} `{text}`: unknown metric `{name}`", hint=f"known metrics: {', '.join(metrics.names())}")
    where = where_measured(name)
    if where is not None:
        raise BadInput(f"{option} `{text}`: `{name}` is measured {where}, so no concurrency can be searched for it",
                       hint=_TAKES)
    return Bound(name, m.group(2), float(m.group(3)))


def parse_bounds(texts: list[str], *, option: str = "--sla") -> list[Bound]:
    return [parse_bound(t, option=option) for t in texts]


def max_points(lo: int, hi: int) -> int:
    """The most points one bisection over lo..hi measures: 1 + ceil(log2(range)), range = hi - lo + 1."""
    span = hi - lo + 1
    return 1 + (math.ceil(math.log2(span)) if span > 1 else 0)


# -- the verdict at one point -------------------------------------------------------------------------

PASSES, FAILS, AT_BOUND, NOT_MEASURED = "passes", "fails", "at the bound", "not measured"


@dataclass(frozen=True)
class BoundVerdict:
    """One bound at one point: the runs' mean and spread, and what they say."""

    bound: Bound
    n: int
    mean: float
    low: float  # the runs' spread: lowest and highest value
    high: float
    state: str  # PASSES | FAILS | AT_BOUND | NOT_MEASURED

    @property
    def mean_holds(self) -> bool:
        """What the search decides by: the mean of the runs meets the bound."""
        return self.n > 0 and self.bound.holds(self.mean)

    @property
    def text(self) -> str:
        if self.n == 0:
            return f"{self.bound}: not measured"
        of = f"{_num(self.mean)} of {_num(self.bound.value)}"
        noise = ("one run, its noise unknown" if self.n == 1
                 else f"spread {_num(self.low)}-{_num(self.high)}, {self.n} runs")
        return f"{self.state} (mean {of}, {noise})" if self.n > 1 else f"{self.state} ({of}, {noise})"

    def to_dict(self) -> dict:
        return {"bound": str(self.bound), "state": self.state, "mean": self.mean, "spread": [self.low, self.high],
                "n": self.n, "text": self.text}


def _num(x: float) -> str:
    return f"{x:.4g}" if abs(x) < 1e4 else f"{x:.0f}"


def judge(bound: Bound, values: Sequence[float]) -> BoundVerdict:
    """The verdict of one bound over one point's runs (see the module docstring)."""
    xs = [float(v) for v in values if not math.isnan(float(v))]
    if not xs:
        return BoundVerdict(bound, 0, math.nan, math.nan, math.nan, NOT_MEASURED)
    held = [bound.holds(x) for x in xs]
    state = PASSES if all(held) else FAILS if not any(held) else AT_BOUND
    return BoundVerdict(bound, len(xs), sum(xs) / len(xs), min(xs), max(xs), state)


def false_pass_rate(n: int) -> float:
    """The most often a point whose median run sits on the bound or beyond reads "passes" over n runs."""
    return 0.5 ** n


def legend(n: int) -> str:
    """The point verdict's rule and error in one line, for n runs per point."""
    straddle = 1 - 2 * 0.5 ** n if n > 1 else 0.0
    return (f"SLA: the search takes each point's mean of its runs; 'passes' when every run meets the bound, "
            f"'fails' when none does, 'at the bound' when they straddle it (spread = lowest-highest run). "
            f"With {n} run(s) per point, a point whose median run sits on the bound or beyond reads 'passes' "
            f"with probability at most {false_pass_rate(n):.0%} (0.5^{n}); one on the bound reads 'at the bound' "
            f"{straddle:.0%} of the time")


# -- the search ------------------------------------------------------------------------------------


@dataclass
class Bisection:
    """One monotone search over lo..hi. `want` "highest": the highest concurrency that passes
    (passing holds at low load); "lowest": the lowest (passing holds at high load). `best` is that
    concurrency once known to pass (None: none passed), `done` once the candidates are exhausted.
    It works on x = the distance from the end that passes first, so both directions share one rule."""

    lo: int
    hi: int
    want: str = "highest"
    measured: list[tuple[int, bool]] = field(default_factory=list)
    breaks: list[tuple[int, int]] = field(default_factory=list)  # (pass, fail) pairs against monotony
    done: bool = False
    _best: int | None = None  # x of the furthest known pass
    _fail: int | None = None  # x of the nearest known fail

    def __post_init__(self) -> None:
        if not 1 <= self.lo <= self.hi:
            raise BadInput(f"concurrency range {self.lo}..{self.hi} is empty or below 1")
        if self.want not in ("highest", "lowest"):
            raise ValueError(f"want must be highest or lowest, not {self.want!r}")

    def _x(self, c: int) -> int:  # the concurrency as the distance along the search; also its inverse
        return c if self.want == "highest" else self.lo + self.hi - c

    @property
    def best(self) -> int | None:
        return None if self._best is None else self._x(self._best)

    @property
    def fail(self) -> int | None:
        return None if self._fail is None else self._x(self._fail)

    @property
    def start(self) -> int:
        """The concurrency measured first: where passing is likeliest."""
        return self._x(self.lo)

    def next_point(self) -> int | None:
        """The concurrency to measure next, or None when the search is over."""
        if self.done:
            return None
        if self._best is None:
            if self._fail == self.lo:
                self.done = True
                return None
            return self._x(self.lo)
        top = self.hi if self._fail is None else self._fail - 1
        if self._best >= top:
            self.done = True
            return None
        return self._x((self._best + top + 1) // 2)  # upper middle: a pass moves `best`, a fail shrinks `top`

    def feed(self, concurrency: int, passes: bool) -> None:
        """A measured point (asked by this search or not): what it says about the limit."""
        if not self.lo <= concurrency <= self.hi:
            return
        x = self._x(concurrency)
        self.measured.append((concurrency, passes))
        if passes:
            if self._fail is not None and x >= self._fail:
                self.breaks.append((concurrency, self._x(self._fail)))
            self._best = x if self._best is None else max(self._best, x)
        else:
            if self._best is not None and x <= self._best:
                self.breaks.append((self._x(self._best), concurrency))
            self._fail = x if self._fail is None else min(self._fail, x)

    @property
    def never_passes(self) -> bool:
        """Over, and not even the first point (lo for "highest", hi for "lowest") passed."""
        return self.best is None and self._fail == self.lo

    fails_at_lo = never_passes  # the name a ceiling search used


def search(lo: int, hi: int, passes: Callable[[int], bool], want: str = "highest") -> Bisection:
    """Run one bisection with `passes(concurrency)` as the measurement."""
    b = Bisection(lo, hi, want)
    while (c := b.next_point()) is not None:
        b.feed(c, passes(c))
    return b


@dataclass
class Search:
    """One variant's SLA search over lo..hi for `bounds` (see the module docstring)."""

    lo: int
    hi: int
    bounds: tuple[Bound, ...]
    ceiling: Bisection | None = None
    floor: Bisection | None = None
    verdicts: dict[int, tuple[BoundVerdict, ...]] = field(default_factory=dict)  # concurrency -> per bound

    def __post_init__(self) -> None:
        self.bounds = tuple(self.bounds)
        if not self.bounds:
            raise ValueError("an SLA search needs at least one bound")
        if any(b.kind == CEILING for b in self.bounds):
            self.ceiling = Bisection(self.lo, self.hi, "highest")
        elif any(b.kind == FLOOR for b in self.bounds):
            self.floor = Bisection(self.lo, self.hi, "lowest")

    @property
    def kind(self) -> str:
        kinds = {b.kind for b in self.bounds}
        return "both" if len(kinds) == 2 else kinds.pop()

    def _passes(self, c: int, kind: str) -> bool:
        return all(v.mean_holds for v in self.verdicts[c] if v.bound.kind == kind)

    def next_point(self) -> int | None:
        if self.ceiling is not None:
            c = self.ceiling.next_point()
            if c is not None:
                return c
            if self.kind == "both" and self.floor is None and self.ceiling.best is not None:
                self.floor = Bisection(self.lo, self.ceiling.best, "lowest")  # floors only below the ceilings' limit
                for seen in sorted(self.verdicts):
                    self.floor.feed(seen, self._passes(seen, FLOOR))
        if self.floor is not None:
            return self.floor.next_point()
        return None

    def feed(self, concurrency: int, verdicts: Sequence[BoundVerdict]) -> None:
        self.verdicts[concurrency] = tuple(verdicts)
        for half, kind in ((self.ceiling, CEILING), (self.floor, FLOOR)):
            if half is not None:
                half.feed(concurrency, self._passes(concurrency, kind))

    @property
    def measured(self) -> list[tuple[int, bool]]:
        """Each measured concurrency, in order, and whether every bound's mean held there."""
        return [(c, all(v.mean_holds for v in vs)) for c, vs in self.verdicts.items()]

    @property
    def passing(self) -> tuple[int, int] | None:
        """The concurrencies known to meet every bound (lowest, highest), None when none does."""
        hi = self.ceiling.best if self.ceiling is not None else self.hi
        lo = self.floor.best if self.floor is not None else self.lo
        if hi is None or lo is None or (self.kind == "both" and self.floor is None):
            return None
        if self.kind == "floor":
            hi = self.hi
        return (lo, hi) if lo <= hi else None

    @property
    def best(self) -> int | None:
        """The concurrency a sweep reports: the highest meeting every bound with a ceiling among them,
        else (floors only) the lowest."""
        rng = self.passing
        if rng is None:
            return None
        return rng[0] if self.kind == "floor" else rng[1]

    @property
    def max_points(self) -> int:
        """The most points this search measures."""
        top = self.ceiling.best if self.ceiling is not None and self.ceiling.best is not None else self.hi
        return (max_points(self.lo, self.hi) if self.kind != "both"
                else max_points(self.lo, self.hi) + max_points(self.lo, top))

    @property
    def breaks(self) -> list[tuple[int, int]]:
        return [*(self.ceiling.breaks if self.ceiling else []), *(self.floor.breaks if self.floor else [])]

    def why_none(self) -> str | None:
        """Why no concurrency meets every bound (None when one does)."""
        if self.best is not None:
            return None
        if self.ceiling is not None and self.ceiling.best is None:
            return f"fails the SLA already at concurrency {self.lo}: " + self._failing(self.lo, CEILING)
        if self.floor is not None and self.floor.best is None:
            top = self.floor.hi
            if self.kind == "both":
                return (f"no concurrency meets every bound: at concurrency {top}, the highest meeting "
                        f"{self._names(CEILING)}, " + self._failing(top, FLOOR))
            return f"does not reach the SLA even at concurrency {top}: " + self._failing(top, FLOOR)
        return "the search did not finish"

    def _names(self, kind: str) -> str:
        return ", ".join(str(b) for b in self.bounds if b.kind == kind)

    def _failing(self, c: int, kind: str) -> str:
        vs = [v for v in self.verdicts.get(c, ()) if v.bound.kind == kind and not v.mean_holds]
        return "; ".join(f"{v.bound} {v.text}" for v in vs) or "not measured"


def load_breaks(means: dict[int, Sequence[float]], metric: str) -> list[str]:
    """Where `metric` moved against its direction with load (LOAD) between consecutive measured
    concurrencies, by more than the runs' spread: the search's assumption failing there."""
    direction = LOAD.get(metric, RISES)
    out = []
    pts = sorted((c, [float(x) for x in xs]) for c, xs in means.items() if xs)
    for (c1, a), (c2, b) in zip(pts, pts[1:]):
        against = max(b) < min(a) if direction == RISES else min(b) > max(a)
        if against:
            way = "fell" if direction == RISES else "rose"
            out.append(f"{metric} {way} from {_num(sum(a) / len(a))} at concurrency {c1} to {_num(sum(b) / len(b))} "
                       f"at {c2}, beyond the runs' spread: the search assumes it "
                       f"{'rises' if direction == RISES else 'falls'} with load, so its limit may be off there")
    return out
