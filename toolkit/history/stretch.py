"""Stretches (pure): an interval of a series' points whose level differs from the rest of the series,
the shape a regression fixed a few points later leaves (100, 100, 100, 50, 50, 100, 100). Its two
halves have about the same mean, so neither Otava's E-Divisive nor the best single split sees it.

A stretch is `values[start:end]` with at least `MIN_POINTS` points and at least one point of the
series on each side (one touching an end of the series is a step, a single change point). Its
statistic is Student's two-sample t (pooled variance, n - 2 degrees of freedom: the two-level
model, the same as a single split's) of its points against all the others. A single point apart
from the rest is not a stretch: one launch's bad moment looks the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

MIN_POINTS = 2


def bounds(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of every stretch a series of n points can hold: 1 <= start, end <= n - 1,
    end - start >= MIN_POINTS."""
    starts, ends = [], []
    for i in range(1, n - MIN_POINTS):
        for j in range(i + MIN_POINTS, n):
            starts.append(i)
            ends.append(j)
    return np.asarray(starts, dtype=int), np.asarray(ends, dtype=int)


def places(n: int) -> int:
    """How many stretches a series of n points can hold: (n - 1 - MIN_POINTS)(n - MIN_POINTS) / 2."""
    k = n - 1 - MIN_POINTS
    return k * (k + 1) // 2 if k > 0 else 0


def interval_t(values: Sequence[float], starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """|t| of values[start:end] against the rest of values, for each (start, end); inf for a
    difference without any spread, 0 for a series without any spread."""
    x = np.asarray(values, dtype=float)
    n = len(x)
    if len(starts) == 0:
        return np.zeros(0)
    scale = x.std()
    if not scale > 0:
        return np.zeros(len(starts))
    z = (x - x.mean()) / scale  # centred: the rest's sum is minus the stretch's
    s = np.concatenate([[0.0], np.cumsum(z)])
    q = np.concatenate([[0.0], np.cumsum(z * z)])
    m = (ends - starts).astype(float)
    r = n - m
    s_in = s[ends] - s[starts]
    ss = q[-1] - s_in ** 2 / m - s_in ** 2 / r  # within-stretch plus within-rest sums of squares
    var = np.maximum(ss, 0.0) / (n - 2)
    se = np.sqrt(var * (1 / m + 1 / r))
    diff = np.abs(s_in / m + s_in / r)
    flat = se <= 1e-12
    return np.where(flat, np.where(diff > 1e-9, np.inf, 0.0), diff / np.where(flat, 1.0, se))


@dataclass(frozen=True)
class Stretch:
    start: int  # its first point
    end: int  # the first point after it
    t: float  # |t| against the rest
    p: float  # two-sided, one test (not adjusted)
    places: int  # the stretches the series could hold
    mean_before: float
    mean_in: float
    mean_after: float
    mean_rest: float  # of the points before and after it together
    sd_before: float
    sd_in: float
    sd_after: float

    @property
    def change(self) -> float:
        """The stretch's level against the rest's, relative (-0.5: half the rest's)."""
        return self.mean_in / self.mean_rest - 1 if self.mean_rest else 0.0


def best(values: Sequence[float]) -> Stretch | None:
    """The stretch of `values` with the largest t (None where a series this short holds none)."""
    from scipy.stats import t as student

    x = np.asarray(values, dtype=float)
    n = len(x)
    starts, ends = bounds(n)
    if not len(starts):
        return None
    t = interval_t(x, starts, ends)
    k = int(np.argmax(t))
    i, j = int(starts[k]), int(ends[k])
    before, inside, after = x[:i], x[i:j], x[j:]
    rest = np.concatenate([before, after])

    def sd(part: np.ndarray) -> float:
        return float(part.std(ddof=1)) if len(part) > 1 else 0.0

    return Stretch(i, j, float(t[k]), float(2 * student.sf(t[k], n - 2)), len(starts), float(before.mean()),
                   float(inside.mean()), float(after.mean()), float(rest.mean()), sd(before), sd(inside), sd(after))
