"""A configuration's launch-to-launch spread from its stored runs, as a prior for the sequential verdict (pure).

`from_history({name: values})` turns stored launches (one value per launch, oldest first) of the
compared configurations into a prior variance of the log-value and its degrees of freedom: each
configuration's sum of squares around *its own* mean (so an effect between configurations never
enters), pooled, `dof = sum(n_i - 1)`. The values must be launches of the **same run identity** as
the configuration compared (same recipe, env, GPU: toolkit/results/identity.py) and **disjoint
from the values the verdict looks at** (toolkit.analysis.sequential pools them with the current
launches: pooled variance, df = prior df + current df). A configuration whose stored spread is far
larger than the other histories' (toolkit.analysis.spread_flag's rule among the histories) is left
out (a noisy box that day is not the box's spread), and the prior is capped at `MAX_DOF` degrees of
freedom (the newest launches kept), for which the sequential boundary is calibrated.

`borrows(prior, current_var, current_dof)`: whether a look may pool. A look does not borrow when the
current launches' spread is flagged against the prior by spread_flag's rule (at least `FACTOR` times
the prior's spread and above it by an F test at `ALPHA`): a configuration that is noisy now never
borrows a calmer prior. The rule is part of the calibrated procedure (toolkit.analysis.sequential).

Guarantee (what the verdict then keeps): when the current launches of the compared configurations
are at most `DRIFT` (1.5) times as spread as the stored ones (log-normal launches: the box as noisy
as it was, or up to 1.5x noisier), each sequential verdict is false with probability <= alpha, as
without a prior: the Pocock level of a pooling verdict is calibrated for the stored launches being
1.5x calmer than the current ones (toolkit.analysis.sequential_level), the worst case up to there.
Measured by benchmarks/sequential_launches.py --history 10 --drift: A/A false faster/slower within
alpha at 1x and 1.5x; beyond DRIFT it is not promised (2x: see the benchmark's docstring), and the
borrowing test stops pooling only once it can tell (2x, F test at 0.01), which at 2-3 launches each
it mostly cannot. So the stored runs must be of the same identity on the same box, and a
configuration flagged noisy never borrows. A box that has become quieter only makes the verdicts
more careful. The price of that margin: fewer launches saved than a level calibrated for an
unchanged box (the benchmark's numbers).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from toolkit.analysis import spread_flag

# the sequential level of a pooling verdict keeps alpha while the box is up to DRIFT times noisier (launch-to-launch
# standard deviation) now than when its stored launches ran (toolkit.analysis.sequential_level)
DRIFT = 1.5
MAX_DOF = 40  # the largest prior the sequential boundary is calibrated for (newest launches kept)
MIN_DOF = 1
# the borrowing test is spread_flag's rule (2x, F test at 0.01): a more sensitive one (1.5x at 0.05, 1x at 0.10)
# cost 2-4% more launches and still let a box 2x noisier than its history reach 10% / 8% false verdicts
FACTOR = spread_flag.FACTOR
ALPHA = spread_flag.ALPHA


@dataclass(frozen=True)
class Prior:
    """A launch-to-launch variance of the log-value from stored runs, with its degrees of freedom."""

    var: float
    dof: int
    launches: int  # stored launches it came from
    names: tuple[str, ...]  # the configurations whose stored runs it pools

    @property
    def spread(self) -> float:
        return math.sqrt(self.var)

    @property
    def text(self) -> str:
        return (f"stored spread {100 * self.spread:.1f}% a launch ({self.dof} df from {self.launches} stored "
                f"launches of {', '.join(self.names)})")

    def to_dict(self) -> dict:
        return {"spread": self.spread, "dof": self.dof, "launches": self.launches, "names": list(self.names),
                "text": self.text}


def _logs(values: Sequence[float]) -> np.ndarray:
    return np.log(np.asarray([v for v in values if v > 0 and math.isfinite(v)], dtype=float))


def from_history(history: Mapping[str, Sequence[float]], *, max_dof: int = MAX_DOF) -> Prior | None:
    """The pooled prior of the configurations' stored launches (name -> values, oldest first), or
    None when they give fewer than MIN_DOF degrees of freedom. A history flagged far noisier than
    the others' (spread_flag) is left out; beyond max_dof the oldest launches are dropped."""
    logs = {name: _logs(v) for name, v in history.items()}
    logs = {name: x for name, x in logs.items() if x.size >= 2}
    noisy = {f.name for f in spread_flag.flags({name: np.exp(x) for name, x in logs.items()})}
    logs = {name: x for name, x in logs.items() if name not in noisy}
    keep = {name: x.size for name, x in logs.items()}
    while sum(k - 1 for k in keep.values()) > max_dof:  # drop the oldest launch of the longest history
        name = max(keep, key=lambda k: keep[k])
        keep[name] -= 1
    ss, dof, launches = 0.0, 0, 0
    for name, x in logs.items():
        x = x[x.size - keep[name]:]
        ss += float(((x - x.mean()) ** 2).sum())
        dof += x.size - 1
        launches += x.size
    if dof < MIN_DOF or ss <= 0.0:
        return None
    return Prior(ss / dof, dof, launches, tuple(name for name in logs))


def borrows(prior: Prior | None, current_var: float, current_dof: int) -> bool:
    """Whether a look pools `prior` with current launches of this variance and dof: not when the
    current spread is at least FACTOR x the prior's and above it by an F test at ALPHA."""
    if prior is None or prior.dof < MIN_DOF:
        return False
    if current_dof < 1 or not math.isfinite(current_var):
        return True
    return not flagged_against(current_var / prior.var, current_dof, prior.dof)


def flagged_against(f, dof: int, prior_dof: int):
    """spread_flag's rule for the variance ratio f (scalar or array): sqrt(f) >= FACTOR and the F
    test's p-value below ALPHA."""
    from scipy import stats

    return (np.sqrt(f) >= FACTOR) & (stats.f.sf(f, dof, prior_dof) < ALPHA)


def legend(prior: Prior | None) -> str:
    if prior is None:
        return "no stored spread: the spread from the current launches only"
    return (f"{prior.text}, pooled with the current launches (df add up) unless they are {FACTOR:g}x noisier by an "
            f"F test at {ALPHA:g}")


def pool(prior: Prior | None, histories: Sequence[Sequence[float]]) -> Prior | None:
    """`prior` with more stored launches pooled in (each sequence around its own mean; no
    exclusion, no cap: the sequential verdict's per-look prior, calibrated as it is), or None when
    nothing gives a degree of freedom."""
    ss = prior.var * prior.dof if prior is not None else 0.0
    dof = prior.dof if prior is not None else 0
    launches = prior.launches if prior is not None else 0
    for h in histories:
        x = _logs(h)
        if x.size >= 2:
            ss += float(((x - x.mean()) ** 2).sum())
            dof += x.size - 1
            launches += x.size
    if dof < MIN_DOF or ss <= 0.0:
        return None
    return Prior(ss / dof, dof, launches, prior.names if prior is not None else ("stored",))


def fresh_pair(stored_a: int, stored_b: int) -> tuple[int, int]:
    """The stored counts a pair's verdict may pool: only where the pair is new, one side stored
    (a reference measured before) and the other launched in this call. When both sides were stored
    the pair was judged before (or a killed call is resumed): pooling now would judge the same
    values again by another rule, so such a pair keeps the current-launches-only rule."""
    if stored_a > 0 and stored_b > 0:
        return (0, 0)
    return (max(0, stored_a), max(0, stored_b))


def prior_legend(prior: Prior, level: float) -> str:
    """A fixed prior's line in the sequential legend, with the Pocock `level` calibrated for its dof
    (toolkit.analysis.sequential.nominal_level)."""
    return (f"{legend(prior)} (Pocock level {level:.4f} for {prior.dof} prior df, alpha kept while the box is up to "
            f"{DRIFT:g}x noisier than when they ran)")


def stored_legend(most_dof: int) -> str:
    """The stored-launches rule in one line (run's, sweep's and the steps' legends); `most_dof`: the
    most stored launches a look pools (the design's max_repeats + sequential.STORED_CAP)."""
    return (f"where one side of a pair was stored before and the other is new, its stored launches (same run "
            f"identity) that a look does not use are pooled into the look's spread (df add up; at most "
            f"{most_dof}) unless the current launches are {FACTOR:g}x noisier by an F "
            f"test at {ALPHA:g}; the Pocock level is calibrated for the stored counts and a box up to {DRIFT:g}x "
            f"noisier now than when they ran")


def stored_before(starts_a: Sequence, starts_b: Sequence) -> tuple[int, int]:
    """How many leading launches of each side (start times in sequence order, oldest first; ISO
    strings or numbers, None unknown) started before the other side's first launch: what was stored
    before the pair's launching began (for one side at most, so `fresh_pair` holds). A pure
    function of the runs, so `run`, a resumed `run` and `compare` count the same."""
    def lead(xs, ys) -> int:
        known = [y for y in ys if y is not None]
        if not known:
            return 0
        first, n = min(known), 0
        for x in xs:
            if x is None or not x < first:
                break
            n += 1
        return n

    return fresh_pair(lead(list(starts_a), list(starts_b)), lead(list(starts_b), list(starts_a)))
