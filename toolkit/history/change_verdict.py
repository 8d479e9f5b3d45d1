"""The change-point verdict (pure): which of Otava's change points count, at a stated false-alarm
rate per series, `alpha` (history's --alpha, default 0.01).

Otava's p-value is that of a t-test at the split E-Divisive chose, the best of every place the
series could split, so a flat series shows "a change point at p < max_pvalue" far more often than
max_pvalue (measured, benchmarks/verdict_calibration.py: 20 points of 3% noise, p < 0.001 in 5.6% of
flat series with max_pvalue 0.01 given to Otava, 1.9% with 0.001). Scaling Otava's p by the places
its segment could split is not enough either (0.9%, then 0.3%): the segments themselves are chosen
from the data. The rule here:

1. the series changes at all only when the best split of the *whole* series passes Student's
   two-sample t-test (pooled variance) at alpha / (n - 1), n - 1 being the places a series of n
   points can split (Bonferroni over exact tests: a flat series with gaussian noise shows a change
   point at most alpha of the time, whatever its length);
2. then each of Otava's change points counts when the same t-test between the points on either side
   of it (up to the neighbouring change points) passes at alpha / the places that segment could
   split; `pvalue` is that adjusted value (Otava's own is kept beside it, `otava_pvalue`).
Otava's candidates themselves (its max_pvalue, 0.001, and `min_magnitude` floor) only remove change
points. The price of a per-series rate is power on short series: 4 points (2 on each side, 2
degrees of freedom) need the step to be about 17 times the points' pooled standard deviation at
alpha 0.01 (a halving of throughput with noise under ~2%).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import numpy as np


def split_pvalues(values: Sequence[float]) -> np.ndarray:
    """Two-sided p of Student's t between values[:j] and values[j:] for j = 1 .. n-1 (1.0 where the
    test has no degrees of freedom or no spread; 0.0 for a difference without any spread)."""
    from scipy.stats import t as student

    x = np.asarray(values, dtype=float)
    n = len(x)
    if n < 3:
        return np.ones(max(n - 1, 0))
    j = np.arange(1, n)
    c1, c2 = np.cumsum(x)[:-1], np.cumsum(x * x)[:-1]
    m1, m2 = c1 / j, (x.sum() - c1) / (n - j)
    ss = (c2 - j * m1 ** 2) + ((x * x).sum() - c2 - (n - j) * m2 ** 2)
    var = np.maximum(ss, 0.0) / (n - 2)
    se = np.sqrt(var * (1 / j + 1 / (n - j)))
    diff = np.abs(m1 - m2)
    t = np.where(se > 0, diff / np.where(se > 0, se, 1.0), np.where(diff > 0, np.inf, 0.0))
    return 2 * student.sf(t, n - 2)


def _segment_p(values: Sequence[float], lo: int, at: int, hi: int) -> float:
    """Student's t of values[lo:at] against values[at:hi], times the places values[lo:hi] could split."""
    p = split_pvalues(values[lo:hi])
    return min(1.0, float(p[at - lo - 1]) * len(p)) if len(p) else 1.0


def changed(values: Sequence[float]) -> float:
    """The whole series' adjusted p: its best split's, times the places it could split."""
    p = split_pvalues(values)
    return min(1.0, float(p.min()) * len(p)) if len(p) else 1.0


def judge(values: Sequence[float], found: Sequence, *, alpha: float) -> list:
    """The change points of `found` (toolkit.history.otava.ChangePoint, in index order) of the
    series `values` that count, each with `pvalue` adjusted and `otava_pvalue` Otava's own."""
    if not found or changed(values) >= alpha:
        return []
    idx = [0, *(c.index for c in found), len(values)]
    out = []
    for i, c in enumerate(found):
        p = _segment_p(values, idx[i], c.index, idx[i + 2])
        if p < alpha and not math.isnan(p):
            raw = c.otava_pvalue if c.otava_pvalue is not None else c.pvalue
            out.append(dataclasses.replace(c, pvalue=p, otava_pvalue=raw, splits=idx[i + 2] - idx[i] - 1))
    return out


def legend(*, alpha: float, max_pvalue: float, min_magnitude: float) -> str:
    """The rule `judge` (and Otava's options) decide with, in one line."""
    return (f"change point: Otava's E-Divisive split (its p < {max_pvalue:g}, a change of at least {min_magnitude:.0%}), "
            f"counted when Student's t across it, times the places its segment could split, is under {alpha:g} (the "
            f"whole series' best split first: a flat series shows a change point at most {alpha:g} of the time)")
