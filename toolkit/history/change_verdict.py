"""The change-point verdict (pure): which of Otava's change points count, at a stated false-alarm
rate per series.

Otava's p-value is that of a t-test at the split E-Divisive chose, the best of every place the
segment could split; a flat series offers many places, so p < max_pvalue at the best of them is far
likelier than max_pvalue (measured, benchmarks/verdict_calibration.py: 20 points of 3% noise show a
"change point at p < 0.001" in 1.9% of flat series). A change point counts here when Otava's p times
the number of places its segment could split (Bonferroni: the points between the neighbouring change
points, less one) is under max_pvalue; `pvalue` is that adjusted value, Otava's own is kept beside
it. A flat series then shows a change point at most max_pvalue of the time (it needs some split's
t-test under max_pvalue / splits), whatever its length; and Otava's `min_magnitude` floor still
applies (it only removes change points).
"""

from __future__ import annotations

import dataclasses
from typing import Sequence


def judge(n_points: int, found: Sequence, *, max_pvalue: float) -> list:
    """The change points of `found` (toolkit.history.otava.ChangePoint, in index order, of a series
    of `n_points` values) that count, each with `pvalue` adjusted and `otava_pvalue` Otava's own."""
    idx = [0, *(c.index for c in found), n_points]
    out = []
    for i, c in enumerate(found):
        raw = c.otava_pvalue if c.otava_pvalue is not None else c.pvalue
        splits = max(idx[i + 2] - idx[i] - 1, 1)
        adjusted = min(1.0, raw * splits)
        if adjusted < max_pvalue:
            out.append(dataclasses.replace(c, pvalue=adjusted, otava_pvalue=raw, splits=splits))
    return out


def legend(*, max_pvalue: float, min_magnitude: float) -> str:
    """The rule `judge` (and Otava's options) decide with, in one line."""
    return (f"change point: Otava's E-Divisive split with its t-test p times the places its segment could split "
            f"under {max_pvalue:g} and a change of at least {min_magnitude:.0%} (a flat series shows one at most "
            f"{max_pvalue:g} of the time)")
