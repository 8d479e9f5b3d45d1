"""The pure decode-roofline model: per-component costs, the communication term (comm), the result per batch size."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from toolkit.errors import BadInput
from toolkit.roofline.assumptions import assumptions
from toolkit.roofline.comm import DCP_COMMS, DISPATCH_BYTES, AllReduceCost, comm_cost, lm_head_rows, slot_rows
from toolkit.roofline.configs import (
    GpuSpec, ModelShape, expected_distinct_experts, experts_on_busiest_gpu, get_gpu, load_model_config, model_shape,
)
from toolkit.roofline.formats import BYTES_PER_PARAM, KV_BYTES, SEED_GLM5_WEIGHTS, WeightFormats, parse_weights
from toolkit.roofline.inputs import SHARDINGS, RooflineInputs


class Bounded:
    """A floor made of a memory time and a compute time: the larger one is the floor."""

    mem_s: float
    compute_s: float

    @property
    def time_s(self) -> float:
        return max(self.mem_s, self.compute_s)

    @property
    def bound(self) -> str:
        return "compute" if self.compute_s > self.mem_s else "memory"


@dataclass(frozen=True)
class ComponentCost(Bounded):
    name: str
    fmt: str  # weight format, or the KV dtype for kv_cache
    bytes: float  # read per GPU per step
    flops: float  # per GPU per step
    peak_dtype: str  # which peak the compute time used
    mem_s: float
    compute_s: float


@dataclass(frozen=True)
class BatchResult:
    batch: int
    distinct_experts: float  # per MoE layer, whole model (0 for dense models)
    components: tuple[ComponentCost, ...]
    allreduce: AllReduceCost

    def component(self, name: str) -> ComponentCost:
        for c in self.components:
            if c.name == name:
                return c
        raise KeyError(name)

    @property
    def weight_bytes(self) -> float:
        return sum(c.bytes for c in self.components if c.name != "kv_cache")

    @property
    def kv_bytes(self) -> float:
        return sum(c.bytes for c in self.components if c.name == "kv_cache")

    @property
    def bytes_total(self) -> float:
        return self.weight_bytes + self.kv_bytes

    @property
    def mem_s(self) -> float:
        return sum(c.mem_s for c in self.components)

    @property
    def compute_s(self) -> float:
        return sum(c.compute_s for c in self.components)

    @property
    def gpu_s(self) -> float:
        """Sum over components of max(memory, compute)."""
        return sum(c.time_s for c in self.components)

    @property
    def step_s(self) -> float:
        return self.gpu_s + self.allreduce.time_s

    @property
    def tok_s(self) -> float:
        return self.batch / self.step_s

    @property
    def bound(self) -> str:
        """"memory", "compute", or "comm: " and the collective that costs the most (e.g. "comm: MoE deepep
        dispatch (fp8) + combine (bf16)"), whichever of the three sums is largest."""
        parts = {"memory": 0.0, "compute": 0.0, "comm": self.allreduce.time_s}
        for c in self.components:
            parts[c.bound] += c.time_s
        top = max(parts, key=parts.get)
        return f"comm: {self.allreduce.costliest}" if top == "comm" else top

    def to_dict(self) -> dict:
        return {
            "batch": self.batch,
            "distinct_experts": self.distinct_experts,
            "components": [{**asdict(c), "time_s": c.time_s, "bound": c.bound} for c in self.components],
            "allreduce": {**asdict(self.allreduce), "time_s": self.allreduce.time_s,
                          "parts": [{"what": w, "count": n, "bytes_per_gpu": x} for w, n, x in self.allreduce.parts]},
            "weight_bytes": self.weight_bytes,
            "kv_bytes": self.kv_bytes,
            "mem_s": self.mem_s,
            "compute_s": self.compute_s,
            "step_s": self.step_s,
            "tok_s": self.tok_s,
            "bound": self.bound,
        }


@dataclass(frozen=True)
class RooflineResult:
    inputs: RooflineInputs
    rows: tuple[BatchResult, ...]
    assumptions: tuple[str, ...] = field(default=())

    def row(self, batch: int) -> BatchResult:
        for r in self.rows:
            if r.batch == batch:
                return r
        raise KeyError(batch)

    def to_dict(self) -> dict:
        i = self.inputs
        return {
            "model": i.model.name,
            "gpu": i.gpu.key,
            "gpu_name": i.gpu.name,
            "tp": i.tp,
            "ep": i.ep,
            "attn_dp": i.attn_dp,
            "attn_cp": i.attn_cp,
            "pp": i.pp,
            "dp": i.dp,
            "dense_tp": i.mlp_tp,
            "moe_dp": i.moe_dp,
            "shared_tp": i.shared_experts_tp,
            "dcp": i.dcp,
            "moe_a2a_backend": i.moe_a2a,
            "a2a_dispatch": i.a2a_dispatch,
            "fp4_allgather": i.fp4_allgather,
            "dcp_comm": i.dcp_comm,
            "cp_decode_attn_tp": i.decode_attn_tp if i.decode_attn_tp != i.attn_tp else None,
            "dcp_q_gathered": i.dcp_q_gathered,
            "lm_head_tp": i.lm_head_tp,
            "context": i.context,
            "kv_dtype": i.kv_dtype,
            "weights": dict(i.weights.formats),
            "weights_spec": i.weights.spec,
            "sharding": i.sharding,
            "allreduce_latency_us": i.latency_us,
            "rows": [r.to_dict() for r in self.rows],
            "assumptions": list(self.assumptions),
        }


def _compute_dtype(fmt: str, gpu: GpuSpec) -> str:
    """Which tensor-core peak a GEMM with `fmt` weights runs at."""
    if fmt in ("nvfp4", "mxfp4"):
        return "fp4" if gpu.peak("fp4") else "bf16"
    if fmt == "fp8":
        return "fp8" if gpu.peak("fp8") else "bf16"
    if fmt == "fp32" and gpu.peak("fp32"):  # a CPU row (the demo's): float32 at its own rate
        return "fp32"
    return "bf16"


def validate(inputs: RooflineInputs) -> None:
    if inputs.tp < 1 or inputs.ep < 1:
        raise BadInput(f"TP and EP must be >= 1 (got tp={inputs.tp}, ep={inputs.ep})", hint="e.g. --tp 8 --ep 1")
    if inputs.tp % inputs.ep:
        raise BadInput(
            f"EP={inputs.ep} must divide TP={inputs.tp}",
            hint="sglang runs expert parallelism inside the TP group: use --ep 1 or --ep equal to --tp",
        )
    _validate_moe_dp(inputs)
    for name, value in (("attention DP", inputs.attn_dp), ("attention CP", inputs.attn_cp), ("PP", inputs.pp),
                        ("DP", inputs.dp)):
        if value < 1:
            raise BadInput(f"{name} must be >= 1 (got {value})")
    if inputs.tp % (inputs.attn_dp * inputs.attn_cp):
        raise BadInput(f"attention DP {inputs.attn_dp} x CP {inputs.attn_cp} must divide TP={inputs.tp}",
                       hint="sglang runs attention data/context parallelism inside the TP group")
    if inputs.dcp < 1 or inputs.attn_tp % inputs.dcp:
        raise BadInput(f"decode context parallel size {inputs.dcp} must divide attention TP={inputs.attn_tp}",
                       hint="sglang runs DCP inside the attention-TP group (--dcp-size)")
    if inputs.dense_tp is not None and (inputs.dense_tp < 1 or inputs.tp % inputs.dense_tp):
        raise BadInput(f"dense-MLP TP {inputs.dense_tp} must divide TP={inputs.tp}")
    if inputs.shared_tp is not None and (inputs.shared_tp < 1 or inputs.tp % inputs.shared_tp):
        raise BadInput(f"shared-expert TP {inputs.shared_tp} must divide TP={inputs.tp}")
    if inputs.ep > 1 and not inputs.model.is_moe:
        raise BadInput(f"EP={inputs.ep} on a dense model", hint="use --ep 1 for dense models")
    if inputs.model.is_moe and inputs.model.n_experts % inputs.ep:
        raise BadInput(
            f"EP={inputs.ep} does not divide {inputs.model.n_experts} experts", hint="pick an EP that divides it"
        )
    if not inputs.batches or any(b < 1 for b in inputs.batches):
        raise BadInput(f"batch sizes must be >= 1 (got {list(inputs.batches)})", hint="e.g. --batch 1,2,4,8")
    if inputs.context < 0:
        raise BadInput(f"context must be >= 0 (got {inputs.context})", hint="e.g. --context 1024")
    if inputs.kv_dtype not in KV_BYTES:
        raise BadInput(f"unknown KV dtype {inputs.kv_dtype!r}", hint=f"use one of {', '.join(KV_BYTES)}")
    if inputs.sharding not in SHARDINGS:
        raise BadInput(f"unknown sharding {inputs.sharding!r}", hint=f"use one of {', '.join(SHARDINGS)}")
    if inputs.a2a_dispatch not in DISPATCH_BYTES:
        raise BadInput(f"unknown all-to-all dispatch dtype {inputs.a2a_dispatch!r}",
                       hint=f"use one of {', '.join(DISPATCH_BYTES)}")
    if inputs.moe_a2a != "none" and inputs.moe_dp > 1:
        # 0.5.23's config checks let it through (arg_groups/parallel_hook.py:170-192), but its all-to-all dispatchers
        # run over the whole TP group (layers/moe/fused_moe_triton/layer.py:163-172 _get_deepep_comm_group, :219
        # deepep_v2, :234 flashinfer), not a MoE-DP group of tp / moe_dp ranks holding E / ep experts each.
        raise BadInput(f"MoE DP {inputs.moe_dp} under --moe-a2a-backend {inputs.moe_a2a} is not modelled",
                       hint="sglang 0.5.23 dispatches over the whole TP group (layers/moe/fused_moe_triton/layer.py:"
                            "163-172), not per MoE-DP group: what it would send is not defined; use --moe-dp 1")
    if inputs.dcp_comm not in DCP_COMMS:
        raise BadInput(f"unknown DCP communication backend {inputs.dcp_comm!r}", hint=f"use one of {', '.join(DCP_COMMS)}")
    if inputs.dwdp > 1:
        raise BadInput(f"DWDP (dwdp_size {inputs.dwdp}) is not modelled",
                       hint="sglang 0.5.23 arg_groups/parallel_hook.py:459-464: under DWDP each decode step re-fetches "
                            "every remote expert's weights over the link; the roofline has no term for that")
    if inputs.cp_attn_tp and inputs.attn_cp > 1 and not inputs.model.is_mla:
        raise BadInput("CP decode attention TP (enable_cp_decode_attn_tp) is modelled for MLA models only",
                       hint="sglang 0.5.23 allows it only for GLM-5 / DeepSeek-V4 architectures "
                            "(arg_groups/model_hook.py:193-203, layers/cp/cp_decode_attn_tp.py:28-37)")
    if inputs.fp4_allgather and not (inputs.model.is_moe and inputs.attn_dp == inputs.ep == inputs.tp
                                     and inputs.moe_a2a == "none"):
        raise BadInput(f"the FlashInfer FP4 all-gather needs a MoE model with attention DP = EP = TP and no "
                       f"all-to-all backend (got TP{inputs.tp} EP{inputs.ep} attention DP{inputs.attn_dp}, "
                       f"--moe-a2a-backend {inputs.moe_a2a})",
                       hint="sglang 0.5.23 takes it only when ep_size == attn_dp_size (layers/moe/utils.py:707-718) "
                            "and all-gathers over TP with one size per DP rank: e.g. --tp 8 --ep 8 --attn-dp 8")
    if inputs.latency_us < 0:
        raise BadInput("all-reduce latency must be >= 0", hint="e.g. --allreduce-latency-us 10")


def _validate_moe_dp(inputs: RooflineInputs) -> None:
    """sglang 0.5.23's own checks of moe_dp_size (srt/arg_groups/parallel_hook.py, handle_context_parallelism
    and after): tp divisible by it, ep x moe_dp <= tp (== tp when ep > 1), and moe_dp > 1 only equal to the
    attention-CP size."""
    tp, ep, moe_dp = inputs.tp, inputs.ep, inputs.moe_dp
    if moe_dp < 1:
        raise BadInput(f"MoE DP must be >= 1 (got {moe_dp})")
    if moe_dp == 1:
        return
    if tp % moe_dp:
        raise BadInput(f"MoE DP {moe_dp} must divide TP={tp}", hint="sglang: tp_size must be divisible by moe_dp_size")
    if ep * moe_dp > tp or (ep > 1 and ep * moe_dp != tp):
        raise BadInput(f"EP={ep} x MoE DP {moe_dp} must equal TP={tp} (or EP 1 with MoE DP dividing TP)",
                       hint="sglang: ep_size * moe_dp_size must be equal to tp_size")
    if moe_dp != inputs.attn_cp:
        raise BadInput(f"MoE DP {moe_dp} must equal attention CP {inputs.attn_cp}",
                       hint="sglang: attn_cp_size != moe_dp_size is only supported when moe_dp_size == 1")


def _batch(inputs: RooflineInputs, b: int) -> BatchResult:
    m, g, w, tp, atp = inputs.model, inputs.gpu, inputs.weights, inputs.tp, inputs.attn_tp
    sglang = inputs.sharding == "sglang"
    bw = g.mem_bw_gbps * 1e9
    out: list[ComponentCost] = []

    def add(name: str, params: float, flops: float, fmt: str | None = None, extra_bytes: float = 0.0) -> None:
        fmt = fmt or w.of(name)
        nbytes = params * BYTES_PER_PARAM[fmt] + extra_bytes
        dtype = _compute_dtype(fmt, g)
        peak = g.peak(dtype) or g.peak("bf16")
        out.append(ComponentCost(name, fmt, nbytes, flops, dtype, nbytes / bw, flops / peak if peak else 0.0))

    # Attention DP: each DP rank is its own scheduler with its own KV pool, and the controller spreads the
    # requests over the ranks (0.5.23 managers/data_parallel_controller.py:880-899 round_robin_scheduler, the
    # default: arg_groups/serving_hook.py:222-233; :140-155 DPBudget.dispatch for the load-based ones), so the busiest GPU's attention, indexer
    # and KV cache serve ceil(b / attn_dp) sequences, not b (the MoE still sees all b tokens, gathered over TP).
    rows = slot_rows(inputs, b)
    # Attention projections, split over the attention-TP group (tp / attention DP / CP). "even": all
    # / attn_tp. "sglang": MLA q_a/kv_a replicated; GQA K/V split by KV head with at least one head
    # per rank (QKVParallelLinear replicates when kv_heads < attn_tp).
    # enable_cp_decode_attn_tp slices the head-split part over the CP ranks too (inputs.decode_attn_tp).
    datp = inputs.decode_attn_tp
    if sglang:
        kv_share = max(m.kv_heads / atp, 1.0) / m.kv_heads if m.kv_heads else 0.0
        attn = m.layers * (m.attn_sharded / datp + m.attn_replicated + m.attn_kv * kv_share)
    else:
        attn = m.layers * ((m.attn_sharded + m.attn_replicated + m.attn_kv) / atp
                           - m.attn_sharded * (1 / atp - 1 / datp))
    if m.is_mla and inputs.dcp > 1 and not inputs.dcp_q_gathered:
        # dcp_replicate_q_proj: each DCP rank holds its group's dcp head shards of q_b_proj and w_kc, all-gathered
        # once at load (0.5.23 model_executor/model_runner.py:1133-1163), and projects the group's dcp x heads itself
        # at decode (forward_mla.py:327-336, :401-403, :479-480, :503-506): it reads dcp shards of them, not one.
        attn += m.layers * (inputs.dcp - 1) * m.attn_q_replicable / datp
    add("attention", attn, 2 * rows * attn)
    if m.indexer_params:
        idx = m.layers * m.indexer_params * (1 if sglang else 1 / atp)
        add("indexer", idx, 2 * rows * idx)
    if m.dense_layers:
        dense = m.dense_layers * m.dense_mlp_params / inputs.mlp_tp
        local = inputs.attn_dp > 1 and inputs.mlp_tp == atp  # split like attention: its own rows, no DP gather
        add("dense_mlp", dense, 2 * (rows if local else b) * dense)
    distinct = 0.0
    if m.is_moe:
        # MoE DP: each MoE-DP group runs the decode batch's tokens over all experts on tp / moe_dp GPUs.
        tokens, group = inputs.moe_tokens(b), inputs.moe_group
        distinct = expected_distinct_experts(m.n_experts, m.top_k, tokens)
        # The busiest GPU: EP 1 reads a 1/moe_tp slice of every active expert; EP > 1 reads the whole
        # experts its rank holds that are active (at least ceil(distinct / ep)), each sliced over moe_tp.
        busiest = experts_on_busiest_gpu(distinct, inputs.ep)
        routed = m.moe_layers * busiest * m.expert_params / inputs.moe_tp
        even_share = m.moe_layers * distinct * m.expert_params / group
        flops = 2 * tokens * m.top_k * m.moe_layers * m.expert_params / group
        add("experts", routed, flops * (routed / even_share if even_share else 1.0))
        if m.shared_params:
            shared = m.moe_layers * m.shared_params / inputs.shared_experts_tp
            add("shared_experts", shared, 2 * b * shared)
        router = m.moe_layers * m.router_params * (1 if sglang else 1 / tp)
        add("router", router, 2 * b * router)
    add("embed", b * m.hidden / tp, 0.0)  # lookup of b rows
    head = m.vocab * m.hidden / inputs.lm_head_tp
    add("lm_head", head, 2 * lm_head_rows(inputs, b) * head)  # the DP ranks' gathered rows: comm.lm_head_rows

    # KV cache: bytes read and the attention score/context FLOPs (heads split over attention TP) of the busiest
    # attention-DP rank's `rows` sequences.
    # DCP: each rank of a DCP group holds 1/dcp of every sequence's KV tokens (the index keys too).
    kvb = KV_BYTES[inputs.kv_dtype]
    ctx, dcp = inputs.context, inputs.dcp
    if m.is_mla:
        attn_tokens = min(ctx, m.index_topk) if m.index_topk else ctx
        kv_bytes = rows * m.layers * attn_tokens / dcp * m.kv_elems_per_token * kvb  # latent replicated per rank
        if m.index_topk:
            kv_bytes += rows * m.layers * ctx / dcp * (m.index_head_dim + 4)  # fp8 index keys + fp32 scale
            idx_flops = (2 * rows * m.layers * ctx / dcp * m.index_heads * m.index_head_dim
                         * (1 if sglang else 1 / atp))
        else:
            idx_flops = 0.0
        core = 2 * rows * m.layers * (m.heads / datp) * attn_tokens * (m.attn_score_dim + m.attn_value_dim)
        kv_flops = core + idx_flops
    else:
        heads_per_gpu = max(m.kv_heads / inputs.kv_tp, 1.0)
        kv_bytes = rows * m.layers * ctx / dcp * 2 * heads_per_gpu * m.head_dim * kvb
        kv_flops = 2 * rows * m.layers * (m.heads / atp) * ctx * (m.attn_score_dim + m.attn_value_dim)
    peak = g.peak("bf16")
    out.append(ComponentCost("kv_cache", inputs.kv_dtype, kv_bytes, kv_flops, "bf16", kv_bytes / bw, kv_flops / peak))
    return BatchResult(batch=b, distinct_experts=distinct, components=tuple(out), allreduce=comm_cost(inputs, b))


def roofline(inputs: RooflineInputs) -> RooflineResult:
    """The roofline at every batch size in `inputs.batches`."""
    validate(inputs)
    rows = tuple(_batch(inputs, b) for b in inputs.batches)
    return RooflineResult(inputs=inputs, rows=rows, assumptions=assumptions(inputs))


def make_inputs(
    model: str | Path | Mapping | ModelShape,
    gpu: str | GpuSpec,
    *,
    tp: int = 1,
    ep: int = 1,
    batches: Iterable[int] = (1,),
    context: int = 0,
    weights: str | Iterable[str] | WeightFormats | None = None,
    kv_dtype: str = "bf16",
    allreduce_latency_us: float | None = None,
    sharding: str = "even",
    **parallel,
) -> RooflineInputs:
    """Build inputs from names: a model NAME/path/config dict, a GPU name, a weight spec; `parallel`:
    RooflineInputs' attn_dp, attn_cp, pp, dp, dense_tp, dp_lm_head, moe_dp, shared_tp, dcp, moe_a2a, a2a_dispatch,
    fp4_allgather, dcp_comm, dcp_replicate_q, cp_attn_tp, dwdp."""
    if isinstance(model, ModelShape):
        shape = model
    elif isinstance(model, Mapping):
        shape = model_shape(model)
    else:
        name, cfg = load_model_config(model)
        shape = model_shape(cfg, name)
    return RooflineInputs(
        model=shape,
        gpu=get_gpu(gpu),
        weights=parse_weights(weights),
        tp=int(tp),
        ep=int(ep),
        batches=tuple(int(b) for b in batches),
        context=int(context),
        kv_dtype=kv_dtype,
        allreduce_latency_us=allreduce_latency_us,
        sharding=sharding,
        **parallel,
    )


def theoretical_tok_s(
    model: str | dict,
    gpu: str,
    tp: int,
    ep: int,
    batch: int,
    context: int,
    weights: str,
    **parallel,
) -> float:
    """Theoretical decode tok/s (even sharding, bf16 KV cache, the table's all-reduce latency) for the
    layout `tp`, `ep` and `parallel` (make_inputs): the denominator of efficiency = measured / theoretical."""
    inputs = make_inputs(model, gpu, tp=tp, ep=ep, batches=(batch,), context=context, weights=weights, **parallel)
    return roofline(inputs).rows[0].tok_s


SEED_ASSUMPTION = (
    "Seed reproduction (GLM-5-NVFP4 on 8x RTX PRO 6000, TP8, b=1 -> ~309 tok/s): every weight NVFP4 "
    "(0.5625 B/param) including attention, DSA indexer, dense MLP, shared expert, router and lm_head; only the "
    "weights a step touches (8 routed + 1 shared expert per MoE layer); every byte split evenly over the 8 GPUs; "
    "KV cache negligible (context 0); 1,792 GB/s fully achieved; 156 all-reduces x (10 us + 21.5 kB ring "
    "traffic / 64 GB/s). The real checkpoint keeps attention and the rest in BF16 (experts=nvfp4,rest=bf16)."
)


def seed_glm5(weights: str = SEED_GLM5_WEIGHTS, **overrides) -> RooflineResult:
    """The seed's scenario (see seed_glm5_inputs) with SEED_ASSUMPTION leading the assumptions."""
    result = roofline(seed_glm5_inputs(weights, **overrides))
    return replace(result, assumptions=(SEED_ASSUMPTION, *result.assumptions))


def seed_glm5_inputs(weights: str = SEED_GLM5_WEIGHTS, **overrides) -> RooflineInputs:
    """The seed's setup: GLM-5 on 8x RTX PRO 6000, TP8, b=1, KV negligible (context 0), 10 us per
    all-reduce, every weight byte split evenly. With SEED_GLM5_WEIGHTS this gives ~309 tok/s."""
    kw = {"tp": 8, "ep": 1, "batches": (1,), "context": 0, "weights": weights, "sharding": "even"}
    kw.update(overrides)
    return make_inputs("glm-5", "rtx-pro-6000", **kw)
