"""Measured decode throughput against the theoretical roofline of a recipe's model on its GPU.

`efficiency(run, samples)` is the one implementation (report, results, compare): the first headline
throughput (`toolkit.results.metrics.throughput_headline`) measured at batch/concurrency 1, reduced as
every table reduces repeats (`selection.reduce`: one value per run, then their mean), over
`toolkit.roofline.theoretical_tok_s` for the `[roofline]` model and GPU the run's recipe names
(tp/ep from its server args). None when the recipe names no model and GPU, or nothing was measured
at point 1. Above 100% (beyond toolkit.roofline.beyond's tolerance) the figure is not printed:
`text()` says the roofline inputs do not describe the run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable

from toolkit.roofline.beyond import INPUTS_WRONG, beyond_roofline
from toolkit.results import metrics
from toolkit.analysis.selection import reduce


@dataclass(frozen=True)
class Efficiency:
    """Measured `metric` at point 1 (mean of the per-run values) against the theoretical roofline."""

    metric: str
    measured: float
    theoretical: float
    model: str
    gpu: str
    n: int = 1  # runs

    @property
    def fraction(self) -> float:
        return self.measured / self.theoretical if self.theoretical else float("nan")

    @property
    def beyond(self) -> bool:
        """Faster than the roofline: its inputs (model, GPU, weights) are not this run's."""
        return beyond_roofline(self.fraction)

    def text(self) -> str:
        if self.beyond:
            return (f"{INPUTS_WRONG}: {self.measured:.2f} tok/s measured, above the {self.theoretical:.0f} tok/s "
                    f"roofline of {self.model} on {self.gpu}")
        # the roofline's even sharding (every weight byte split over TP): sglang replicates some per rank (for
        # GLM-5 at TP8 ~29% lower: `patchbench roofline --sharding sglang`), so this is the ideal's fraction
        return f"{self.measured:.2f} of {self.theoretical:.0f} tok/s ({100 * self.fraction:.1f}% of the even-sharding bound)"


def efficiency(run: Any, samples: Iterable[Any]) -> Efficiency | None:
    """See the module docstring; `run` gives the recipe (its newest selected run), `samples` the
    selected runs' samples."""
    resolved = getattr(run, "recipe_resolved", None) or {}
    roof = resolved.get("roofline") or {}
    if not roof.get("model") or not roof.get("gpu"):
        return None
    obs = {m: o for (m, p, _), o in reduce(samples).items() if p == 1}
    metric = next((m for m in metrics.throughput_headline() if m in obs and obs[m].values), None)
    if metric is None:
        return None
    server = resolved.get("server") or {}
    args = dict(server.get("args") or {}) if isinstance(server, dict) else {}
    try:
        tp = int(args.get("tp-size", args.get("tp", 1)))
        ep = int(args.get("ep-size", args.get("ep", 1)))
        from toolkit.roofline import theoretical_tok_s

        theo = theoretical_tok_s(roof["model"], roof["gpu"], tp=tp, ep=ep, batch=1,
                                 context=int(roof.get("context", 0)), weights=roof.get("weights"))
    except Exception:  # noqa: BLE001 - efficiency is a courtesy figure
        return None
    if not theo or not math.isfinite(theo):
        return None
    vals = obs[metric].values
    return Efficiency(metric, sum(vals) / len(vals), float(theo), str(roof["model"]), str(roof["gpu"]),
                      len(vals))
