"""How many launches a comparison will take, before it starts (pure; seeded simulation).

`expected(effect, spread, design)` simulates pairs of recipes whose launches vary log-normally by
`spread` (the launch-to-launch standard deviation of the log-value, from the recipe's stored runs)
with a true ratio 1 + effect, judged by `toolkit.analysis.sequential` after each pair of launches:
the mean launches each until the verdict is settled (or futile, or at max_repeats) and how often it
settles. `spread_of(values)`: that standard deviation from one value per stored launch. With
`prior_dof` (a design that pools the stored spread, the recipe's `pool_stored_spread`), each
simulated pair's stopping rule also pools a stored spread of that many degrees of freedom drawn from
the same noise (a chi-square variance), as `run` pools the recipe's stored launches.
`planning_spread(spread, runs)`: the spread a plan uses. A spread from fewer than `FEW_RUNS` launches is
planned at the larger of its `UPPER_LEVEL` upper confidence bound (chi-square) and `ASSUMED_SPREAD`: two
launches that happened to agree (a spread of 0.0%) would otherwise plan a comparison at 2 launches each.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from toolkit.analysis import sequential as seq

EFFECTS = (0.0, 0.02, 0.05, 0.20)  # 0: no change (an A/A pair: settled "equal within min_effect", or futile)
ASSUMED_SPREAD = 0.03  # when fewer than 2 launches are stored
FEW_RUNS = 4  # a spread from fewer launches is not taken at face value
UPPER_LEVEL = 0.8
TRIALS = 300
SEED = 20261201


def spread_of(values: Sequence[float]) -> float | None:
    """Sample standard deviation of the log-values (None below 2 positive values)."""
    x = np.log(np.asarray([v for v in values if v > 0], dtype=float))
    return float(x.std(ddof=1)) if x.size >= 2 else None


def planning_spread(spread: float | None, runs: int) -> tuple[float, str]:
    """(the spread a plan uses, where it comes from: "runs", "few runs" or "assumed")."""
    if spread is None or runs < 2:
        return ASSUMED_SPREAD, "assumed"
    if runs >= FEW_RUNS:
        return spread, "runs"
    from scipy.special import chdtri

    upper = spread * math.sqrt((runs - 1) / chdtri(runs - 1, UPPER_LEVEL))
    return max(upper, ASSUMED_SPREAD), "few runs"


@dataclass(frozen=True)
class Expected:
    effect: float
    spread: float
    launches_each: float  # mean launches each side
    settled: float  # fraction of simulated comparisons settled


def expected(effect: float, spread: float, design: seq.Design = seq.Design(), *, trials: int = TRIALS,
             seed: int = SEED, prior_dof: int = 0) -> Expected:
    from toolkit.analysis import noise_prior

    rng = np.random.default_rng(seed)
    n = design.max_repeats
    dof = min(prior_dof, noise_prior.MAX_DOF) if design.pool_stored else 0
    ns, settled = [], 0
    for _ in range(trials):
        a = np.exp(spread * rng.standard_normal(n))
        b = (1.0 + effect) * np.exp(spread * rng.standard_normal(n))
        prior = (noise_prior.Prior(spread * spread * rng.chisquare(dof) / dof, dof, dof + 1, ("stored",))
                 if dof >= noise_prior.MIN_DOF else None)
        v = seq.verdict(list(a), list(b), higher_is_better=True, design=design, prior=prior)
        ns.append(v.n)
        settled += v.settled
    return Expected(effect, spread, float(np.mean(ns)), settled / trials)


def gpu_hours(launches_each: float, seconds_per_launch: float, gpus: int) -> float:
    """GPU hours of one pair: both sides' launches, each `seconds_per_launch` on `gpus` GPUs."""
    return 2.0 * launches_each * seconds_per_launch * gpus / 3600.0 if math.isfinite(seconds_per_launch) else math.nan
