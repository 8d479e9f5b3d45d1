"""The kernel-family diff of two recipes' profiles: per family, ms per decode step in A and B, the
change, and whether it is larger than the spread.

Per profile a family's time is its fastest decode step (the minimum over steps): time taken from
the work by the rest of the machine (preemption on a shared CPU, launch jitter) only ever adds, so
the minimum estimates the work's own cost, while medians of a busy machine move with its load. A
recipe's value is the mean over its profiles. Spread (per recipe, per family): with several
profiles, the range of their minima (run-to-run); with one, the width of the fast tail (10th
percentile minus minimum). A change counts ("faster"/"slower") when |B - A| exceeds the larger of
the two spreads plus 10% of A; otherwise it is "unchanged within spread". A change beyond the
spread but below 1% of A's step time is "negligible (<1% of the step)": real, perhaps (on a CPU a
smaller working set elsewhere speeds every op a little through the caches), but not what moves
the step. Several interleaved
profiles per recipe (A B A B) give the honest spread; one each is a first look.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

REL_MIN = 0.10
STEP_MIN = 0.01


@dataclass(frozen=True)
class FamilyDiff:
    family: str
    a_ms: float
    b_ms: float
    spread_ms: float
    n_a: int
    n_b: int
    step_a_ms: float = 0.0

    @property
    def delta_ms(self) -> float:
        return self.b_ms - self.a_ms

    @property
    def ratio(self) -> float | None:
        return self.b_ms / self.a_ms if self.a_ms else None

    @property
    def verdict(self) -> str:
        d = self.delta_ms
        if abs(d) <= self.spread_ms + REL_MIN * self.a_ms:
            return "unchanged within spread"
        if abs(d) < STEP_MIN * self.step_a_ms:
            return "negligible (<1% of the step)"
        return "faster" if d < 0 else "slower"


def _per_profile(profile: dict, family: str) -> tuple[float, list[float]]:
    ranks = profile.get("ranks") or []
    steps = [v for r in ranks for v in r.get("per_step_ms", {}).get(family, [])]
    return (min(steps) if steps else 0.0), steps


def _spread(profiles: list[dict], family: str) -> float:
    pairs = [_per_profile(p, family) for p in profiles]
    if len(pairs) >= 2:
        means = [m for m, _ in pairs]
        return max(means) - min(means)
    steps = pairs[0][1] if pairs else []
    if len(steps) < 4:
        return 0.0
    return statistics.quantiles(steps, n=10)[0] - min(steps)


def kernel_diff(a: list[dict], b: list[dict]) -> list[FamilyDiff]:
    """Families of both recipes' profiles (extra["profile"] dicts), largest |change| first."""
    fams = sorted({f for p in a + b for r in p.get("ranks", []) for f in r["family_ms"]})
    out = []
    for f in fams:
        am = statistics.fmean(_per_profile(p, f)[0] for p in a)
        bm = statistics.fmean(_per_profile(p, f)[0] for p in b)
        out.append(FamilyDiff(f, am, bm, max(_spread(a, f), _spread(b, f)), len(a), len(b), step_ms(a)))
    out.sort(key=lambda d: -abs(d.delta_ms))
    return out


def step_ms(profiles: list[dict]) -> float:
    vals = [r["step_ms"] for p in profiles for r in p.get("ranks", [])]
    return statistics.fmean(vals) if vals else 0.0
