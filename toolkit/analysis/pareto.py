"""The Pareto front of a sweep (pure): tokens/s per user against tokens/s per GPU.

Each measured (variant, concurrency) is a point: per user = output tok/s / concurrency (what one
stream sees), per GPU = output tok/s / GPUs (what the box serves). The front (the curve drawn) is made
of the points no other point's means beat: at least as good on both axes and better on one.

"Dominated" is a verdict, not a reading of the means: a variant is dominated when every one of its
points is beaten beyond the noise by some point. Point q beats point p when the lower end of the
interval of the ratio of their mean throughputs (`toolkit.analysis.stats.ratio_ci`: delta method with
Welch's t over the launches' values) lies above what q needs to be as good as p on both axes:
T_q / T_p > max(c_q / c_p, g_q / g_p). Each such claim is one-sided at alpha / 2 / (V - 1) for V
variants (Bonferroni over the other variants), so a variant truly on the front is called dominated in
at most alpha / 2 where only the other variants' points at its concurrency come near it (a point at
another concurrency would need throughput to scale faster than linearly with concurrency or GPUs).
A point with fewer than 2 launches is never beaten: its noise is unknown. Its false alarms and power:
benchmarks/verdict_calibration.py ("pareto dominated" rows).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

from toolkit.analysis import stats

ALPHA = 0.05


@dataclass(frozen=True)
class Point:
    variant: str
    concurrency: int
    per_user: float  # tok/s per user
    per_gpu: float  # tok/s per GPU
    values: tuple[float, ...] = ()  # output tok/s of each launch (the noise the verdict reads)
    gpus: int = 1


def point(variant: str, concurrency: int, values: Sequence[float], gpus: int) -> Point:
    """The point of one (variant, concurrency) from its launches' output tok/s."""
    mean = sum(values) / len(values)
    return Point(variant, concurrency, mean / max(concurrency, 1), mean / max(gpus, 1),
                 tuple(float(v) for v in values), max(gpus, 1))


def _dominates(a: Point, b: Point) -> bool:
    return a.per_user >= b.per_user and a.per_gpu >= b.per_gpu and (a.per_user > b.per_user or a.per_gpu > b.per_gpu)


def front(points: Sequence[Point]) -> list[Point]:
    """The points no other point's means beat, by tokens/s per GPU ascending (the curve's order)."""
    on = [p for p in points if not any(_dominates(q, p) for q in points)]
    return sorted(on, key=lambda p: (p.per_gpu, -p.per_user))


def beats(q: Point, p: Point, level: float) -> bool:
    """Whether q is at least as good as p on both axes beyond the noise, one-sided at `level`."""
    if q is p or len(q.values) < 2 or len(p.values) < 2:
        return False
    lo, _ = stats.ratio_ci(p.values, q.values, confidence=1.0 - 2.0 * level)
    need = max(max(q.concurrency, 1) / max(p.concurrency, 1), q.gpus / p.gpus)
    return math.isfinite(lo) and lo > need


def pair_level(variants: int, alpha: float = ALPHA) -> float:
    """The one-sided level of each 'q beats p' claim among `variants` variants."""
    return alpha / 2.0 / max(variants - 1, 1)


def dominated_variants(points: Iterable[Point], alpha: float = ALPHA) -> list[str]:
    """Variants every point of which some point beats beyond the noise (`beats`), in first-seen order."""
    pts = list(points)
    names = list(dict.fromkeys(p.variant for p in pts))
    level = pair_level(len(names), alpha)
    return [v for v in names
            if all(any(beats(q, p, level) for q in pts) for p in pts if p.variant == v)]


def legend(alpha: float = ALPHA) -> str:
    """The rule `dominated_variants` calls a variant dominated by, and its error rate."""
    return (f"dominated: every point of the variant is beaten beyond the noise by some point: the lower end of "
            f"the interval of their throughput ratio (delta method, Welch, over the launches) above what is needed "
            f"to be as good on both tokens/s per user and per GPU, each claim one-sided at {alpha / 2:g} / (variants "
            f"- 1); a variant truly on the front is called dominated with probability <= {alpha / 2:g}; a point "
            f"measured once is never beaten. The front drawn is the means'")
