"""Pure statistics: Mann-Whitney, ratio intervals, verdicts, pyperf-like formatting."""

from __future__ import annotations

import math
import random

import pytest

from toolkit.analysis import stats
from toolkit.analysis.stats import (FASTER, HIGHER, LOWER, NOT_SIGNIFICANT, SLOWER, TOO_FEW, compare_values,
                           format_comparison, mann_whitney_p, min_p_value, ratio_ci,
                           verdict)

A = [10.1, 10.2, 10.3, 10.2, 10.1]
B = [12.3, 12.2, 12.4, 12.3, 12.5]


def test_verdict_legend_names_the_minimum_effect():
    legend = stats.verdict_legend(min_effect=0.02)
    assert "2%" in legend and "--min-effect" in legend and "p < 0.05" in legend


def test_min_p_value_and_enough_repeats():
    assert min_p_value(2, 2) == pytest.approx(1 / 3)
    assert min_p_value(3, 3) == pytest.approx(0.1)
    assert min_p_value(4, 4) == pytest.approx(2 / 70)
    assert not stats.enough_repeats(2, 2)
    assert not stats.enough_repeats(3, 3)  # 0.1 can never be < 0.05
    assert stats.enough_repeats(4, 4)
    assert stats.enough_repeats(3, 5)
    assert not stats.enough_repeats(4, 4, min_repeats=5)


def test_mann_whitney():
    assert mann_whitney_p(A, A) > 0.5
    assert mann_whitney_p([1.0] * 4, [1.0] * 4) == 1.0
    assert mann_whitney_p([], B) == 1.0
    # fully separated 5 vs 5 without ties, exact: 2 / C(10, 5)
    assert mann_whitney_p([1, 2, 3, 4, 5], [6, 7, 8, 9, 10]) == pytest.approx(2 / 252)
    assert mann_whitney_p(A, B) == pytest.approx(2 / 252)  # ties within a side, fully separated: exact
    # ties across the sides (counts, rounded or imported values): the exact p over every split, never
    # the normal approximation's 0.032, which made this "faster" at alpha 0.05; never below min_p_value
    assert mann_whitney_p([100, 100, 100, 101], [101, 102, 102, 102]) == pytest.approx(4 / 70)
    assert compare_values([100, 100, 100, 101], [101, 102, 102, 102], higher_is_better=True).verdict == NOT_SIGNIFICANT
    assert mann_whitney_p([1] * 4, [2] * 4) == pytest.approx(min_p_value(4, 4))
    assert 0 < mann_whitney_p([20.0, 20.0], [20.0]) <= 1 and 0 < mann_whitney_p([3.0], [3.0, 4.0]) <= 1  # one a side


def test_ratio_ci_mean_and_median():
    lo, hi = ratio_ci(A, B)
    r = (sum(B) / 5) / (sum(A) / 5)
    assert lo < r < hi and lo > 1.15 and hi < 1.27
    assert ratio_ci([5.0, 5.0], [6.0, 6.0]) == (1.2, 1.2)
    assert all(math.isnan(x) for x in ratio_ci([1.0], B))
    m1 = ratio_ci(A, B, stat="median")
    assert m1 == ratio_ci(A, B, stat="median")  # fixed seed: deterministic
    assert m1[0] <= 12.3 / 10.2 <= m1[1]
    with pytest.raises(ValueError):
        ratio_ci(A, B, stat="mode")


def test_delta_interval_is_calibrated_for_small_samples():
    rng = random.Random(7)
    covered = 0
    trials = 400
    for _ in range(trials):
        a = [rng.gauss(100, 3) for _ in range(4)]
        b = [rng.gauss(110, 3) for _ in range(4)]
        lo, hi = ratio_ci(a, b)
        covered += lo <= 1.1 <= hi
    assert 0.91 <= covered / trials <= 0.99


def test_verdicts_and_directions():
    assert verdict(A, B, higher_is_better=True) == FASTER
    assert verdict(A, B, higher_is_better=False) == SLOWER  # latency went up
    assert verdict(B, A, higher_is_better=False) == FASTER
    assert verdict(A, B, higher_is_better=None) == HIGHER
    assert verdict(B, A, higher_is_better=None) == LOWER
    assert verdict(A[:2], B[:2], higher_is_better=True) == TOO_FEW  # 2 vs 2 can never reach 0.05
    assert verdict(A[:3], B[:3], higher_is_better=True) == TOO_FEW
    assert verdict(A[:4], B[:4], higher_is_better=True) == FASTER
    rng = random.Random(3)
    same_a = [rng.gauss(100, 3) for _ in range(8)]
    same_b = [rng.gauss(100, 3) for _ in range(8)]
    assert verdict(same_a, same_b, higher_is_better=True) == NOT_SIGNIFICANT


def test_minimum_effect():
    a = [100.0, 100.01, 99.99, 100.0, 100.02]
    b = [x * 1.005 for x in a]  # 0.5%: significant but below the 1% minimum effect
    c = compare_values(a, b, higher_is_better=True)
    assert c.p_value < 0.05 and c.verdict == NOT_SIGNIFICANT
    assert compare_values(a, b, higher_is_better=True, min_effect=0.001).verdict == FASTER


def test_comparison_fields():
    c = compare_values(A, B, higher_is_better=False, unit="ms")
    assert c.n_a == c.n_b == 5
    assert c.ratio == pytest.approx(12.34 / 10.18)
    assert c.speedup == pytest.approx(1 / c.ratio)
    lo, hi = c.speedup_ci
    assert lo < c.speedup < hi < 1
    assert c.change_pct == pytest.approx((c.ratio - 1) * 100)
    assert c.significant


def test_format_like_pyperf():
    c = compare_values(A, B, higher_is_better=True, unit="tok/s")
    assert format_comparison(c) == "10.2 tok/s +- 0.1 -> 12.3 tok/s +- 0.1: 1.21x faster [1.20, 1.23]"
    c = compare_values(A, B, higher_is_better=False, unit="ms")
    assert format_comparison(c) == "10.2 ms +- 0.1 -> 12.3 ms +- 0.1: 1.21x slower [1.20, 1.23]"
    c = compare_values(A, A, higher_is_better=True, unit="tok/s")
    assert format_comparison(c).endswith(": not significant (1.00x, p=1.00)")
    c = compare_values(A[:2], B[:2], higher_is_better=True, unit="tok/s")
    assert format_comparison(c).endswith(": too few repeats (2 vs 2)")
    assert stats.format_value(1234.4, "tok/s") == "1234 tok/s"
    assert stats.format_value(0.01234, "s") == "0.0123 s"
    assert stats.format_mean_std(10.0, 0.001) == "10.0 +- 0.001"
