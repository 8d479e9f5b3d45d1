"""A configuration whose launch-to-launch spread is far larger than its peers' (pure).

The spread of a configuration is the sample standard deviation of the log of its per-launch values
(n launches: n - 1 degrees of freedom); its peers are the other configurations measured beside it
(the recipes of one `run`, at the same point). A configuration is flagged when both hold:

    its spread is at least `factor` (2) times the peers' pooled spread         (far larger), and
    F = spread^2 / peers^2 is above the F(n - 1, peers' dof) quantile at 1 - alpha (0.01)

The pooled spread of the peers weights each peer's variance by its degrees of freedom. Rate: when
every configuration has the same spread (normal log-values) a given configuration is flagged with
probability <= alpha (the F test's; the factor only lowers it): measured in tests/test_sequential.py.
A flagged configuration is a box (or configuration) problem, not an effect: its verdicts settle
late or not at all. Needs 3 launches of the configuration and 2 degrees of freedom among its peers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

FACTOR = 2.0
ALPHA = 0.01
MIN_LAUNCHES = 3


@dataclass(frozen=True)
class SpreadFlag:
    name: str
    spread: float  # standard deviation of the log-value a launch
    peers: float  # the peers' pooled spread
    launches: int
    p_value: float

    @property
    def text(self) -> str:
        return (f"{self.name}: launch-to-launch spread {100 * self.spread:.1f}% against its peers' "
                f"{100 * self.peers:.1f}% ({self.spread / self.peers:.1f}x over {self.launches} launches, "
                f"F test p = {self.p_value:.2g}): a noisy box or configuration")

    def to_dict(self) -> dict:
        return {"name": self.name, "spread": self.spread, "peers": self.peers, "launches": self.launches,
                "p_value": self.p_value, "text": self.text}


def _var(values: Sequence[float]) -> tuple[float, int]:
    x = np.log(np.asarray([v for v in values if v > 0 and math.isfinite(v)], dtype=float))
    return (float(x.var(ddof=1)), x.size - 1) if x.size >= 2 else (math.nan, 0)


def flags(values: Mapping[str, Sequence[float]], *, factor: float = FACTOR, alpha: float = ALPHA) -> list[SpreadFlag]:
    """The configurations (name -> per-launch values) whose spread is far larger than their peers'."""
    from scipy import special  # fdtrc: scipy.stats.f.sf's own function (the same bits), without importing scipy.stats

    var = {name: _var(v) for name, v in values.items()}
    out = []
    for name, (v, dof) in var.items():
        if dof + 1 < MIN_LAUNCHES:
            continue
        peers = [(pv, pd) for other, (pv, pd) in var.items() if other != name and pd > 0]
        pdof = sum(d for _, d in peers)
        if pdof < 2:
            continue
        pooled = sum(pv * d for pv, d in peers) / pdof
        if pooled <= 0:
            continue
        f = v / pooled
        p = float(special.fdtrc(dof, pdof, f))
        if math.sqrt(f) >= factor and p < alpha:
            out.append(SpreadFlag(name, math.sqrt(v), math.sqrt(pooled), dof + 1, p))
    return out


def legend(*, factor: float = FACTOR, alpha: float = ALPHA) -> str:
    return (f"spread flag: a configuration's launch-to-launch spread (log-values) at least {factor:g}x its peers' "
            f"pooled spread and above it by an F test at {alpha:g} (a configuration of the peers' spread is flagged "
            f"with probability <= {alpha:g}); from {MIN_LAUNCHES} launches")
