"""A measurement faster than the roofline is an error of the roofline's inputs, not a result.

The roofline is a lower bound on time (an upper bound on throughput) for the model and machine it
is given. A run that beats it by more than `TOLERANCE` (timer and sampling noise) ran something
else: another model size, another machine, other weight formats. Efficiency figures (results,
compare, report) and profile floors say `INPUTS_WRONG` instead of printing such a percentage.
"""

from __future__ import annotations

TOLERANCE = 0.02  # 2%: beyond 102% of the roofline is not noise
INPUTS_WRONG = "the roofline inputs do not describe this run"


def beyond_roofline(fraction: float | None) -> bool:
    """`fraction` = measured / theoretical throughput (or floor / measured time) above 1 + TOLERANCE."""
    return fraction is not None and fraction == fraction and fraction > 1.0 + TOLERANCE
