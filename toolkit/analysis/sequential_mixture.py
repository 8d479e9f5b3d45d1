"""The open-ended sequence of `toolkit.analysis.sequential`'s `method = "mixture"` (pure): the
critical |t| at which the scale-invariant two-sample t mixture's Bayes factor reaches 1/alpha.

BF_n(t) = (1 + n_d tau^2)^(-1/2) * ((1 + t^2/nu) / (1 + t^2/(nu (1 + n_d tau^2))))^((nu+1)/2), with
n_d = n_a n_b / (n_a + n_b), nu = n_a + n_b - 2 and tau the prior scale of the standardized effect
(Lai 1976; the "safe t-test" of Grunwald, de Heide & Koolen 2020): a nonnegative martingale under
the null, so by Ville's inequality it crosses 1/alpha at any n with probability <= alpha. Bisect
(unequal sides) and looks beyond max_repeats use it.
"""

from __future__ import annotations

import math

DEFAULT_ALPHA = 0.05
DEFAULT_PRIOR_SCALE = 10.0


def critical_t(n_a: int, n_b: int, *, alpha: float = DEFAULT_ALPHA, prior_scale: float = DEFAULT_PRIOR_SCALE) -> float:
    """t*: the |t| at which BF_n reaches 1/alpha (inf when no t reaches it at these sizes)."""
    if n_a < 1 or n_b < 1 or n_a + n_b < 3:
        return math.inf
    nu = n_a + n_b - 2
    g = 1.0 + prior_scale * prior_scale * n_a * n_b / (n_a + n_b)
    ke = (math.sqrt(g) / alpha) ** (2.0 / (nu + 1))
    if ke >= g:
        return math.inf
    return math.sqrt(nu * (ke - 1.0) / (1.0 - ke / g))


def bayes_factor(t: float, n_a: int, n_b: int, *, prior_scale: float = DEFAULT_PRIOR_SCALE) -> float:
    """BF_n of the module docstring (the e-value whose crossing of 1/alpha the interval inverts)."""
    nu = n_a + n_b - 2
    if nu < 1:
        return 1.0
    g = 1.0 + prior_scale * prior_scale * n_a * n_b / (n_a + n_b)
    x = t * t / nu
    return g ** -0.5 * ((1.0 + x) / (1.0 + x / g)) ** ((nu + 1) / 2.0)
