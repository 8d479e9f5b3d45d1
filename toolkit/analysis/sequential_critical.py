"""The critical values and pooled variance of a sequential look (toolkit.analysis.sequential; pure).

A look at n launches each is the pooled two-sample t interval of the mean log-values; its critical
value is the repeated intervals' c_n (the Pocock level calibrated for the design and for what stored
spread it may pool: `Stored`, toolkit.analysis.sequential_level) or, for unequal sides and beyond
max_repeats, the open-ended mixture's t*. `pooled` is the look's variance, with a stored-spread prior
borrowed where the borrowing test allows (toolkit.analysis.noise_prior).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from toolkit.analysis import noise_prior
from toolkit.analysis.sequential_level import nominal_level
from toolkit.analysis.sequential_mixture import critical_t

Design = Any  # toolkit.analysis.sequential.Design (imported there from here: no import back)

REPEATED, MIXTURE = "repeated", "mixture"


STORED_CAP = 16  # stored launches beyond max_repeats a side that a look may pool (the calibration's width)


@dataclass(frozen=True)
class Stored:
    """What a verdict's stored spread is calibrated for: a fixed prior of `prior_dof` df, and the
    sequences' first `a` / `b` values stored before launching began (each capped at max_repeats +
    STORED_CAP). Stored() is the current-launches-only rule."""

    prior_dof: int = 0
    a: int = 0
    b: int = 0

    def key(self, design: Design) -> tuple[int, int, int]:
        """(prior dof, stored a, stored b) as calibrated: capped, and 0 where no look has two stored
        values it does not use (the same procedure as none stored)."""
        cap, least = design.max_repeats + STORED_CAP, design.min_repeats + 2
        return (self.prior_dof, *(min(s, cap) if s >= least else 0 for s in (self.a, self.b)))


NONE = Stored()


def repeated_t(n: int, design: Design, stored: Stored = NONE, borrowed: int = 0, sides: int = 2) -> float:
    """c_n: the critical value of the repeated interval at n launches each (t quantile at a' for
    this stored spread): 2n - 2 + `borrowed` df (the prior dof this look pooled). `sides=1`: the
    one-sided bound of the equivalence tests (each side crossed with probability <= alpha).
    scipy.special's stdtrit is what scipy.stats.t.isf computes (-stdtrit(df, q), the same bits) without
    its ~90 us of argument handling a call: `plan` and every verdict ask this thousands of times."""
    from scipy import special

    level = nominal_level(design.alpha, design.min_repeats, design.max_repeats, *stored.key(design), sides=sides)
    return float(-special.stdtrit(2 * n - 2 + borrowed, level / 2.0 if sides == 2 else level))


def critical(n_a: int, n_b: int, design: Design, stored: Stored = NONE, borrowed: int = 0, sides: int = 2) -> float:
    """The critical value the interval of these sizes uses: the repeated interval's c_n for equal
    sides within min_repeats..max_repeats, else the mixture's t* (which never uses a prior, and whose
    two-sided t* also bounds each side of the equivalence tests: `sides` only narrows the repeated one)."""
    if uses_prior(n_a, n_b, design):
        return repeated_t(n_a, design, stored, borrowed, sides)
    return critical_t(n_a, n_b, alpha=design.alpha, prior_scale=design.prior_scale)


def uses_prior(n_a: int, n_b: int, design: Design) -> bool:
    """Whether a look of these sizes is one of the calibrated repeated looks (a prior can be pooled)."""
    return design.method == REPEATED and n_a == n_b and design.min_repeats <= n_a <= design.max_repeats


def _ss(la: np.ndarray, lb: np.ndarray) -> float:
    return float(((la - la.mean()) ** 2).sum() + ((lb - lb.mean()) ** 2).sum())


def pooled(a: Sequence[float], b: Sequence[float], design: Design, prior=None) -> tuple[float, int, int]:
    """(variance of the log-value, its dof, the prior dof borrowed) this look computes with: the
    current launches' pooled variance, and the prior's pooled into it when the look borrows it."""
    la, lb = np.log(np.asarray(a, dtype=float)), np.log(np.asarray(b, dtype=float))
    dof = la.size + lb.size - 2
    ss = _ss(la, lb) if dof > 0 else math.nan
    var = ss / dof if dof > 0 else math.nan
    if prior is not None and uses_prior(la.size, lb.size, design) and noise_prior.borrows(prior, var, dof):
        return ((ss + prior.var * prior.dof) / (dof + prior.dof), dof + prior.dof, prior.dof)
    return (var, dof, 0)


def look_prior(a: Sequence[float], b: Sequence[float], n: int, prior, stored: Stored, design: Design):
    """The prior look n pools: the fixed `prior` and the stored values it does not use
    (a[n:stored.a], b[n:stored.b], within the calibration's cap), or None."""
    _, sa, sb = stored.key(design)
    return noise_prior.pool(prior, [list(a[n:sa]), list(b[n:sb])])
