"""Each kernel family's roofline floor for the batch and context the profile ran at.

A family names roofline components (toolkit/data/kernel_families.toml); its floor is the sum of
their times from toolkit.roofline for the recipe's `[roofline]` model, GPU and weight formats at
batch = the concurrency profiled and context = the mean context of a decoding sequence
(input_len + output_len / 2). "allreduce" is the all-reduce term. Families with no component have
no floor (the roofline treats their work as free) and are shown as such.
"""

from __future__ import annotations

from dataclasses import dataclass

from toolkit.profile.families import Family


@dataclass(frozen=True)
class FloorSpec:
    model: str
    gpu: str
    weights: str | None
    tp: int
    ep: int
    batch: int
    context: int

    def text(self) -> str:
        return (f"{self.model} on {self.gpu}, TP{self.tp}" + (f" EP{self.ep}" if self.ep > 1 else "")
                + f", batch {self.batch}, context {self.context}, weights {self.weights or 'default'}")


def floor_spec(resolved: dict, batch: int) -> FloorSpec | None:
    """From a resolved recipe dict (`[roofline]`, `[server.args]`, `[benchmark]`); None without a model+GPU."""
    roof = resolved.get("roofline") or {}
    if not roof.get("model") or not roof.get("gpu"):
        return None
    args = (resolved.get("server") or {}).get("args") or {}
    bench = resolved.get("benchmark") or {}
    context = int(roof.get("context") or (int(bench.get("input_len", 0)) + int(bench.get("output_len", 0)) // 2))
    return FloorSpec(str(roof["model"]), str(roof["gpu"]), roof.get("weights"),
                     int(args.get("tp-size", args.get("tp", 1))), int(args.get("ep-size", args.get("ep", 1))),
                     int(batch), context)


def component_floors_ms(spec: FloorSpec) -> dict[str, float]:
    """Roofline time per component (and "allreduce") in milliseconds, through toolkit.roofline."""
    from toolkit.roofline import make_inputs, roofline

    row = roofline(make_inputs(spec.model, spec.gpu, tp=spec.tp, ep=spec.ep, batches=(spec.batch,),
                               context=spec.context, weights=spec.weights)).rows[0]
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
