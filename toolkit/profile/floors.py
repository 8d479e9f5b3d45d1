"""Each kernel family's roofline floor for the batch and context the profile ran at.

A family names roofline components (toolkit/data/kernel_families.toml); its floor is the sum of
their times from toolkit.roofline for the recipe's `[roofline]` model, GPU and weight formats at
batch = the concurrency profiled and context = the mean context of a decoding sequence
(input_len + output_len / 2), at the parallel layout sglang resolved (the profile run's stored
/server_info: TP, EP, attention DP/CP, ...; the recipe's flags only before the run exists, named so).
"allreduce" is the all-reduce term. Families with no component have
no floor (the roofline treats their work as free) and are shown as such.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from toolkit.profile.families import Family
from toolkit.run.parallel_layout import roofline_layout


@dataclass(frozen=True)
class FloorSpec:
    model: str
    gpu: str
    weights: str | None
    tp: int
    ep: int
    batch: int
    context: int
    parallel: tuple[tuple[str, Any], ...] = ()  # the rest of the layout (make_inputs' attn_dp, pp, ...)
    layout: str = ""  # where the layout came from, e.g. "TP8 EP8 from /server_info"

    def text(self) -> str:
        where = self.layout or (f"TP{self.tp}" + (f" EP{self.ep}" if self.ep > 1 else ""))
        return (f"{self.model} on {self.gpu}, {where}"
                + f", batch {self.batch}, context {self.context}, weights {self.weights or 'default'}")


def floor_spec(resolved: dict, batch: int, server_info: Mapping | None = None) -> FloorSpec | None:
    """From a resolved recipe dict (`[roofline]`, `[benchmark]`) and the run's stored /server_info (its
    parallel layout; without one, the recipe's `[server.args]`, said so in `layout`); None without a
    model+GPU."""
    roof = resolved.get("roofline") or {}
    if not roof.get("model") or not roof.get("gpu"):
        return None
    bench = resolved.get("benchmark") or {}
    context = int(roof.get("context") or (int(bench.get("input_len", 0)) + int(bench.get("output_len", 0)) // 2))
    environ = (resolved.get("server") or {}).get("env")
    lay = roofline_layout(server_info, environ=environ)
    if isinstance(lay, str):  # before the run (no server yet) or an older store: the recipe's flags
        lay = roofline_layout({**_fields((resolved.get("server") or {}).get("args") or {})}, source="the recipe's flags",
                              environ=environ)
        if isinstance(lay, str):
            return None
    kw, text = lay
    kw = dict(kw)
    tp, ep = kw.pop("tp"), kw.pop("ep")
    return FloorSpec(str(roof["model"]), str(roof["gpu"]), roof.get("weights"), tp, ep, int(batch), context,
                     tuple(sorted(kw.items())), text)


def _fields(args: Mapping) -> dict:
    """Recipe flags as ServerArgs fields (tp-size -> tp_size), tp_size defaulting to 1."""
    out = {str(k).replace("-", "_"): v for k, v in dict(args).items()}
    out.setdefault("tp_size", out.get("tp", 1))
    return out


def component_floors_ms(spec: FloorSpec) -> dict[str, float]:
    """Roofline time per component (and "allreduce") in milliseconds, through toolkit.roofline."""
    from toolkit.roofline import make_inputs, roofline

    row = roofline(make_inputs(spec.model, spec.gpu, tp=spec.tp, ep=spec.ep, batches=(spec.batch,),
                               context=spec.context, weights=spec.weights, **dict(spec.parallel))).rows[0]
    out = {c.name: c.time_s * 1e3 for c in row.components}
    out["allreduce"] = row.allreduce.time_s * 1e3
    return out


def family_floors_ms(families: tuple[Family, ...], components_ms: dict[str, float],
                     present: set[str]) -> dict[str, float | None]:
    """Floor per family. A component counts once, for the first family (file order) that names it
    and was measured (the dense GEMM families share components: the one present gets them)."""
    out: dict[str, float | None] = {}
    taken: set[str] = set()
    for fam in families:
        if fam.name not in present:
            continue
        comps = [c for c in fam.roofline if c in components_ms and c not in taken]
        taken.update(comps)
        out[fam.name] = sum(components_ms[c] for c in comps) if fam.roofline else None
    return out
