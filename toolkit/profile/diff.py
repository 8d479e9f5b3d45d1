"""The kernel-family diff of two recipes' profiles (pure): per family, ms per decode step in A and B,
the change, and its verdict.

Per profile a family's time is its fastest decode step (the minimum over steps): time taken from
the work by the rest of the machine (preemption on a shared CPU, launch jitter) only ever adds, so
the minimum estimates the work's own cost, while medians of a busy machine move with its load. A
recipe's value is the mean over its profiles; `spread_ms` the larger range of the two recipes'
per-profile minima (run-to-run).

The verdict needs the run-to-run variation, which one profile cannot show (the steps of one trace
share its machine state: a CPU trace once called attention 0.18 ms "faster" from one profile each),
so with fewer than 2 profiles of either recipe it is "no verdict". With 2 or more each: "faster" /
"slower" when Student's two-sample t-test on the per-profile minima gives p < ALPHA (two-sided; the
false-alarm rate per family under no change is at most ALPHA, measured in
benchmarks/verdict_calibration.py) and the change is at least REL_MIN of A; "not significant"
otherwise; a change that passes both but is under STEP_MIN of A's step time is "negligible (<1% of
the step)". Interleave the profiles (A B A B) so that drift of the machine falls on both.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

ALPHA = 0.05
REL_MIN = 0.10
STEP_MIN = 0.01
MIN_PROFILES = 2
FASTER, SLOWER = "faster", "slower"
NOT_SIGNIFICANT = "not significant"
NEGLIGIBLE = "negligible (<1% of the step)"
ONE_EACH = "one profile each: no verdict"
TOO_FEW = f"no verdict (needs {MIN_PROFILES} profiles each)"


@dataclass(frozen=True)
class FamilyDiff:
    family: str
    a_ms: float
    b_ms: float
    spread_ms: float
    n_a: int
    n_b: int
    step_a_ms: float = 0.0
    p_value: float | None = None  # Student's t on the per-profile minima (None: too few profiles)

    @property
    def delta_ms(self) -> float:
        return self.b_ms - self.a_ms

    @property
    def ratio(self) -> float | None:
        return self.b_ms / self.a_ms if self.a_ms else None

    @property
    def verdict(self) -> str:
        if min(self.n_a, self.n_b) < MIN_PROFILES:
            return ONE_EACH if self.n_a == self.n_b == 1 else TOO_FEW
        d = self.delta_ms
        if self.p_value is None or self.p_value >= ALPHA or abs(d) < REL_MIN * self.a_ms:
            return NOT_SIGNIFICANT
        if abs(d) < STEP_MIN * self.step_a_ms:
            return NEGLIGIBLE
        return FASTER if d < 0 else SLOWER


def t_pvalue(a: list[float], b: list[float]) -> float | None:
    """Two-sided p of Student's two-sample t-test (pooled variance: under no change the two have one
    variance); None below MIN_PROFILES values each."""
    from scipy.stats import ttest_ind

    if min(len(a), len(b)) < MIN_PROFILES:
        return None
    if max(a) == min(a) and max(b) == min(b):  # no spread at all: any difference is exact
        return 1.0 if a[0] == b[0] else 0.0
    return float(ttest_ind(a, b, equal_var=True).pvalue)


def legend() -> str:
    """The rule of `FamilyDiff.verdict`, from its parameters."""
    return (f"kernel-family verdict: faster/slower when Student's t on the per-profile minima gives p < {ALPHA:g} "
            f"and the change is at least {REL_MIN:.0%} of the baseline's (and {STEP_MIN:.0%} of its step); needs "
            f"{MIN_PROFILES} profiles of each recipe (a family with no change is called faster/slower at most "
            f"{ALPHA:g} of the time)")


def _per_profile(profile: dict, family: str) -> tuple[float, list[float]]:
    ranks = profile.get("ranks") or []
    steps = [v for r in ranks for v in r.get("per_step_ms", {}).get(family, [])]
    return (min(steps) if steps else 0.0), steps


def _spread(minima: list[float]) -> float:
    return max(minima) - min(minima) if len(minima) >= 2 else 0.0


def kernel_diff(a: list[dict], b: list[dict]) -> list[FamilyDiff]:
    """Families of both recipes' profiles (extra["profile"] dicts), largest |change| first."""
    fams = sorted({f for p in a + b for r in p.get("ranks", []) for f in r["family_ms"]})
    out = []
    for f in fams:
        am, bm = ([_per_profile(p, f)[0] for p in side] for side in (a, b))
        out.append(FamilyDiff(f, statistics.fmean(am), statistics.fmean(bm), max(_spread(am), _spread(bm)),
                              len(a), len(b), step_ms(a), t_pvalue(am, bm)))
    out.sort(key=lambda d: -abs(d.delta_ms))
    return out


def step_ms(profiles: list[dict]) -> float:
    vals = [r["step_ms"] for p in profiles for r in p.get("ranks", [])]
    return statistics.fmean(vals) if vals else 0.0
