"""SLA search (pure): the highest concurrency at which every latency/throughput bound holds.

`parse_bounds(["itl_ms_p99<=50", ...])` reads bounds on registry metrics (toolkit/run/metrics.py);
`Bisection(lo, hi)` searches the integer range lo..hi for the last concurrency that passes, assuming
passing is monotone (more load, worse latency). It measures `lo` first (a variant that fails there
is reported as failing at the bottom of the range), then halves the candidates: at most
`1 + ceil(log2(hi - lo + 1))` measured points, the bound `max_points(lo, hi)`. Several searches
advance together, one point each per round (`next_point` / `feed`), so a sweep can interleave
their measurements; `search(lo, hi, passes)` runs one with a callback.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Callable

from toolkit.errors import BadInput
from toolkit.run import metrics

_BOUND = re.compile(r"^\s*([A-Za-z0-9_]+)\s*(<=|>=|<|>)\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*$")
_OPS = {"<=": lambda v, b: v <= b, ">=": lambda v, b: v >= b, "<": lambda v, b: v < b, ">": lambda v, b: v > b}


@dataclass(frozen=True)
class Bound:
    metric: str
    op: str
    value: float

    def holds(self, measured: float) -> bool:
        return _OPS[self.op](measured, self.value)

    def __str__(self) -> str:
        return f"{self.metric}{self.op}{self.value:g}"


def parse_bound(text: str, *, option: str = "--sla") -> Bound:
    """`METRIC<=X` (or >=, <, >); BadInput naming the expression, or the metric with the known ones."""
    m = _BOUND.match(text or "")
    if not m:
        raise BadInput(f"{option} `{text}` is not a bound: write METRIC<=VALUE (or >=, <, >), e.g. itl_ms_p99<=50",
                       hint=f"known metrics: {', '.join(metrics.names())}")
    name = m.group(1)
    info = metrics.lookup(name)
    if info is None:
        raise BadInput(f"{option} `{text}`: unknown metric `{name}`", hint=f"known metrics: {', '.join(metrics.names())}")
    if info.point_kind == "batch":
        raise BadInput(f"{option} `{text}`: `{name}` is measured at static batches, not at a concurrency",
                       hint="SLA bounds take serving metrics (ttft/itl/tpot/e2e latencies, throughputs)")
    return Bound(name, m.group(2), float(m.group(3)))


def parse_bounds(texts: list[str], *, option: str = "--sla") -> list[Bound]:
    return [parse_bound(t, option=option) for t in texts]


def max_points(lo: int, hi: int) -> int:
    """The most points a search over lo..hi measures: 1 + ceil(log2(range)), range = hi - lo + 1."""
    span = hi - lo + 1
    return 1 + (math.ceil(math.log2(span)) if span > 1 else 0)


@dataclass
class Bisection:
    """One variant's search over lo..hi. `best` is the highest concurrency known to pass (None:
    `lo` failed); `done` once the candidates are exhausted."""

    lo: int
    hi: int
    best: int | None = None
    fail: int | None = None  # the lowest concurrency known to fail
    measured: list[tuple[int, bool]] = field(default_factory=list)
    done: bool = False

    def __post_init__(self) -> None:
        if not 1 <= self.lo <= self.hi:
            raise BadInput(f"concurrency range {self.lo}..{self.hi} is empty or below 1")

    def next_point(self) -> int | None:
        """The concurrency to measure next, or None when the search is over."""
        if self.done:
            return None
        if not self.measured:
            return self.lo
        top = self.hi if self.fail is None else self.fail - 1
        if self.best is None or self.best >= top:
            self.done = True
            return None
        return (self.best + top + 1) // 2  # upper middle: a pass moves `best` up, a fail shrinks `top`

    def feed(self, concurrency: int, passes: bool) -> None:
        self.measured.append((concurrency, passes))
        if passes:
            self.best = max(self.best or concurrency, concurrency)
        else:
            self.fail = concurrency if self.fail is None else min(self.fail, concurrency)
            if concurrency == self.lo:
                self.done = True

    @property
    def fails_at_lo(self) -> bool:
        return self.done and self.best is None


def search(lo: int, hi: int, passes: Callable[[int], bool]) -> Bisection:
    """Run one search with `passes(concurrency)` as the measurement."""
    b = Bisection(lo, hi)
    while (c := b.next_point()) is not None:
        b.feed(c, passes(c))
    return b
