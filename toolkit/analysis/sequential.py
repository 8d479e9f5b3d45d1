"""Sequential verdicts: look after every pair of launches, stop when the verdict is settled (pure).

One value per launch (the launch is the unit of replication; repeats inside a launch only lower
the noise of its value). After each pair of launches the verdict of B (variant) against A
(reference) is one of:

    faster by >= min_effect     the confidence sequence of B/A excludes 1 (B is better) and the
                                estimate is at least 1 + min_effect (as today's fixed verdict)
    slower by >= min_effect     the same the other way
    equal within min_effect     both one-sided bounds of the sequence lie strictly inside
                                (1/(1+m), 1+m): an equivalence verdict by two one-sided tests
                                (TOST; checked first)
    not settled after N launches each: 0.97x-1.01x    (the current interval)

**Method** (`method = "repeated"`, the default): repeated confidence intervals over the planned
looks (Jennison & Turnbull 1989; Pocock's boundary): at look n (n = min_repeats .. max_repeats
launches each) the pooled two-sample t interval `estimate +- c_n * se_n` of the difference of mean
log-values, with c_n the Student t quantile (2n - 2 degrees of freedom) at one nominal level a' for
every look, a' chosen so that under normal log-values all the looks *together* cover the true
difference with probability 1 - alpha. The t statistics of the prefixes are pivotal (their joint
law does not depend on the mean or the spread), so a' is a constant of (alpha, min_repeats,
max_repeats): found once by a seeded simulation of 400,000 paths (its error on alpha is about
+-0.0004) and kept (toolkit/analysis/sequential_level.py; shipped and per-user tables, sequential_level_cache.py). With probability >= 1 - alpha the intervals cover the true ratio at every look
up to max_repeats at once, so each verdict below is false with probability <= alpha whenever the
launching stops within max_repeats and however the stopping depends on the data: "faster" when B is
not better, "slower" when it is not worse, "equal" when the true ratio is beyond min_effect (an
indifference zone: an effect between 0 and min_effect may be called either; a per-pair, per-point
rate: several pairs or points are not corrected jointly). It does not cover launching past
max_repeats and looking again (raise --max-repeats before the first launch, not after).

**Equivalence** is two one-sided tests (TOST, Schuirmann 1987: "equal" is false only when the true
ratio lies beyond one bound, so each bound needs only a one-sided test at alpha, the textbook 90%
interval for alpha 0.05), repeated over the looks: each look's one-sided t bounds at the one-sided
nominal level calibrated the same way (the looks together cross a given side with probability
alpha; sequential_level.nominal_level(sides=1)). "Equal" is then false with probability <= alpha;
at a 2% zone it is reached about one look earlier than by the two-sided sequence (at 8 launches
each on a launch spread below 1.6% instead of 1.4%). An "equal" verdict prints the bounds that
decided it.

Why this one: the variance is unknown and the samples are tiny (2-16 launches), so a known-variance
boundary or a plug-in-variance GSPRT (Fishtest's) would not keep alpha at n = 2; exact t quantiles
do. It spends alpha only on the looks that can happen (at most 15), where an open-ended confidence
sequence pays for infinitely many: at 8 launches each (a cap of 8) its c is 2.9 against the mixture's
4.2 (the fixed-sample one is 2.1). Measured by benchmarks/sequential_launches.py over 2000 simulated
comparisons at a cap of 8 it settled more of them correctly (76% against 69%) in fewer launches (6.1
against 6.4).

`method = "mixture"` (toolkit.analysis.sequential_mixture): an anytime-valid confidence sequence for any number of looks, from the
scale-invariant two-sample t mixture (Lai 1976; the "safe t-test" of Grünwald, de Heide & Koolen
2020 and Pérez-Ortiz et al. 2022): the Bayes factor of the t statistic with a normal prior of scale
`prior_scale` on the standardized effect and the right Haar prior on the common location and scale,

    BF_n(t) = (1 + n_d tau^2)^(-1/2) * ((1 + t^2/nu) / (1 + t^2/(nu (1 + n_d tau^2))))^((nu+1)/2)

(n_d = n_a n_b / (n_a + n_b), nu = n_a + n_b - 2), is a nonnegative martingale under the null, so by
Ville's inequality P(BF_n >= 1/alpha at *any* n) <= alpha; inverting it for every shift gives a t
interval with a wider critical value t*_n. Bisect uses it (its sides have unequal sizes), and the
repeated intervals fall back to it for unequal sides or beyond max_repeats. Log-values make the
ratio the parameter and a slow-launch outlier inflates the spread (a wider interval, a later
verdict), not a false verdict.

**A stored spread** (`prior`, toolkit.analysis.noise_prior): the launch-to-launch variance of the
same configurations' stored launches (same run identity, launches not among the current ones), with
d0 degrees of freedom, is pooled into each look's variance: (SS_0 + SS_n) / (d0 + 2n - 2), a t
interval of d0 + 2n - 2 df. A look whose current spread is flagged against the prior (spread_flag's
rule: 2x and an F test at 0.01) does not pool (2n - 2 df): a configuration noisy now never borrows a
calmer history. The Pocock level a'(alpha, min_repeats, max_repeats, d0) is calibrated for that
whole procedure (the prior's chi-square, the test and the looks) with the stored launches 1.5x
calmer than the current ones (noise_prior.DRIFT), so the guarantee above holds unchanged while the
box is up to 1.5x noisier now than when they ran; at 2 launches each with 18 prior df the first
look's c is 3.56 instead of 8.94 (2.68 if the box were promised unchanged). The mixture (and
unequal sides) never pool.

The verdict of a pair is the one at its **first settled look** (looks at n = min_repeats,
min_repeats + 1, ... of equal-sized prefixes, oldest first): a stopping time, so it keeps the
guarantee, and values launched after it (for another pair) do not move it. **Futility**: from 3
launches each, a pair whose sequence would still straddle a boundary at max_repeats at its current
spread, even were its true difference one standard error of its estimate nearer a verdict, stops
unsettled ("could not settle by 16"): stopping without a verdict never makes a verdict false, and it
spares the launches a hopeless pair would take.

**The default cap, 16 launches each** (8 until 2026-12-06): measured by
benchmarks/sequential_launches.py (2000 simulated comparisons, effects 0-30%, noise 1-5% a launch,
half with slow-launch outliers), 8.78 launches a comparison settle 86.5% correctly, where a fixed t
design needs 11 launches each for that power: 0.40x. At a cap of 8 the same rule takes 7.01 launches
for 81.8% (0.58x of the fixed design's 6 each). The price is the worst case, a pair that never
settles nor turns futile: 32 launches; `plan` prints it, and `[benchmark] max_repeats` or
--max-repeats lowers it for a model whose launch costs an hour.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from toolkit.analysis import noise_prior
from toolkit.analysis.stats import factor_text
from toolkit.analysis.sequential_mixture import DEFAULT_ALPHA, DEFAULT_PRIOR_SCALE, bayes_factor, critical_t  # noqa: F401
from toolkit.analysis.sequential_level import (  # noqa: F401 (seq.nominal_level, ...)
    CALIBRATION_PATHS, CALIBRATION_SEED, nominal_level, null_looks)
from toolkit.analysis.sequential_critical import (  # noqa: F401 (seq.critical, seq.Stored, ...)
    MIXTURE, NONE, REPEATED, STORED_CAP, Stored, critical, look_prior, pooled, repeated_t, uses_prior)

FASTER = "faster"
SLOWER = "slower"
HIGHER = "higher"  # a metric without a known direction
LOWER = "lower"
EQUAL = "equal"
UNSETTLED = "not settled"
TOO_FEW = "too few launches"

DEFAULT_MIN_EFFECT = 0.02
DEFAULT_MIN_REPEATS = 2
DEFAULT_MAX_REPEATS = 16
FUTILITY_SE = 1.0  # futility: the estimate may yet move this many of its standard errors towards a verdict
DEFAULT_METHOD = REPEATED


@dataclass(frozen=True)
class Design:
    """The settings a sequential verdict computes with (and its legend prints)."""

    alpha: float = DEFAULT_ALPHA
    min_effect: float = DEFAULT_MIN_EFFECT
    min_repeats: int = DEFAULT_MIN_REPEATS
    max_repeats: int = DEFAULT_MAX_REPEATS
    prior_scale: float = DEFAULT_PRIOR_SCALE
    futility: bool = True  # stop a pair that could not settle by max_repeats at its current estimate and spread
    method: str = DEFAULT_METHOD  # "repeated" (intervals over the planned looks) or "mixture" (open-ended)
    # pool the spread of stored launches (`verdict`'s prior/stored): the recipe's opt-in
    # `[benchmark] pool_stored_spread` (alpha kept while the box is up to noise_prior.DRIFT noisier than its
    # stored launches); off, a verdict keeps alpha whatever the box's noise did since
    pool_stored: bool = False

    def __post_init__(self):
        if not 0.0 < self.alpha < 1.0:
            raise ValueError(f"alpha must be in (0, 1), not {self.alpha}")
        if not 0.0 <= self.min_effect < 1.0:
            raise ValueError(f"min_effect must be in [0, 1), not {self.min_effect}")
        if self.min_repeats < 2 or self.max_repeats < self.min_repeats:
            raise ValueError(f"need 2 <= min_repeats <= max_repeats, not {self.min_repeats}, {self.max_repeats}")
        if self.method not in (REPEATED, MIXTURE):
            raise ValueError(f"method must be {REPEATED!r} or {MIXTURE!r}, not {self.method!r}")

    def record(self) -> dict:
        """The settings as a run stores them (`extra["sequential"]`: the design it was launched under)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_record(cls, record: dict | None) -> "Design | None":
        """The design a run was launched under (`record`'s output), None when it was not launched
        sequentially or the record is not one (another version's, altered)."""
        if not isinstance(record, dict):
            return None
        known = {f.name for f in dataclasses.fields(cls)}
        try:
            return cls(**{k: v for k, v in record.items() if k in known})
        except (TypeError, ValueError):
            return None


@dataclass(frozen=True)
class Sequential:
    """The verdict of B against A at one look: `ratio` is the ratio of geometric means B/A and
    [low, high] its confidence sequence at this look; `n` the launches each it used."""

    verdict: str
    n: int
    ratio: float
    low: float
    high: float
    higher_is_better: bool | None
    design: Design
    futile: bool = False  # unsettled, and would stay so by max_repeats at this estimate and spread
    spread: float = math.nan  # launch-to-launch standard deviation of the log-value (pooled over A and B)
    prior_dof: int = 0  # degrees of freedom of the stored spread this look pooled (0: current launches only)

    @property
    def settled(self) -> bool:
        return self.verdict in (FASTER, SLOWER, HIGHER, LOWER, EQUAL)

    @property
    def noisy(self) -> bool:
        """Unsettled at the cap (or futile), with a spread at which even two identical recipes
        could not be called equal by max_repeats: the sequence's half-width there, at this spread,
        is at least min_effect. The box (or the configuration) is the problem, not the effect."""
        return (not self.settled and self.verdict != TOO_FEW and (self.futile or self.n >= self.design.max_repeats)
                and noisy_spread(self.spread, self.design))

    @property
    def speedup(self) -> float:
        """> 1: B better (B/A for higher-better or unknown metrics, A/B for latencies)."""
        return 1.0 / self.ratio if self.higher_is_better is False else self.ratio

    @property
    def speedup_interval(self) -> tuple[float, float]:
        if self.higher_is_better is False:
            return (1.0 / self.high if self.high else math.inf, 1.0 / self.low if self.low else math.inf)
        return (self.low, self.high)

    @property
    def text(self) -> str:
        """"1.41x faster after 2 launches each [1.30x-1.52x]", "equal within 2% after 6
        launches each [0.99x-1.01x]", "not settled after 16 launches each: 0.97x-1.01x"."""
        lo, hi = self.speedup_interval
        span = f"{factor_text(lo)}x-{factor_text(hi)}x"
        m = f"{100 * self.design.min_effect:g}%"
        if self.verdict == TOO_FEW:
            return f"too few launches ({self.n} each; a verdict needs {self.design.min_repeats})"
        why = f" (could not settle by {self.design.max_repeats})" if self.futile and self.n < self.design.max_repeats else ""
        if self.noisy:
            return (f"noisy: not settled after {self.n} launches each{why}, the pair's spread {100 * self.spread:.1f}% a launch: "
                    f"{span} (equal within {m} needs a spread below {100 * quiet_spread(self.design):.1f}%)")
        if self.verdict == UNSETTLED:
            return f"not settled after {self.n} launches each: {span}{why}"
        pooled = f" (spread pooled with {self.prior_dof} df of stored launches)" if self.prior_dof else ""
        if self.verdict == EQUAL:
            return f"equal within {m} after {self.n} launches each [{span}]{pooled}"
        factor = self.speedup if self.verdict in (FASTER, HIGHER) else 1.0 / self.speedup
        if self.verdict in (SLOWER, LOWER):
            span = f"{factor_text(1 / hi)}x-{factor_text(1 / lo)}x"
        return f"{factor:.2f}x {self.verdict} after {self.n} launches each [{span}]{pooled}"


def interval(a: Sequence[float], b: Sequence[float], *, design: Design = Design()) -> tuple[float, float, float]:
    """(ratio, low, high): the ratio of geometric means B/A and its confidence sequence at this look."""
    return _interval(a, b, design, None, NONE)[:3]


def _interval(a, b, design: Design, prior, stored: Stored, sides=(2,)) -> tuple:
    """(ratio, low, high, borrowed) with one (low, high) pair per entry of `sides` (2: the two-sided
    sequence, 1: the equivalence tests' one-sided bounds), from one estimate and one pooled spread."""
    la, lb = np.log(np.asarray(a, dtype=float)), np.log(np.asarray(b, dtype=float))
    na, nb = la.size, lb.size
    if na == 0 or nb == 0:
        return (math.nan, *(0.0, math.inf) * len(sides), 0)
    est = float(lb.mean() - la.mean())
    var, _, borrowed = pooled(a, b, design, prior)
    se = math.sqrt(var * (1.0 / na + 1.0 / nb)) if math.isfinite(var) else math.nan
    bounds: list[float] = []
    for s in sides:
        tstar = critical(na, nb, design, stored, borrowed, s)
        if not math.isfinite(tstar) or not math.isfinite(se):
            return (math.exp(est), *(0.0, math.inf) * len(sides), 0)
        bounds += [math.exp(est - tstar * se), math.exp(est + tstar * se)]
    return (math.exp(est), *bounds, borrowed)


def look(a: Sequence[float], b: Sequence[float], *, higher_is_better: bool | None,
         design: Design = Design(), prior=None, stored: Stored = NONE) -> Sequential:
    """The verdict of one look at all of `a` and `b` (equal sizes in the sequential design);
    `prior`: the stored spread this look may pool (toolkit.analysis.noise_prior; disjoint from a
    and b), `stored` what the level is calibrated for (see `verdict`)."""
    n = min(len(a), len(b))
    if any(v <= 0 or not math.isfinite(v) for v in [*a, *b]):
        raise ValueError("sequential verdicts need positive values (they compare log-values)")
    # the two-sided sequence, and the two one-sided bounds of the equivalence tests (TOST)
    ratio, lo, hi, elo, ehi, borrowed = _interval(a, b, design, prior, stored, sides=(2, 1))
    if n < design.min_repeats:
        return Sequential(TOO_FEW, n, ratio, lo, hi, higher_is_better, design, spread=pooled_spread(a, b))
    bound = 1.0 + design.min_effect
    if 1.0 / bound < elo and ehi < bound:
        v, lo, hi = EQUAL, elo, ehi
    elif (lo > 1.0 and ratio >= bound) or (hi < 1.0 and ratio <= 1.0 / bound):
        up = lo > 1.0
        v = (HIGHER if up else LOWER) if higher_is_better is None else (FASTER if up == higher_is_better else SLOWER)
    else:
        v = UNSETTLED
    return Sequential(v, n, ratio, lo, hi, higher_is_better, design, spread=pooled_spread(a, b), prior_dof=borrowed)


def pooled_spread(a: Sequence[float], b: Sequence[float]) -> float:
    """The pooled launch-to-launch standard deviation of the log-values of A and B (nan below 3 values)."""
    la, lb = np.log(np.asarray(a, dtype=float)), np.log(np.asarray(b, dtype=float))
    dof = la.size + lb.size - 2
    if dof < 1:
        return math.nan
    return math.sqrt(float(((la - la.mean()) ** 2).sum() + ((lb - lb.mean()) ** 2).sum()) / dof)


def quiet_spread(design: Design) -> float:
    """The largest spread at which an A/A pair with this spread could still be called equal by
    max_repeats (the sequence's half-width at max_repeats each equals log(1 + min_effect))."""
    big = design.max_repeats
    return math.log1p(design.min_effect) / (critical(big, big, design, sides=1) * math.sqrt(2.0 / big))


def noisy_spread(spread: float, design: Design) -> bool:
    return math.isfinite(spread) and spread >= quiet_spread(design)


def futile(a: Sequence[float], b: Sequence[float], design: Design, prior=None, stored: Stored = NONE) -> bool:
    """Whether the pair could not settle by max_repeats even were its true difference one current
    standard error nearer a verdict than its estimate, at its current spread (from 3 launches each, when
    the spread has 4 degrees of freedom): the sequence at max_repeats would still straddle a boundary
    with the estimate moved FUTILITY_SE standard errors towards "faster"/"slower" and, separately, towards
    "equal". Taking the estimate of 3 launches as the truth (the rule until 2026-12-06) stopped pairs
    whose estimate was merely unlucky: 76% of the simulated comparisons settled correctly at 2..8
    launches each, 82% with the allowance (benchmarks/sequential_launches.py). Stopping without a
    verdict never makes one false."""
    n, big = min(len(a), len(b)), design.max_repeats
    if not design.futility or n < 3 or n >= big:
        return False
    la, lb = np.log(np.asarray(a[:n], dtype=float)), np.log(np.asarray(b[:n], dtype=float))
    est = abs(float(lb.mean() - la.mean()))
    var, _, borrowed = pooled(a[:n], b[:n], design, prior)
    allowance = FUTILITY_SE * math.sqrt(var) * math.sqrt(2.0 / n)
    half = critical(big, big, design, stored, borrowed) * math.sqrt(var) * math.sqrt(2.0 / big)
    half_equal = critical(big, big, design, stored, borrowed, sides=1) * math.sqrt(var) * math.sqrt(2.0 / big)
    bound = math.log1p(design.min_effect)
    larger, smaller = est + allowance, max(0.0, est - allowance)
    return not ((larger - half > 0 and larger >= bound) or smaller + half_equal < bound)


def verdict(a: Sequence[float], b: Sequence[float], *, higher_is_better: bool | None,
            design: Design = Design(), prior=None, stored: tuple[int, int] = (0, 0)) -> Sequential:
    """The pair's verdict from per-launch values in launch order (oldest first): the first settled
    look of equal-sized prefixes n = min_repeats .. min(len(a), len(b), max_repeats), else the last
    look (unsettled, or too few launches).

    Stored spread (toolkit.analysis.noise_prior), both optional, both launches of the same run
    identities as a and b: `prior`, a Prior of stored launches that are in neither sequence;
    `stored`, how many leading values of a and of b were stored before launching began (a resumed
    or reused sequence): look n also pools a[n:stored[0]] and b[n:stored[1]], the stored values it
    does not use. Every look pools them unless its borrowing test refuses, at the Pocock level
    calibrated for exactly this (prior dof, stored counts), so the guarantee of the module docstring
    holds with them when the stored launches have the current ones' spread. Neither: the
    current launches only, as without a history."""
    if not design.pool_stored:
        prior, stored = None, (0, 0)
    if prior is not None and prior.dof > noise_prior_max():
        raise ValueError(f"a prior of {prior.dof} df: at most {noise_prior_max()} are calibrated")
    st = Stored(prior.dof if prior is not None else 0, max(0, int(stored[0])), max(0, int(stored[1])))
    n = min(len(a), len(b), design.max_repeats)
    last = None
    for k in range(min(design.min_repeats, n), n + 1):
        pk = look_prior(a, b, k, prior, st, design)
        last = look(a[:k], b[:k], higher_is_better=higher_is_better, design=design, prior=pk, stored=st)
        if last.settled:
            return last
        if futile(a[:k], b[:k], design, pk, st):
            return dataclasses.replace(last, futile=True)
    return last if last is not None else look(a[:n], b[:n], higher_is_better=higher_is_better, design=design)


def noise_prior_max() -> int:
    return noise_prior.MAX_DOF


def more_needed(s: Sequential) -> bool:
    """Whether the pair should get another pair of launches (unsettled, not futile, below max_repeats)."""
    return not s.settled and not s.futile and s.n < s.design.max_repeats


def legend(design: Design = Design(), prior=None) -> str:
    """The rule in one line, with the settings it computed with (and the stored spread it pooled)."""
    m = f"{100 * design.min_effect:g}%"
    c = f"{100 * (1 - design.alpha):g}%"
    if design.method == REPEATED:
        how = (f"repeated {c} confidence intervals of the ratio over the looks at {design.min_repeats}.."
               f"{design.max_repeats} launches each (Pocock: each look's t interval at the nominal level "
               f"{nominal_level(design.alpha, design.min_repeats, design.max_repeats):.4f}; each verdict false with "
               f"probability <= {design.alpha:g} whenever launching stops within {design.max_repeats} each)")
    else:
        how = (f"an anytime-valid {c} confidence sequence of the ratio (two-sample t mixture, prior scale "
               f"{design.prior_scale:g}; each verdict false with probability <= {design.alpha:g} however often it is "
               f"looked at)")
    return (f"sequential verdict after each pair of launches (one value per launch, log scale): {how}; "
            f"faster/slower when it excludes 1 and the ratio is at least {m} (min_effect), equal when "
            f"its two one-sided bounds at {design.alpha:g} each (TOST) lie within {m}; "
            f"launches {design.min_repeats}..{design.max_repeats} each (max_repeats), else not settled"
            + (f"; a pair that could not settle by then at its spread, even {FUTILITY_SE:g} standard error nearer a "
               f"verdict, stops early" if design.futility else "")
            + (f"; {noise_prior.stored_legend(design.max_repeats + STORED_CAP)}"
               if design.method == REPEATED and design.pool_stored else "")
            + (f"; with a prior: {_prior_line(prior, design)}" if prior is not None else ""))


def _prior_line(prior, design: Design) -> str:
    level = nominal_level(design.alpha, design.min_repeats, design.max_repeats, prior.dof)
    return noise_prior.prior_legend(prior, level)


NOISY = "noisy"


def stopped(v: Sequential) -> bool:
    """Settled, or unsettled with launching over for it (futile, or at max_repeats): the sequence
    has its last word, which a table shows instead of the fixed rule's "too few repeats"."""
    return v.settled or (v.verdict != TOO_FEW and not more_needed(v))


def verdict_word(v: Sequential) -> str:
    """A stopped verdict as a table's verdict column reads it ("faster", "equal within 2%",
    "noisy" for a pair the box's spread kept from settling, else "not settled")."""
    if v.verdict == EQUAL:
        return f"equal within {100 * v.design.min_effect:g}%"
    return NOISY if v.noisy else v.verdict


def unjudgeable(a: Sequence[float], b: Sequence[float]) -> bool:
    """Values the sequential verdict (log-values) cannot judge: some are 0 or below, and not all equal
    (0 failed requests on both sides in every launch needs no verdict)."""
    return any(x <= 0 for x in (*a, *b)) and len({*a, *b}) > 1


def not_judged(c):
    """A comparison of a launched pair on a metric the sequential verdict cannot judge (values of 0
    or below): no verdict, no interval, no p (the fixed rule's would be of a sample size its looks chose)."""
    from toolkit.analysis import stats

    return dataclasses.replace(c, verdict=stats.NOT_JUDGED, ci_low=math.nan, ci_high=math.nan, p_value=math.nan)


def settle(c, a: Sequence[float], b: Sequence[float], design: Design, stored: tuple[int, int] = (0, 0), *,
           launched: bool = False):
    """A fixed-sample comparison (`toolkit.analysis.stats.Comparison`) that says "too few repeats"
    takes the sequential verdict of the same values (launch order; `stored` as in `verdict`) when
    that has stopped (settled, or futile: "noisy" / "not settled"), with the confidence sequence as
    its interval (what `run` decided on after 2 launches each); any other comparison is returned as
    it is.

    `launched`: the values were launched under this sequential design (`run`, `sweep`, `attribute`
    without --repeats): every comparison takes the sequential verdict, at any number of launches and
    whether it has stopped or not ("not settled after 3 launches each: ..."), never the fixed rule's.
    How many launches there are depends on the looks, which the repeated intervals allow for and a
    fixed-sample test does not: a pair `run` called "equal within 2% after 6 launches each" reads
    the same in every table, not "not significant"."""
    from toolkit.analysis import stats

    if c is None or (c.verdict != stats.TOO_FEW and not launched) or not a or not b:
        return c
    if any(x <= 0 for x in (*a, *b)):
        return not_judged(c) if launched and unjudgeable(a, b) else c
    from toolkit.analysis.noise_prior import fresh_pair

    v = verdict(list(a), list(b), higher_is_better=c.higher_is_better, design=design, stored=fresh_pair(*stored))
    if not stopped(v) and not launched:
        return c
    # its interval, and no Mann-Whitney p beside a verdict that p did not give (tables show "seq.")
    return dataclasses.replace(c, verdict=verdict_word(v), ci_low=v.low, ci_high=v.high, p_value=math.nan,
                               ratio=v.ratio)  # its estimate (at its look), which its interval holds
