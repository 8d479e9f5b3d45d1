"""Kernel shapes: derived from the recipe's model and parallel layout, or read from a file.

`--shapes model` asks the roofline's own model facts (`toolkit.roofline`: one source, no second
table) for the decode shapes of the routed experts at every benchmark concurrency of the recipe:

- each routed expert is a gated MLP of `expert_params = 3 * hidden * I` weights (the roofline's
  count); under TP with EP inside it each GPU holds E/EP experts, each sliced over TP/EP (TP/EP/MoE-DP
  under sglang's moe_dp_size), so one
  GPU's slice has I_s = I / (TP/EP) columns: two GEMMs, gate+up (N = 2 I_s, K = hidden) and down
  (N = hidden, K = I_s). Their weights add up to expert_params / (TP/EP) (at TP8, EP1 for GLM-5:
  2 x 256 + 256 = 768 columns of 6144);
- at decode concurrency b, b tokens pick top-k experts each and a layer touches
  E * (1 - (1 - k/E)^b) distinct experts (the roofline's expected count), so an active expert sees
  M = round(b * k / distinct) tokens on average (at least 1): M = 1 up to b ~ E/k, then it grows
  (GLM-5: M = 1, 2, 4, 8, 16, 32 at b = 1, 32, 128, 256, 512, 1024). Under MoE DP each of the
  moe_dp groups runs its experts on the whole decode batch (CP splits only a prefill's tokens: the
  roofline's RooflineInputs.moe_tokens), so b stays b.

For the MoE op a shape is one GPU's grouped problem: tokens b, experts E/EP, top-k (k/EP of each
token's experts land on one rank under EP: at least 1), hidden, I_s.

`--shapes FILE`: a JSONL (or JSON list) of objects with the op's dimensions ({"m","n","k"} for a
GEMM), or FlashInfer's trace dump (`FLASHINFER_TRACE_DUMP=1` writes one definition JSON per
(op, const axes) into `FLASHINFER_TRACE_DUMP_DIR`; a directory or one file): its `gemm_fp4`
definitions give N and K; M is a var axis the dump does not record, so M comes from `--m`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from toolkit.errors import BadInput
from toolkit.kernels.registry import OpSpec
from toolkit.roofline import ModelShape, expected_distinct_experts, load_model_config, model_shape
from toolkit.run import parallel_layout

DEFAULT_MS = (1, 2, 4, 8, 16, 32, 64, 128)


@dataclass(frozen=True)
class Shape:
    dims: dict  # the op's dimensions, e.g. {"m": 1, "n": 512, "k": 6144}
    label: str = ""  # what it is in the model ("experts.gate_up"), or where it came from
    points: tuple[int, ...] = field(default=())  # benchmark concurrencies that give it

    def key(self) -> str:
        return "x".join(f"{k}{v}" for k, v in self.dims.items()) + (f"@{self.label}" if self.label else "")

    def to_dict(self) -> dict:
        return {"dims": dict(self.dims), "label": self.label, "points": list(self.points)}

    @classmethod
    def from_dict(cls, d: dict) -> "Shape":
        return cls(dict(d["dims"]), d.get("label", ""), tuple(d.get("points", ())))


@dataclass(frozen=True)
class Layout:
    """The model and parallel layout a recipe runs: what model shapes are derived from."""

    model: ModelShape
    tp: int
    ep: int
    points: tuple[int, ...]
    basis: str = ""  # where TP/EP came from ("TP8 EP8 from sglang's static resolution")
    moe_dp: int = 1  # sglang's moe_dp_size: moe_tp_size = tp // ep // moe_dp (0.5.23 runtime_context.py)

    @property
    def slice(self) -> int:
        """Each expert is sliced over TP/EP/MoE-DP GPUs (sglang's moe_tp_size)."""
        return self.tp // self.ep // self.moe_dp

    @property
    def inter(self) -> int:
        """One routed expert's intermediate size, from the roofline's weight count (3 * hidden * I)."""
        return self.model.expert_params // (3 * self.model.hidden)

    @property
    def inter_slice(self) -> int:
        return self.inter // self.slice

    @property
    def experts_per_gpu(self) -> int:
        return self.model.n_experts // self.ep

    def moe_tokens(self, b: int) -> int:
        """The decode tokens one MoE-DP group's experts see at concurrency b: all b, as the roofline counts them
        (RooflineInputs.moe_tokens: CP splits only a prefill's tokens, so every MoE-DP group runs the batch)."""
        return b

    def tokens_per_expert(self, b: int) -> int:
        """The mean tokens an active expert sees at decode concurrency b, rounded
        (at least 1)."""
        m, t = self.model, self.moe_tokens(b)
        return max(1, round(t * m.top_k / expected_distinct_experts(m.n_experts, m.top_k, t)))


def layout_of(recipe, resolved: dict | None = None, why_not: str | None = None) -> Layout:
    """The recipe's `[roofline]` model, its server's TP/EP and its benchmark points. TP/EP are sglang's
    static resolution of the recipe's arguments (`resolved`: its resolved config; sglang sets EP to TP for
    the DeepEP/Mooncake all-to-all backends whatever --ep-size says) when there is one, else the recipe's
    flags, the basis saying which (`why_not`: why there is no resolution)."""
    roof = dict(recipe.roofline or {})
    if not roof.get("model"):
        raise BadInput(f"recipe {recipe.name} names no [roofline] model",
                       hint="add [roofline] model = \"glm-5\" (or a config.json path), or give --shapes FILE")
    name, cfg = load_model_config(roof["model"])
    shape = model_shape(cfg, name)
    if not shape.is_moe:
        raise BadInput(f"model {name} has no routed experts: `--shapes model` derives expert shapes",
                       hint="give --shapes FILE")
    if resolved and resolved.get("tp_size") is not None:
        lay, source = parallel_layout.layout(resolved), "sglang's static resolution"
    else:
        lay = parallel_layout.layout(recipe.server.args or {})
        source = "the recipe's flags" + (f" ({why_not})" if why_not else "")
    tp, ep, moe_dp = lay["tp_size"], lay["ep_size"], lay["moe_dp_size"]
    basis = f"TP{tp} EP{ep}" + (f" MoE-DP{moe_dp}" if moe_dp > 1 else "") + f" from {source}"
    if (tp % (ep * moe_dp) or shape.n_experts % ep
            or (shape.expert_params // (3 * shape.hidden)) % (tp // ep // moe_dp)):
        raise BadInput(f"TP={tp}, EP={ep}" + (f", MoE DP={moe_dp}" if moe_dp > 1 else "")
                       + f" does not split {name}'s {shape.n_experts} experts evenly")
    b = recipe.benchmark
    points = tuple(b.concurrency if b.driver == "serving" else b.batch_sizes)
    return Layout(shape, tp, ep, points, basis, moe_dp)


def model_shapes(layout: Layout, op: OpSpec) -> list[Shape]:
    m, lay = layout.model, layout
    out: dict[tuple, Shape] = {}
    for b in lay.points:
        if op.kind == "gemm":
            mm = lay.tokens_per_expert(b)
            for label, n, k in (("experts.gate_up", 2 * lay.inter_slice, m.hidden),
                                ("experts.down", m.hidden, lay.inter_slice)):
                dims = {"m": mm, "n": n, "k": k}
                key = (label, *dims.values())
                prev = out.get(key)
                out[key] = Shape(dims, label, (prev.points if prev else ()) + (b,))
        else:
            top_k = max(1, m.top_k // lay.ep)
            dims = {"tokens": lay.moe_tokens(b), "experts": lay.experts_per_gpu, "top_k": top_k, "hidden": m.hidden,
                    "inter": lay.inter_slice}
            key = tuple(dims.values())
            prev = out.get(key)
            out[key] = Shape(dims, "experts.moe", (prev.points if prev else ()) + (b,))
    return sorted(out.values(), key=lambda s: (s.label, tuple(s.dims.values())))


def _check_dims(op: OpSpec, d: dict, where: str) -> dict:
    try:
        dims = {k: int(d[k]) for k in op.dims}
    except (KeyError, TypeError, ValueError):
        raise BadInput(f"{where}: a shape for {op.name} needs integer {', '.join(op.dims)} (got {d})") from None
    if any(v < 1 for v in dims.values()):
        raise BadInput(f"{where}: dimensions must be >= 1 (got {dims})")
    return dims


def _trace_definitions(path: Path) -> list[dict]:
    files = sorted(path.glob("*.json")) if path.is_dir() else [path]
    out = []
    for f in files:
        try:
            d = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(d, dict) and "op_type" in d and "axes" in d:
            out.append(d)
    return out


def file_shapes(path: str | Path, op: OpSpec, ms: tuple[int, ...] = DEFAULT_MS) -> list[Shape]:
    p = Path(path).expanduser()
    if not p.exists():
        raise BadInput(f"shapes file {p} does not exist", hint="give `model` or a JSONL of shapes / a trace dump")
    defs = _trace_definitions(p) if p.is_dir() or p.suffix == ".json" else []
    if defs:
        return _from_definitions(defs, op, ms, p)
    if p.is_dir():
        raise BadInput(f"{p} holds no FlashInfer trace definitions (*.json with op_type and axes)")
    text = p.read_text()
    try:
        items = json.loads(text) if text.lstrip().startswith("[") else \
            [json.loads(line) for line in text.splitlines() if line.strip()]
    except ValueError as exc:
        raise BadInput(f"{p}: not JSON lines: {exc}") from None
    holds = _what_a_shape_file_holds(op)
    for i, d in enumerate(items):
        if not isinstance(d, dict):
            raise BadInput(f"{p} item {i + 1}: {json.dumps(d)[:40]} is not a shape", hint=holds)
    shapes = [Shape(_check_dims(op, d, f"{p} item {i + 1}"), str(d.get("label", p.name)))
              for i, d in enumerate(items)]
    if not shapes:
        raise BadInput(f"{p}: no shapes in it", hint=holds)
    return shapes


def _what_a_shape_file_holds(op: OpSpec) -> str:
    example = json.dumps({"m": 1, "n": 512, "k": 6144} if op.kind == "gemm" else
                         {"tokens": 1, "experts": 32, "top_k": 8, "hidden": 6144, "inter": 256})
    return (f"a shapes file holds one JSON object per line (or a JSON list of them) with integer "
            f"{', '.join(op.dims)} for {op.name}, e.g. {example}, or is a FlashInfer trace dump")


def _from_definitions(defs: list[dict], op: OpSpec, ms: tuple[int, ...], where: Path) -> list[Shape]:
    if op.kind != "gemm":
        raise BadInput(f"{where}: trace dumps give GEMM shapes; {op.name} takes {', '.join(op.dims)} in a JSONL")
    shapes: list[Shape] = []
    seen = set()
    for d in defs:
        if d.get("op_type") != op.fi_op_type and not (op.test_only and str(d.get("op_type", "")).startswith("gemm")):
            continue
        axes = d["axes"]
        try:
            n, k = int(axes["N"]["value"]), int(axes["K"]["value"])
        except (KeyError, TypeError, ValueError):
            continue
        for m in ms:
            if (m, n, k) not in seen:
                seen.add((m, n, k))
                shapes.append(Shape({"m": m, "n": n, "k": k}, str(d.get("name", "trace"))))
    if not shapes:
        types = sorted({str(d.get("op_type")) for d in defs})
        raise BadInput(f"{where}: no {op.fi_op_type} definition in the trace dump (found: {', '.join(types)})")
    return shapes


def resolve_shapes(spec: str, recipe, op: OpSpec, ms: tuple[int, ...] | None = None,
                   layout: Layout | None = None) -> list[Shape]:
    """`model` or a FILE (see the module docstring); `ms` narrows model shapes to those M values
    and gives the M values of a trace dump; `layout`: the model layout (default: from the recipe's flags)."""
    if spec == "model":
        shapes = model_shapes(layout or layout_of(recipe), op)
        if ms and op.kind == "gemm":
            shapes = [s for s in shapes if s.dims["m"] in ms]
        if not shapes:
            raise BadInput("no model shape left", hint="check --m against the M values the model gives")
        return shapes
    return file_shapes(spec, op, tuple(ms or DEFAULT_MS))
