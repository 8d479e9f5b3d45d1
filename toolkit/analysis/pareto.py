"""The Pareto front of a sweep (pure): tokens/s per user against tokens/s per GPU.

Each measured (variant, concurrency) is a point: per user = output tok/s / concurrency (what one
stream sees), per GPU = output tok/s / GPUs (what the box serves). A point is on the front when no
other point is at least as good on both axes and better on one; a variant is dominated when none of
its points is on the front (the report greys it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence


@dataclass(frozen=True)
class Point:
    variant: str
    concurrency: int
    per_user: float  # tok/s per user
    per_gpu: float  # tok/s per GPU


def point(variant: str, concurrency: int, output_tok_s: float, gpus: int) -> Point:
    return Point(variant, concurrency, output_tok_s / max(concurrency, 1), output_tok_s / max(gpus, 1))


def _dominates(a: Point, b: Point) -> bool:
    return a.per_user >= b.per_user and a.per_gpu >= b.per_gpu and (a.per_user > b.per_user or a.per_gpu > b.per_gpu)


def front(points: Sequence[Point]) -> list[Point]:
    """The non-dominated points, by tokens/s per GPU ascending (the curve's order)."""
    on = [p for p in points if not any(_dominates(q, p) for q in points)]
    return sorted(on, key=lambda p: (p.per_gpu, -p.per_user))


def dominated_variants(points: Iterable[Point]) -> list[str]:
    """Variants with no point on the front, in first-seen order."""
    pts = list(points)
    on = {p.variant for p in front(pts)}
    return [v for v in dict.fromkeys(p.variant for p in pts) if v not in on]
