"""Pure statistics for comparing per-repeat measurements (no I/O).

One *observation* is one repeat (one server launch, one benchmark run): within-run samples are
averaged before they get here, so the spread we test against is run-to-run spread.

Choices, and why:

- **Significance**: Mann-Whitney U, two-sided (`scipy.stats.mannwhitneyu`, method "auto": exact
  when both sides have fewer than 8 values and no ties). It assumes nothing about the shape of the
  noise. Its smallest reachable two-sided p-value is `2 / C(n_a + n_b, n_a)` (0.33 for 2 vs 2, 0.10
  for 3 vs 3, 0.057 for 3 vs 4, 0.029 for 4 vs 4): when that cannot go below `alpha` the verdict is
  "too few repeats", never "not significant".
- **Interval**: the 95% confidence interval of the ratio B/A of **means** is analytic: the delta
  method on the log scale, `log(mB/mA) +- t * sqrt(sA^2/(nA mA^2) + sB^2/(nB mB^2))` with Welch's
  degrees of freedom. With 3-10 repeats a bootstrap interval is too narrow (it cannot see beyond the
  handful of values it resamples); the t quantile accounts for the small samples. The ratio of
  **medians** (`stat="median"`) has no simple analytic form: it uses a percentile bootstrap with a
  fixed seed (deterministic output), 4000 resamples. A mean of 0 or below also falls back to the
  bootstrap. Where a side's mean is within t of its standard errors of 0 (Fieller's condition) the
  ratio's interval is unbounded: there is no interval (nan), printed "no interval", and no
  faster/slower verdict (an unbounded interval holds 1).
- **Verdict**: "faster"/"slower" needs all of: enough repeats (above), p < alpha, the interval
  excluding 1, and an effect of at least `min_effect` (1% by default) in the metric's good
  direction. Otherwise "not significant".
- **Direction**: the caller says whether higher is better (`toolkit.results.metrics` knows it for every
  stored metric); None (a metric the registry does not know) makes verdicts read "higher"/"lower"
  instead of "faster"/"slower".
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Sequence

import numpy as np

FASTER = "faster"
SLOWER = "slower"
NOT_SIGNIFICANT = "not significant"
TOO_FEW = "too few repeats"
# a pair launched until its sequential verdict settled, on a metric that verdict cannot judge (values of 0
# or below: it compares log-values): the fixed rule would judge a sample size the looks chose, so neither does
NOT_JUDGED = "not judged"
HIGHER = "higher"  # verdict for a significant increase of a metric without a known direction
LOWER = "lower"

DEFAULT_ALPHA = 0.05
DEFAULT_MIN_EFFECT = 0.01
DEFAULT_MIN_REPEATS = 3
BOOTSTRAP_SEED = 20240601
BOOTSTRAP_RESAMPLES = 4000

@dataclass(frozen=True)
class Summary:
    """Descriptive statistics of one set of per-repeat values (std is the sample std, ddof=1)."""

    n: int
    mean: float
    std: float
    median: float
    min: float
    max: float


def summarize(values: Sequence[float]) -> Summary:
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        nan = float("nan")
        return Summary(0, nan, nan, nan, nan, nan)
    std = float(x.std(ddof=1)) if x.size > 1 else 0.0
    return Summary(int(x.size), float(x.mean()), std, float(np.median(x)), float(x.min()), float(x.max()))


def min_p_value(n_a: int, n_b: int) -> float:
    """Smallest two-sided p-value Mann-Whitney U can reach with n_a vs n_b values (no ties)."""
    if n_a < 1 or n_b < 1:
        return 1.0
    return min(1.0, 2.0 / math.comb(n_a + n_b, n_a))


def enough_repeats(n_a: int, n_b: int, *, min_repeats: int = DEFAULT_MIN_REPEATS,
                   alpha: float = DEFAULT_ALPHA) -> bool:
    """Whether n_a vs n_b values can ever give a significant verdict."""
    return min(n_a, n_b) >= max(min_repeats, 1) and min_p_value(n_a, n_b) < alpha


def too_few_rows(*, min_repeats: int = DEFAULT_MIN_REPEATS, alpha: float = DEFAULT_ALPHA) -> str:
    """The rows the fixed rule calls too few (they take the stopped sequential verdict), in words:
    "fewer than 4 launches each" at alpha 0.05, where Mann-Whitney's smallest p at 3 against 3 is 0.1."""
    n = max(min_repeats, 1)
    while not enough_repeats(n, n, min_repeats=min_repeats, alpha=alpha):
        n += 1
    return f"fewer than {n} launches each"


EXACT_SPLITS = 13_000  # ties: enumerate every split up to this many (8 vs 8: C(16, 8) = 12870, ~0.3 s)


def mann_whitney_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided Mann-Whitney U p-value; 1.0 when either side is empty or all values are equal.
    Small samples get the exact p: without ties scipy's exact U distribution, with ties (counts,
    rounded or imported values) every split of the pooled values enumerated (the normal
    approximation scipy otherwise uses there undercuts the exact p, e.g. 0.032 against 0.057 for
    100,100,100,101 vs 101,102,102,102, and min_p_value)."""
    xa = np.asarray(a, dtype=float)
    xb = np.asarray(b, dtype=float)
    if xa.size == 0 or xb.size == 0:
        return 1.0
    pooled = np.concatenate([xa, xb])
    if np.all(pooled == xa[0]):
        return 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from scipy import stats as _sp  # imported when used: CLI start-up stays fast

        method: object = "auto"
        if min(xa.size, xb.size) >= 2 and np.unique(pooled).size < pooled.size \
                and math.comb(pooled.size, xa.size) <= EXACT_SPLITS:  # (scipy's permutations need 2 a side)
            method = _sp.PermutationMethod(n_resamples=np.inf)
        p = float(_sp.mannwhitneyu(xa, xb, alternative="two-sided", method=method).pvalue)
    return 1.0 if math.isnan(p) else p


def _bootstrap_ratio_ci(xa: np.ndarray, xb: np.ndarray, stat: str, confidence: float,
                        seed: int, n_boot: int) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    fa = np.median if stat == "median" else np.mean
    ra = fa(xa[rng.integers(0, xa.size, size=(n_boot, xa.size))], axis=1)
    rb = fa(xb[rng.integers(0, xb.size, size=(n_boot, xb.size))], axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = rb / ra
    r = r[np.isfinite(r)]
    if r.size == 0:
        return (float("nan"), float("nan"))
    q = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(r, [q, 1.0 - q])
    return (float(lo), float(hi))


def ratio_ci(a: Sequence[float], b: Sequence[float], *, stat: str = "mean",
             confidence: float = 0.95, seed: int = BOOTSTRAP_SEED,
             n_boot: int = BOOTSTRAP_RESAMPLES) -> tuple[float, float]:
    """Confidence interval of stat(b)/stat(a) (`stat` is "mean" or "median").

    Means: delta method on the log scale with Welch's t (see the module docstring). Medians, and
    means that are not positive: percentile bootstrap with a fixed seed. (nan, nan), no interval, when
    none can be stated honestly: either side has fewer than 2 values, or a side's mean is within t of
    its standard errors of 0 (Fieller's condition: the ratio's interval is then unbounded; the delta
    method would print one such as [0.00, 1876] for 2 launches of a metric near 0).
    """
    if stat not in ("mean", "median"):
        raise ValueError(f"stat must be 'mean' or 'median', not {stat!r}")
    xa = np.asarray(a, dtype=float)
    xb = np.asarray(b, dtype=float)
    if xa.size < 2 or xb.size < 2:
        return (float("nan"), float("nan"))
    ma, mb = float(xa.mean()), float(xb.mean())
    if stat == "median" or ma <= 0 or mb <= 0:
        return _bootstrap_ratio_ci(xa, xb, stat, confidence, seed, n_boot)
    ratio = mb / ma
    ta = float(xa.var(ddof=1)) / (xa.size * ma * ma)
    tb = float(xb.var(ddof=1)) / (xb.size * mb * mb)
    se2 = ta + tb
    if se2 <= 0.0:
        return (ratio, ratio)
    df = se2 * se2 / ((ta * ta) / (xa.size - 1) + (tb * tb) / (xb.size - 1))
    from scipy import stats as _sp

    t = float(_sp.t.ppf(0.5 + confidence / 2.0, df))
    if t * t * max(ta, tb) >= 1.0:  # a mean within t standard errors of 0: the ratio is unbounded (Fieller)
        return (float("nan"), float("nan"))
    half = t * math.sqrt(se2)
    return (ratio * math.exp(-half), ratio * math.exp(half))


@dataclass(frozen=True)
class Comparison:
    """A (baseline) vs B (variant) for one metric. `ratio` is stat(B)/stat(A) and [ci_low, ci_high]
    its confidence interval; `speedup` turns it into "how many times better" for the metric's
    direction (B/A for throughputs, A/B for latencies)."""

    n_a: int
    n_b: int
    mean_a: float
    mean_b: float
    std_a: float
    std_b: float
    median_a: float
    median_b: float
    ratio: float
    ci_low: float
    ci_high: float
    p_value: float
    verdict: str
    higher_is_better: bool | None
    unit: str = ""
    stat: str = "mean"

    @property
    def speedup(self) -> float:
        """> 1 means B is better (ratio for higher-better or unknown metrics, 1/ratio otherwise)."""
        if self.higher_is_better is False:
            return 1.0 / self.ratio if self.ratio else float("inf")
        return self.ratio

    @property
    def speedup_ci(self) -> tuple[float, float]:
        if self.higher_is_better is False:
            lo = 1.0 / self.ci_high if self.ci_high else float("inf")
            hi = 1.0 / self.ci_low if self.ci_low else float("inf")
            return (lo, hi)
        return (self.ci_low, self.ci_high)

    @property
    def change_pct(self) -> float:
        """Signed relative change of the metric itself, (B/A - 1) * 100."""
        return (self.ratio - 1.0) * 100.0

    @property
    def significant(self) -> bool:
        return self.verdict in (FASTER, SLOWER, HIGHER, LOWER)


def compare_values(a: Sequence[float], b: Sequence[float], *, higher_is_better: bool | None,
                   unit: str = "", stat: str = "mean", min_repeats: int = DEFAULT_MIN_REPEATS,
                   alpha: float = DEFAULT_ALPHA, min_effect: float = DEFAULT_MIN_EFFECT) -> Comparison:
    """Compare per-repeat values `a` (baseline) and `b` (variant): summary, ratio, CI, p, verdict."""
    sa, sb = summarize(a), summarize(b)
    ca = sa.median if stat == "median" else sa.mean
    cb = sb.median if stat == "median" else sb.mean
    ratio = cb / ca if sa.n and sb.n and ca != 0 else float("nan")
    lo, hi = ratio_ci(a, b, stat=stat, confidence=1.0 - alpha)
    p = mann_whitney_p(a, b)
    v = verdict_of(sa.n, sb.n, ratio, (lo, hi), p, higher_is_better=higher_is_better,
                   min_repeats=min_repeats, alpha=alpha, min_effect=min_effect)
    return Comparison(sa.n, sb.n, sa.mean, sb.mean, sa.std, sb.std, sa.median, sb.median,
                      ratio, lo, hi, p, v, higher_is_better, unit, stat)


def verdict_of(n_a: int, n_b: int, ratio: float, ci: tuple[float, float], p_value: float, *,
               higher_is_better: bool | None, min_repeats: int = DEFAULT_MIN_REPEATS,
               alpha: float = DEFAULT_ALPHA, min_effect: float = DEFAULT_MIN_EFFECT) -> str:
    """The verdict from already computed figures (see the module docstring for the rule)."""
    if not enough_repeats(n_a, n_b, min_repeats=min_repeats, alpha=alpha):
        return TOO_FEW
    if not math.isfinite(ratio) or p_value >= alpha:
        return NOT_SIGNIFICANT
    lo, hi = ci
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo <= 1.0 <= hi:  # no interval: an unbounded one holds 1
        return NOT_SIGNIFICANT
    if ratio <= 0 or abs(math.log(ratio)) < math.log1p(min_effect):
        return NOT_SIGNIFICANT
    up = ratio > 1.0
    if higher_is_better is None:
        return HIGHER if up else LOWER
    return FASTER if up == higher_is_better else SLOWER


def verdict(a: Sequence[float], b: Sequence[float], *, higher_is_better: bool | None,
            min_repeats: int = DEFAULT_MIN_REPEATS, alpha: float = DEFAULT_ALPHA,
            min_effect: float = DEFAULT_MIN_EFFECT) -> str:
    """"faster" | "slower" | "not significant" | "too few repeats" for B (variant) against A."""
    return compare_values(a, b, higher_is_better=higher_is_better, min_repeats=min_repeats,
                          alpha=alpha, min_effect=min_effect).verdict


def _decimals(x: float) -> int:
    ax = abs(x)
    if ax >= 100:
        return 0
    if ax >= 10:
        return 1
    if ax >= 1:
        return 2
    if ax == 0:
        return 0
    return max(0, 2 - int(math.floor(math.log10(ax))))  # 3 significant digits


def format_value(x: float, unit: str = "") -> str:
    """A number with as many digits as a performance figure deserves, plus its unit."""
    s = f"{x:.{_decimals(x)}f}" if x is not None and math.isfinite(x) else "nan"
    return f"{s} {unit}" if unit else s


def format_mean_ci(mean: float, lo: float, hi: float, n: int) -> str:
    """"521.5 [452.5, 590.5] n=2", or "204.4 (no interval: 1 run) n=1" where the interval is not finite."""
    if math.isfinite(lo) and math.isfinite(hi):
        return f"{format_value(mean)} [{format_value(lo)}, {format_value(hi)}] n={n}"
    return f"{format_value(mean)} ({NO_INTERVAL}: {n} run{'' if n == 1 else 's'}) n={n}"


def format_mean_std(mean: float, std: float, unit: str = "") -> str:
    """"10.2 tok/s +- 0.1": the spread with the same number of decimals as the value."""
    if not math.isfinite(mean):
        return format_value(mean, unit)
    d = _decimals(mean)
    s = f"{std:.{d}f}" if math.isfinite(std) else "nan"
    if math.isfinite(std) and std > 0 and float(s) == 0.0:
        s = f"{std:.2g}"
    return f"{format_value(mean, unit)} +- {s}"


NO_INTERVAL = "no interval"
NO_INTERVAL_LEGEND = ("no interval: none can be stated honestly: fewer than 2 launches a side, or a side's mean within "
                      "its own noise of 0 (its interval would be unbounded); such a row is never faster or slower")


def factor_text(x: float, digits: int = 2) -> str:
    """A ratio with `digits` decimals, more (up to 4) where that would print a value other than 1 as
    "1.00": a bound of 1.003 printed "1.00" would read as an interval that touches 1, flipping the
    reading of a verdict that needed it to exclude 1."""
    d = digits
    while d < 4 and math.isfinite(x) and x != 1.0 and round(x, d) == 1.0:
        d += 1
    return f"{x:.{d}f}"


def interval_text(lo: float, hi: float) -> str:
    """"[1.19, 1.70]", or "(no interval)" where a bound is not finite or not above 0 (an unbounded interval:
    printing [0.00, inf] or [0.00, 1876] would pass noise for a measurement)."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo <= 0.0:
        return f"({NO_INTERVAL})"
    return f"[{factor_text(lo)}, {factor_text(hi)}]"


def format_speedup(speedup: float, lo: float, hi: float) -> str:
    """"1.424x [1.19, 1.70]", "1.000x (no interval)", or "n/a (no ratio)" where the ratio itself is undefined."""
    if not math.isfinite(speedup):
        return "n/a (no ratio)"
    return f"{speedup:.3f}x {interval_text(lo, hi)}"


def format_comparison(c: Comparison) -> str:
    """pyperf-like: "10.2 tok/s +- 0.1 -> 12.3 tok/s +- 0.2: 1.21x faster [1.18, 1.24]".

    The factor is always >= 1 ("1.21x slower" means B is 1.21 times worse); the interval is that of
    the factor. Not significant: "... : not significant (1.01x, p=0.40)".
    """
    ca = c.median_a if c.stat == "median" else c.mean_a
    cb = c.median_b if c.stat == "median" else c.mean_b
    head = f"{format_mean_std(ca, c.std_a, c.unit)} -> {format_mean_std(cb, c.std_b, c.unit)}"
    if c.verdict == TOO_FEW:
        return f"{head}: too few repeats ({c.n_a} vs {c.n_b})"
    if c.verdict == NOT_JUDGED:
        return (f"{head}: not judged (values of 0 or below, which the sequential verdict, comparing log-values, "
                f"cannot judge; the fixed rule does not hold at the launch count its looks chose)")
    if not math.isfinite(c.ratio):
        return f"{head}: {c.verdict} (no ratio: a side's value is 0)"
    if c.verdict == NOT_SIGNIFICANT and math.isnan(c.p_value):  # a confidence sequence's: its interval
        return f"{head}: not significant ({c.speedup:.2f}x {interval_text(*c.speedup_ci)})"
    if c.verdict == NOT_SIGNIFICANT:
        unbounded = "" if math.isfinite(c.ci_low) and math.isfinite(c.ci_high) else f", {NO_INTERVAL}"
        return f"{head}: not significant ({c.speedup:.2f}x, p={c.p_value:.2f}{unbounded})"
    lo, hi = c.speedup_ci
    factor = c.speedup
    if c.verdict in (SLOWER, LOWER):
        factor, lo, hi = 1.0 / factor, 1.0 / hi, 1.0 / lo
    return f"{head}: {factor:.2f}x {c.verdict} {interval_text(lo, hi)}"


def verdict_legend(*, alpha: float = DEFAULT_ALPHA, min_effect: float = DEFAULT_MIN_EFFECT) -> str:
    """The verdict rule in one line, with the settings in force (printed under every table)."""
    return (f"verdict: faster/slower needs p < {alpha:g} (Mann-Whitney U over per-run values), the "
            f"{100 * (1 - alpha):g}% CI of the ratio excluding 1, and an effect of at least "
            f"{100 * min_effect:g}% (--min-effect); otherwise not significant")
