"""Measured decode throughput against the theoretical decode roofline of a recipe's model on its GPU.

`efficiency(run, samples)` is the one implementation (report, results, compare). Like with like:

- The numerator is **decode-only** tok/s of one sequence at batch/concurrency 1, the first of
  `DECODE_BASES` measured there: a static batch's `decode_tok_s` at b=1, else 1000 / mean TPOT at
  c=1 (each request's decode span: (e2e - TTFT) / (tokens - 1); at c=1 with equal output lengths this
  is the output tok/s over the decode span), else 1000 / median ITL at c=1. Each run's value is
  converted, then the runs' values are averaged (as `selection.reduce` reduces repeats). Serving
  `output_tok_s` at c=1 includes TTFT/prefill and client gaps, so it understates decode: it is shown
  beside, labelled as serving, and never divided by the decode roofline.
- The denominator is `toolkit.roofline.theoretical_tok_s` for the `[roofline]` model, GPU and weights
  at the layout sglang itself resolved (the run's stored `/server_info`: tp_size, ep_size,
  attn_dp_size or dp_size with enable_dp_attention, attn_cp_size, moe_dp_size, pp_size, moe_dense_tp_size,
  enable_dp_lm_head, and the shared experts' sharding: toolkit.run.parallel_layout.shared_experts_tp),
  never the recipe's flags; a run with no server (the one-batch driver) uses sglang's static resolution
  of its arguments (`extra.resolved_config`). Without either the figure says so.
  Its context is `[roofline] context`, else the mean context of a decoding sequence of the run's
  benchmark (input_len + output_len / 2, as the profile floors take it): each decode step at c=1
  reads that much KV cache too.

None when the recipe names no model and GPU, or nothing was measured at point 1. Above 100% (beyond
toolkit.roofline.beyond's tolerance) the figure is not printed: `text()` says the roofline inputs do
not describe the run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from toolkit.errors import PatchbenchError
from toolkit.roofline.beyond import INPUTS_WRONG, beyond_roofline
from toolkit.analysis.selection import reduce
from toolkit.run.parallel_layout import roofline_layout

# (metric at point 1, per-run value -> decode tok/s of one sequence, label)
DECODE_BASES: tuple[tuple[str, Callable[[float], float], str], ...] = (
    ("decode_tok_s", lambda v: v, "decode_tok_s at b=1"),
    ("tpot_ms_mean", lambda ms: 1e3 / ms, "1000/TPOT at c=1"),
    ("itl_ms_median", lambda ms: 1e3 / ms, "1000/median ITL at c=1"),
)
SERVING = "output_tok_s"


@dataclass(frozen=True)
class Efficiency:
    """Decode-only tok/s at point 1 (mean of the per-run values) against the decode roofline."""

    metric: str  # the stored metric the decode rate came from (DECODE_BASES)
    measured: float  # decode tok/s of one sequence
    theoretical: float | None  # None: no roofline figure (`reason` says why)
    model: str
    gpu: str
    n: int = 1  # runs
    basis: str = ""  # how `measured` was derived, e.g. "1000/TPOT at c=1"
    layout: str = ""  # the parallel layout the roofline used, e.g. "TP8 EP8 from /server_info"
    serving: float | None = None  # serving output_tok_s at c=1 (with TTFT), shown, never compared
    reason: str = ""  # why there is no roofline figure

    @property
    def fraction(self) -> float:
        return self.measured / self.theoretical if self.theoretical else float("nan")

    @property
    def judged(self) -> bool:
        """A figure exists (a roofline for the run's resolved layout)."""
        return self.theoretical is not None

    @property
    def beyond(self) -> bool:
        """Faster than the roofline: its inputs (model, GPU, weights) are not this run's."""
        return self.judged and beyond_roofline(self.fraction)

    def _serving(self) -> str:
        return "" if self.serving is None else f"; serving {self.serving:.2f} tok/s (includes prefill/TTFT, not compared)"

    def text(self) -> str:
        if not self.judged and self.metric == SERVING:
            return f"serving {self.measured:.2f} tok/s at c=1; no roofline figure: {self.reason}"
        if not self.judged:
            return f"decode {self.measured:.2f} tok/s ({self.basis}); no roofline figure: {self.reason}{self._serving()}"
        if self.beyond:
            return (f"{INPUTS_WRONG}: decode {self.measured:.2f} tok/s ({self.basis}) measured, above the "
                    f"{self.theoretical:.0f} tok/s roofline of {self.model} on {self.gpu} at {self.layout}")
        # the roofline's even sharding (every weight byte split over the GPUs sharing it): sglang replicates
        # some per rank (for GLM-5 at TP8 ~29% lower: `patchbench roofline --sharding sglang`), so this is the
        # ideal's fraction
        return (f"decode {self.measured:.2f} of {self.theoretical:.0f} tok/s ({100 * self.fraction:.1f}% of the "
                f"even-sharding bound; {self.basis}; {self.layout}){self._serving()}")


def _decode_rate(obs: Mapping[str, Any]) -> tuple[str, float, int, str] | None:
    for metric, convert, label in DECODE_BASES:
        values = [convert(v) for v in (obs[metric].values if metric in obs else ()) if v > 0]
        if values:
            return metric, sum(values) / len(values), len(values), label
    return None


def _resolved_layout(run: Any, environ: Mapping | None = None) -> tuple[dict, str] | str:
    """The layout from the live server's /server_info; for a run with no server (the one-batch driver)
    from sglang's own static resolution of the same arguments (the run's `resolved_config`); else why not.
    `environ`: the server's [server.env] (SGLANG_SHARED_EXPERT_TP1 replicates the shared experts)."""
    lay = roofline_layout(getattr(run, "server_info", None), environ=environ)
    if isinstance(lay, str):
        static = (getattr(run, "extra", None) or {}).get("resolved_config")
        if static:
            return roofline_layout(static, source="sglang's static resolution", environ=environ)
    return lay


def _context(roof: Mapping, run: Any, resolved: Mapping) -> int:
    """Tokens in a decoding sequence's KV cache: `[roofline] context`, else input_len + output_len / 2 of
    the benchmark that ran."""
    if roof.get("context") is not None:
        return int(roof["context"])
    bench = getattr(run, "bench_params", None) or resolved.get("benchmark") or {}
    return int(bench.get("input_len") or 0) + int(bench.get("output_len") or 0) // 2


def efficiency(run: Any, samples: Iterable[Any]) -> Efficiency | None:
    """See the module docstring; `run` gives the recipe and the resolved config (its newest selected
    run), `samples` the selected runs' samples."""
    resolved = getattr(run, "recipe_resolved", None) or {}
    roof = resolved.get("roofline") or {}
    if not roof.get("model") or not roof.get("gpu"):
        return None
    obs = {m: o for (m, p, _), o in reduce(samples).items() if p == 1}
    serving = [v for v in (obs[SERVING].values if SERVING in obs else ()) if v > 0]
    serving_mean = sum(serving) / len(serving) if serving else None
    rate = _decode_rate(obs)
    if rate is None:
        if serving_mean is None:
            return None
        return Efficiency(SERVING, serving_mean, None, str(roof["model"]), str(roof["gpu"]), len(serving),
                          "serving output_tok_s at c=1", reason="no decode-only measure (TPOT, ITL or "
                          "decode_tok_s) at point 1, and serving tok/s includes prefill/TTFT")
    metric, measured, n, basis = rate
    base = dict(metric=metric, measured=measured, model=str(roof["model"]), gpu=str(roof["gpu"]), n=n,
                basis=basis, serving=serving_mean)
    lay = _resolved_layout(run, (resolved.get("server") or {}).get("env"))
    if isinstance(lay, str):
        return Efficiency(theoretical=None, reason=lay, **base)
    kw, layout_text = lay
    context = _context(roof, run, resolved)
    layout_text += f", context {context}"
    try:
        from toolkit.roofline import theoretical_tok_s

        theo = theoretical_tok_s(roof["model"], roof["gpu"], batch=1, context=context,
                                 weights=roof.get("weights"), **kw)
    except PatchbenchError as exc:
        return Efficiency(theoretical=None, reason=f"roofline inputs refused: {exc.message}", layout=layout_text,
                          **base)
    if not theo or not math.isfinite(theo):
        return None
    return Efficiency(theoretical=float(theo), layout=layout_text, **base)
