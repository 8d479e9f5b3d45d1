"""The change-point verdict (pure): which change points of a tracked series count, at a stated
false-alarm rate per series, `alpha` (history's --alpha, default 0.01).

Otava's p-value is that of a t-test at the split E-Divisive chose, the best of every place the
series could split, so a flat series shows "a change point at p < max_pvalue" far more often than
max_pvalue (measured, benchmarks/verdict_calibration.py: 20 points of 3% noise, p < 0.001 in 5.6% of
flat series with max_pvalue 0.01 given to Otava, 1.9% with 0.001). Scaling Otava's p by the places
its segment could split is not enough either (0.9%, then 0.3%): the segments themselves are chosen
from the data. And Otava proposes nothing for a regression fixed a few points later (100, 100, 100,
50, 50, 100, 100): E-Divisive's halves have about the same mean. The rule here:

1. the series changes at all only when its best single split (a step) or its best stretch (an
   interval of points against all the others, toolkit/history/stretch.py) passes Student's
   two-sample t-test (pooled variance), Bonferroni-adjusted within its kind and given its share of
   alpha: a step at STEP_SHARE * alpha / (n - 1), n - 1 the places a series of n points can split;
   a stretch at (1 - STEP_SHARE) * alpha / K, K the stretches it can hold. By the union bound, a
   flat series with gaussian noise shows a change point at most alpha of the time, whatever its
   length. (Why Bonferroni and not a calibration of the max statistic: it is exact for any length
   with no simulation at run time, and on short series, where power is scarce, the best split's
   and the best stretch's alarms barely overlap, so a calibration would gain little there; a
   permutation test cannot reach alpha at all there: two low points among seven can lie in 21
   ways, 7 of them a stretch, so its p is never under 1/3.)
2. each of Otava's change points counts when the same t-test between the points on either side
   of it (up to the neighbouring change points) passes at alpha / the places that segment could
   split; `pvalue` is that adjusted value (Otava's own is kept beside it, `otava_pvalue`); when
   none of them counts but the series' best split passed rule 1 (and changes by `min_magnitude`),
   that split counts instead (`otava_pvalue` None): Otava's candidates can all sit elsewhere, e.g. a
   two-point dip of a loaded box just before a real 2x step (seen in CI: Otava proposed the dip at
   p < 0.001 and dropped the step, whose own t across the series was p ~ 1e-5 after correction);
3. between the change points that count (the whole series when none does), the best stretch of
   each segment counts when it fits better than the segment's best split (a larger t at the same
   degrees of freedom: a step that Otava missed is not read as a stretch), passes at
   (1 - STEP_SHARE) * alpha / the stretches the segment could hold, and differs from the rest by
   at least `min_magnitude`. It counts as two change points, its start and its end (`stretch`:
   their indices), each bisectable ("regression at X, fixed at Y"). Where Otava found only one end
   of a stretch (it sees a stretch near an end of the series as a step), the best stretch between
   that change point's neighbours, when it counts the same way and ends there, replaces it.
Otava's candidates themselves (its max_pvalue, 0.001, and `min_magnitude` floor) only remove change
points. The price of a per-series rate is power on short series: 4 points (2 on each side, 2
degrees of freedom) need a step to be about 21 times the points' pooled standard deviation at
alpha 0.01 (a halving of throughput with noise under ~2%).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from toolkit.history import stretch as stretches

STEP_SHARE = 2 / 3  # of alpha, for steps; the rest for stretches (a stretch is the rarer shape)


@dataclass(frozen=True)
class ChangePoint:
    index: int  # the first point after the change
    forward_change_percent: float
    magnitude: float
    mean_before: float
    mean_after: float
    stddev_before: float
    stddev_after: float
    pvalue: float  # adjusted for the places the segment could split (or hold a stretch)
    otava_pvalue: float | None = None  # Otava's own, at the split it chose (None: not Otava's)
    splits: int = 1  # the places the segment between the neighbouring change points could split
    stretch: tuple[int, int] | None = None  # an end of a stretch: its (first point, first point after)

    def direction(self, higher_is_better: bool) -> str:
        up = self.forward_change_percent > 0
        return "better" if up == higher_is_better else "worse"


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
    """The whole series' best split's p, times the places it could split."""
    p = split_pvalues(values)
    return min(1.0, float(p.min()) * len(p)) if len(p) else 1.0


def _stretch_p(s: stretches.Stretch | None) -> float:
    """A best stretch's p, times the stretches its series could hold."""
    return 1.0 if s is None else min(1.0, s.p * s.places)


def gate(values: Sequence[float]) -> float:
    """The whole series' p of any change: the best step's or the best stretch's adjusted p over its
    share of alpha, the smaller (union bound: under 1.0 only when one is)."""
    return min(1.0, changed(values) / STEP_SHARE, _stretch_p(stretches.best(values)) / (1 - STEP_SHARE))


def _ends(values: Sequence[float], s: stretches.Stretch, lo: int, p: float) -> list[ChangePoint]:
    """A stretch of values[lo:...] as its two change points (indices into `values`)."""
    span = (lo + s.start, lo + s.end)
    into = 100 * (s.mean_in / s.mean_before - 1) if s.mean_before else 0.0
    back = 100 * (s.mean_after / s.mean_in - 1) if s.mean_in else 0.0
    return [ChangePoint(span[0], into, abs(into) / 100, s.mean_before, s.mean_in, s.sd_before, s.sd_in, p,
                        splits=s.places, stretch=span),
            ChangePoint(span[1], back, abs(back) / 100, s.mean_in, s.mean_after, s.sd_in, s.sd_after, p,
                        splits=s.places, stretch=span)]


def _segment_stretch(values: Sequence[float], lo: int, hi: int, *, alpha: float,
                     min_magnitude: float) -> list[ChangePoint]:
    """The best stretch of values[lo:hi] as two change points, when it counts (rule 3), else []."""
    seg = list(values[lo:hi])
    s = stretches.best(seg)
    if s is None or abs(s.change) < min_magnitude:
        return []
    p = _stretch_p(s)
    if not p < (1 - STEP_SHARE) * alpha or not s.t > _split_t(seg):
        return []
    return _ends(values, s, lo, p)


def _split_t(values: Sequence[float]) -> float:
    """The largest |t| of any single split of values (same statistic as split_pvalues)."""
    n = len(values)
    starts = np.zeros(n - 1, dtype=int)
    ends = np.arange(1, n)
    # a split is a "stretch" touching the start: the same two-level t
    return float(stretches.interval_t(values, starts, ends).max()) if n > 2 else 0.0


def judge(values: Sequence[float], found: Sequence, *, alpha: float, min_magnitude: float = 0.0) -> list:
    """The change points of `values` that count: those of `found` (Otava's, in index order), each with
    `pvalue` adjusted and `otava_pvalue` Otava's own, and the ends of the stretches between them."""
    if gate(values) >= alpha:
        return []
    idx = [0, *(c.index for c in found), len(values)]
    out = []
    for i, c in enumerate(found):
        p = _segment_p(values, idx[i], c.index, idx[i + 2])
        if p < alpha and not math.isnan(p):
            raw = c.otava_pvalue if c.otava_pvalue is not None else c.pvalue
            out.append(dataclasses.replace(c, pvalue=p, otava_pvalue=raw, splits=idx[i + 2] - idx[i] - 1))
    if not out:
        out += _best_split(values, alpha=alpha, min_magnitude=min_magnitude)
    cut = [0, *(c.index for c in out), len(values)]
    for lo, hi in zip(cut, cut[1:]):
        out += _segment_stretch(values, lo, hi, alpha=alpha, min_magnitude=min_magnitude)
    # Otava found one end of a stretch (near an end of the series, where it sees a step): the stretch
    # across that change point, when it counts, replaces it by its two ends
    for k in range(1, len(cut) - 1):
        ends = _segment_stretch(values, cut[k - 1], cut[k + 1], alpha=alpha, min_magnitude=min_magnitude)
        if ends and cut[k] in {e.index for e in ends} and not any(c.stretch for c in out if c.index == cut[k]):
            out = [c for c in out if c.index != cut[k]] + ends
    return sorted(out, key=lambda c: c.index)


def _best_split(values: Sequence[float], *, alpha: float, min_magnitude: float) -> list[ChangePoint]:
    """The whole series' best single split as a change point (rule 2's fallback), [] unless it passes
    rule 1's step test (the same p as `changed`) and changes by min_magnitude."""
    x = np.asarray(values, dtype=float)
    p = split_pvalues(x)
    if not len(p) or not min(1.0, float(p.min()) * len(p)) < STEP_SHARE * alpha:
        return []
    at = int(np.argmin(p)) + 1
    before, after = x[:at], x[at:]
    mb, ma = float(before.mean()), float(after.mean())
    change = (ma / mb - 1) if mb else 0.0
    if abs(change) < min_magnitude:
        return []
    return [ChangePoint(at, 100 * change, abs(change), mb, ma, float(before.std()), float(after.std()),
                        min(1.0, float(p[at - 1]) * len(p)), otava_pvalue=None, splits=len(p))]


def legend(*, alpha: float, max_pvalue: float, min_magnitude: float) -> str:
    """The rule `judge` (and Otava's options) decide with, in one line."""
    step, rest = STEP_SHARE * alpha, (1 - STEP_SHARE) * alpha
    return (f"change point: Otava's E-Divisive split (its p < {max_pvalue:g}, a change of at least {min_magnitude:.0%}), "
            f"counted when Student's t across it, times the places its segment could split, is under {alpha:g} (none "
            f"counting, the series' best split counts when it passes {step:.2g}); a "
            f"stretch (at least {stretches.MIN_POINTS} points against the rest, e.g. a regression fixed later) counts as "
            f"its two ends when Student's t, times the places a stretch could lie, is under {rest:.2g} and it fits "
            f"better than a single split; first the whole series' best split must pass {step:.2g} or its best stretch "
            f"{rest:.2g}: a flat series shows a change point at most {alpha:g} of the time")
