"""The model's shape against the parallel layout: what sglang does not check before loading weights.

Pure: takes a Hugging Face config (a mapping, e.g. from `toolkit.roofline.load_model_config`), the
server's parsed or resolved arguments and the target's facts; returns the violations. These are
patchbench's rules, not sglang's: sglang accepts `--ep-size 3 --tp-size 8` for a 256-expert model
at argument time and fails only at weight loading, on the GPU box.

Rules (each named, so a message says which one broke):
- `ep-divides-experts`: the EP size divides the routed-expert count (each rank holds E/EP experts);
- `ep-divides-tp`: the EP size divides the TP size (the MoE layer's ranks are the TP ranks);
- `tp-divides-heads`: the attention TP size (TP, or TP / DP with DP attention) divides the
  attention heads; for GQA also the KV heads divide it or it divides them (replication);
- `gpus-cover-layout`: TP x PP is at most the target's GPU count;
- `weights-fit`: the weights one GPU holds (the roofline's bytes per parameter and format mix,
  sharded as sglang shards them: MLA down-projections, DSA indexer and router replicated; shared
  experts, dense MLP, experts and lm_head at the widths the resolved config gives) fit the target's
  memory times `mem-fraction-static`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from toolkit.roofline import BYTES_PER_PARAM, ModelShape, WeightFormats, model_shape, parse_weights
from toolkit.run.parallel_layout import attention_dp_size, roofline_layout

RULES = ("ep-divides-experts", "ep-divides-tp", "tp-divides-heads", "gpus-cover-layout", "weights-fit")


@dataclass(frozen=True)
class Violation:
    rule: str
    message: str

    def text(self) -> str:
        return f"{self.message} (patchbench's model-shape rule `{self.rule}`, not sglang's: sglang would fail at weight loading)"


@dataclass(frozen=True)
class ShapeCheck:
    violations: tuple[Violation, ...] = ()
    weights_per_gpu_gb: float | None = None
    budget_gb: float | None = None  # memory x mem-fraction-static
    notes: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return not self.violations


def _int(args: Mapping, key: str, default: int) -> int:
    value = args.get(key)
    try:
        return int(value) if value not in (None, "") else default
    except (TypeError, ValueError):
        return default


def weights_per_gpu_bytes(m: ModelShape, w: WeightFormats, *, tp: int, attn_tp: int, moe_dp: int = 1,
                          shared_tp: int | None = None, dense_tp: int | None = None,
                          lm_head_tp: int | None = None) -> float:
    """Resident weight bytes on one GPU (every expert, not the ones a step touches). Widths as sglang 0.5.23
    builds the layers (toolkit.run.parallel_layout.roofline_layout reads them from the resolved config):
    experts over tp / moe_dp (each MoE-DP group holds all of them), shared experts over `shared_tp`
    (1: replicated under an all-to-all MoE backend), dense MLP over `dense_tp` (moe_dense_tp_size; 1:
    replicated), lm_head over `lm_head_tp` (attention TP with enable_dp_lm_head); None: tp."""
    shared_tp, dense_tp, lm_head_tp = (tp if x is None else x for x in (shared_tp, dense_tp, lm_head_tp))

    def b(comp: str, params: float) -> float:
        return params * BYTES_PER_PARAM[w.of(comp)]

    kv_share = (max(m.kv_heads / attn_tp, 1.0) / m.kv_heads) if m.kv_heads else 0.0
    total = b("attention", m.layers * (m.attn_sharded / attn_tp + m.attn_replicated + m.attn_kv * kv_share))
    total += b("indexer", m.layers * m.indexer_params)
    total += b("dense_mlp", m.dense_layers * m.dense_mlp_params / dense_tp)
    if m.is_moe:
        # E/EP experts per rank, each sliced over TP/EP/MoE-DP: E * expert / (TP / MoE-DP) whatever EP is.
        total += b("experts", m.moe_layers * m.n_experts * m.expert_params / (tp // moe_dp))
        total += b("shared_experts", m.moe_layers * m.shared_params / shared_tp)
        total += b("router", m.moe_layers * m.router_params)
    total += b("embed", m.vocab * m.hidden / tp)
    if not m.tie_embeddings:
        total += b("lm_head", m.vocab * m.hidden / lm_head_tp)
    return total


def _widths(args: Mapping, environ: Mapping | None) -> dict:
    """moe_dp, shared_tp, dense_tp and lm_head_tp of the resolved args, as the roofline reads them."""
    lay = roofline_layout({"tp_size": 1, **args}, environ=environ)
    if isinstance(lay, str):  # an unreadable field: the plain TP split (the other rules name the field)
        return {}
    kw, _ = lay
    attn_tp = max(kw["tp"] // (kw["attn_dp"] * kw["attn_cp"]), 1)
    moe_dp = kw["moe_dp"] if kw["moe_dp"] >= 1 and kw["tp"] % kw["moe_dp"] == 0 else 1
    return {"moe_dp": moe_dp, "shared_tp": kw["shared_tp"], "dense_tp": kw["dense_tp"],
            "lm_head_tp": attn_tp if kw["dp_lm_head"] else None}


def check_model_shape(config: Mapping, args: Mapping, *, weights: str | None = None,
                      memory_bytes: float | None = None, gpu_count: int | None = None,
                      environ: Mapping | None = None) -> ShapeCheck:
    """The violations of `args` (ServerArgs field -> value) against the model `config`; `environ`: the
    server's environment (SGLANG_SHARED_EXPERT_TP1 replicates the shared experts)."""
    m = model_shape(config)
    tp = _int(args, "tp_size", 1)
    ep = _int(args, "ep_size", 1)
    pp = _int(args, "pp_size", 1)
    dp = attention_dp_size(args)  # --attn-dp-size, or --dp-size with --enable-dp-attention
    dp_attention = dp > 1
    attn_tp = tp // dp if dp_attention and tp % dp == 0 else tp
    out: list[Violation] = []
    notes: list[str] = []
    if m.is_moe and ep > 0 and m.n_experts % ep:
        out.append(Violation("ep-divides-experts", f"ep-size {ep} does not divide the {m.n_experts} routed experts "
                                                   f"of {m.name or 'the model'}"))
    if m.is_moe and ep > 0 and tp % ep:
        out.append(Violation("ep-divides-tp", f"ep-size {ep} does not divide tp-size {tp}"))
    if dp_attention and tp % dp:
        out.append(Violation("tp-divides-heads", f"attention-DP size {dp} does not divide tp-size {tp}"))
    elif m.heads % attn_tp:
        layout = f"attention TP {attn_tp} (tp-size {tp} / attention-DP size {dp})" if dp_attention else f"tp-size {tp}"
        out.append(Violation("tp-divides-heads", f"{layout} does not divide the {m.heads} attention heads"))
    elif m.kv_heads and m.kv_heads % attn_tp and attn_tp % m.kv_heads:
        out.append(Violation("tp-divides-heads", f"attention TP {attn_tp} and the {m.kv_heads} KV heads: neither "
                                                 "divides the other"))
    if gpu_count is not None and tp * pp > gpu_count:
        out.append(Violation("gpus-cover-layout", f"tp-size {tp} x pp-size {pp} needs {tp * pp} GPUs; the target "
                                                  f"has {gpu_count}"))
    per_gpu = budget = None
    if tp > 0 and attn_tp > 0:
        w = parse_weights(weights)
        per_gpu = weights_per_gpu_bytes(m, w, tp=tp, attn_tp=attn_tp, **_widths(args, environ)) / 1e9
        frac = args.get("mem_fraction_static")
        if memory_bytes is None:
            notes.append("weights-fit not checked: no target memory")
        elif frac in (None, ""):
            notes.append("weights-fit not checked: mem-fraction-static unresolved")
        else:
            budget = memory_bytes * float(frac) / 1e9
            if per_gpu > budget:
                out.append(Violation("weights-fit", f"the weights per GPU ({per_gpu:.1f} GB at {w.spec}, tp-size {tp}) "
                                                    f"exceed {memory_bytes / 1e9:.1f} GB x mem-fraction-static {frac} "
                                                    f"= {budget:.1f} GB"))
    return ShapeCheck(violations=tuple(out), weights_per_gpu_gb=per_gpu, budget_gb=budget, notes=tuple(notes))
