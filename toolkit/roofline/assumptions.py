"""The assumptions behind a roofline, as sentences printed next to its numbers."""

from __future__ import annotations

from toolkit.roofline.configs import experts_on_busiest_gpu
from toolkit.roofline.formats import BYTES_PER_PARAM, DEFAULT_FORMAT, FORMAT_NOTES, KV_BYTES
from toolkit.roofline.comm import DISPATCH_BYTES
from toolkit.roofline.inputs import ACT_BYTES, DCP_Q_REPLICABLE, RooflineInputs


def _fmt_gb(x: float) -> str:
    return f"{x / 1e9:.3g} GB"


def _shared(inputs: RooflineInputs) -> str:
    if inputs.shared_experts_tp == 1 and inputs.tp > 1:
        return "replicated on every GPU (sglang's TP1 shared experts: each GPU reads them whole)"
    return f"over {'TP ' if inputs.shared_tp is None else ''}{inputs.shared_experts_tp}"


def _communication(inputs: RooflineInputs) -> str:
    """What the communication term counts, as the layout makes sglang 0.5.23 communicate (roofline.comm)."""
    m, g, atp = inputs.model, inputs.gpu, inputs.attn_tp
    a2a = inputs.moe_a2a != "none" and m.is_moe
    lat = inputs.latency_us
    src = "overridden" if inputs.allreduce_latency_us is not None else f"{g.interconnect} table value"
    per = ("b spread evenly over the attention-DP ranks (the busiest holds ceil(b / "
           f"{inputs.attn_dp}))" if inputs.attn_dp > 1 else "")
    text = [f"Communication per layer (hidden {m.hidden} x {ACT_BYTES} B bf16 a token"
            + (f"; {per}" if per else "") + "): "]
    datp = inputs.decode_attn_tp
    attn = (f"one all-reduce after attention over attention TP {atp}" if datp == atp > 1
            else f"one all-reduce after attention over the {datp} GPUs of CP decode attention TP" if datp > 1
            else "none after attention (attention TP 1)")
    if a2a and atp > 1:
        attn += (f" (MoE layers: reduce-scatter after it and all-gather before the next, of the rows padded to a "
                 f"multiple of {atp}, as the MoE runs on each rank's own rows)")
    text.append(attn + "; ")
    if a2a:
        text.append(
            f"MoE under --moe-a2a-backend {inputs.moe_a2a}: no all-reduce; a dispatch of each token's top-k={m.top_k} "
            f"copies in {inputs.a2a_dispatch} ({DISPATCH_BYTES[inputs.a2a_dispatch]:.4g} B/elem with scales) and "
            f"a bf16 combine of them back, the 1/EP={inputs.ep} share routed to the rank's own experts staying "
            "local (uniform routing; each rank sends its own tokens, ceil(tokens / attention TP), padding not "
            "dispatched); ")
    elif m.is_moe and inputs.fp4_allgather:
        text.append(f"MoE under the FlashInfer cutlass FP4 all-gather: each rank's tokens quantized to NVFP4 "
                    f"({DISPATCH_BYTES['nvfp4']:.4g} B/elem with scales) plus top-k={m.top_k} fp32 weights and int32 "
                    f"ids all-gathered over TP {inputs.tp} ({inputs.attn_dp} x ceil(b / {inputs.attn_dp}) rows: every rank "
                    "padded to the busiest, as a CUDA-graph decode step pads them; an eager step may gather b), "
                    "the bf16 expert outputs "
                    "reduce-scattered back (assumes the checkpoint's input scale is set, as for modelopt_fp4 "
                    "without per-token activations; else sglang gathers bf16); ")
    elif m.is_moe and inputs.attn_dp > 1:
        text.append(f"MoE: the attention-DP ranks' tokens gathered over TP {inputs.tp} before it and reduced back "
                    "after (sglang's SUM_LEN: two all-reduces of the summed rows, or MAX_LEN: all-gather + "
                    "reduce-scatter of every rank padded to the largest; the cheaper of the two at each b, every "
                    f"rank's rows padded to the busiest's ceil(b / {inputs.attn_dp}) as a CUDA-graph decode step "
                    "pads them, so MAX_LEN); ")
    elif m.is_moe:
        text.append(f"one all-reduce after the MoE over {inputs.moe_group} GPUs; ")
    if m.dense_layers:
        text.append("dense MLP: " + ("none (replicated)" if inputs.mlp_tp == 1 else
                                     "DP gather + reduce over TP as for the MoE" if inputs.attn_dp > 1
                                     and inputs.mlp_tp != atp else f"one all-reduce over {inputs.mlp_tp} GPUs") + "; ")
    if inputs.attn_dp > 1 and not inputs.dp_lm_head:
        text.append(f"lm_head: the {inputs.attn_dp} attention-DP ranks' last hidden states gathered by one all-reduce "
                    f"over TP {inputs.tp}, each rank padded to the busiest's ceil(b / {inputs.attn_dp}) as a CUDA-graph "
                    f"decode pads it ({inputs.attn_dp} x that many rows; an eager step gathers b), and lm_head run on "
                    "all of them against the GPU's vocab shard (no gather with enable_dp_lm_head); ")
    text.append(
        "ring traffic per GPU: all-reduce 2(N-1)/N x message, all-gather / reduce-scatter (N-1)/N x the whole "
        f"buffer (N the group's GPUs); each collective costs {lat:g} us latency ({src}) + its bytes / "
        f"{g.link_bw_gbps:g} GB/s link ({g.interconnect or 'link'}); the embedding all-reduce and the logits "
        "all-gather are not counted.")
    return "".join(text)


def _dcp_exchange(inputs: RooflineInputs) -> str:
    """What a DCP group sends per layer (roofline.comm.dcp_parts), in words."""
    m = inputs.model
    skipped = inputs.dcp_replicate_requested and inputs.weights.of("attention") not in DCP_Q_REPLICABLE
    q = (f"its queries (all-gathered: each rank attends with the group's heads"
         + (f"; dcp_replicate_q_proj skips {inputs.weights.of('attention')} query projections" if skipped else "")
         + ")" if inputs.dcp_q_gathered else
         f"no queries (dcp_replicate_q_proj: each rank projects the group's heads itself, reading {inputs.dcp} head "
         "shards of q_b_proj and w_kc, counted in attention)")
    if m.is_mla and inputs.dcp_comm in ("a2a", "fi_a2a"):
        merge = f"one {inputs.dcp_comm} all-to-all of the bf16 partial outputs with their LSEs packed in"
    elif m.is_mla:
        merge = "an fp32 LSE all-gather and an fp32 reduce-scatter of the partial outputs (ag_rs)"
    else:
        merge = "an fp32 LSE all-gather and an fp32 all-reduce of the partial outputs (the triton backend's)"
    return f"{q}, then {merge}"


def assumptions(inputs: RooflineInputs) -> tuple[str, ...]:
    """Every assumption behind the numbers, as sentences to print next to them."""
    m, g, w, tp, ep = inputs.model, inputs.gpu, inputs.weights, inputs.tp, inputs.ep
    present = ["attention"] + (["indexer"] if m.indexer_params else []) + (["dense_mlp"] if m.dense_layers else [])
    if m.is_moe:
        present += ["experts"] + (["shared_experts"] if m.shared_params else []) + ["router"]
    present += ["embed", "lm_head"]
    by_fmt: dict[str, list[str]] = {}
    for comp in present:
        by_fmt.setdefault(w.of(comp), []).append(comp)
    fmt_text = "; ".join(
        f"{fmt} = {BYTES_PER_PARAM[fmt]:.6g} B/param{' (' + FORMAT_NOTES[fmt] + ')' if FORMAT_NOTES[fmt] else ''}: "
        + ", ".join(comps)
        for fmt, comps in by_fmt.items()
    )
    out = [
        (
            f"Model {m.name}: {m.kind}, {m.layers} layers ({m.dense_layers} dense, {m.moe_layers} MoE), "
            f"hidden {m.hidden}, {m.total_params() / 1e9:.1f}B params, {m.active_params(1) / 1e9:.2f}B read per "
            "token at b=1 (embedding table excluded); norms, biases and MTP/next-n layers ignored."
        )
    ]
    out.append(
        f"Weights ({w.spec}): {fmt_text}."
        + (
            f" Not named in the spec, so {DEFAULT_FORMAT}: {', '.join(c for c in w.defaulted if c in present)}."
            if any(c in present for c in w.defaulted)
            else ""
        )
    )
    if m.is_moe:
        out.append(
            f"Routed experts: a layer reads the expected distinct experts E*(1-(1-k/E)^b) with E={m.n_experts}, "
            f"k={m.top_k} (uniform, independent routing; b=1 gives k, large b tends to E); attention, "
            + ("dense MLP, " if m.dense_layers else "")
            + ("shared experts, " if m.shared_params else "")
            + "router and lm_head are read in full every step."
        )
    else:
        out.append("Every weight is read once per step (dense model).")
    out.append("Embedding: a lookup reads b rows, not the table; lm_head reads its whole V x hidden matrix.")
    atp = inputs.attn_tp
    if tp == 1:
        out.append("TP=1: one GPU holds every weight.")
    else:
        rep = []
        if m.attn_replicated:
            rep.append("MLA q_a/kv_a projections")
        if m.indexer_params:
            rep.append("DSA indexer")
        if m.router_params:
            rep.append("router")
        if m.kv_heads and m.kv_heads < atp:
            rep.append(f"K/V projections ({m.kv_heads} KV heads < attention TP={atp}: one head per rank)")
        if inputs.sharding == "even":
            out.append(
                "Sharding 'even': every weight byte is split evenly over the GPUs that share it (ideal)."
                + (
                    f" sglang really replicates the {', '.join(rep)} on every rank: sharding 'sglang' counts that."
                    if rep
                    else ""
                )
            )
        else:
            out.append(
                f"Sharding 'sglang': replicated on every rank as sglang does: {', '.join(rep) or 'nothing'}; "
                "everything else split over the GPUs that share it."
            )
    out.append(
        f"Layout per GPU (sglang's): attention over attention TP = TP {tp} / attention DP {inputs.attn_dp}"
        + (f" / attention CP {inputs.attn_cp}" if inputs.attn_cp > 1 else "")
        + f" = {atp} GPU{'s' if atp > 1 else ''}"
        + (" (its weights replicated in every attention-DP group)" if inputs.attn_dp > 1 else "")
        + (f"; dense MLP over {inputs.mlp_tp}" if m.dense_layers else "")
        + (f"; shared experts {_shared(inputs)}" if m.shared_params else "")
        + f"; lm_head over {inputs.lm_head_tp}; embedding over TP {tp}."
    )
    if m.is_moe:
        if ep > 1:
            out.append(
                f"EP={ep} inside TP={tp}: each GPU holds E/EP={m.n_experts // ep} whole experts, each sliced over "
                f"TP/EP={inputs.moe_tp}; the busiest GPU reads ceil(distinct/EP) of them per MoE layer (at b=1: "
                f"ceil({m.top_k}/{ep}) = {experts_on_busiest_gpu(m.top_k, ep):g}), the bound with perfectly balanced "
                "routing (real routing loads it more; imbalance not modelled)."
            )
        else:
            out.append(f"EP=1: every GPU reads a 1/{inputs.moe_tp} slice of every active expert"
                       + (f" (TP {tp} / MoE DP {inputs.moe_dp})." if inputs.moe_dp > 1 else f" (1/TP={tp})."))
        if inputs.moe_dp > 1:
            out.append(
                f"MoE DP={inputs.moe_dp} (sglang's moe_dp_size): {inputs.moe_dp} groups of TP/MoE-DP={inputs.moe_group} "
                f"GPUs each hold every expert (sliced over TP/EP/MoE-DP={inputs.moe_tp}) and run the MoE for their "
                "attention-CP rank's rows, which at decode are all b tokens (CP splits only a prefill's tokens); its "
                "MoE output is all-reduced over its own GPUs.")
    if inputs.pp > 1:
        out.append(
            f"PP={inputs.pp}: each stage holds 1/{inputs.pp} of the layers, but a sequence's token passes through "
            "every stage in turn, so a decode step of one sequence takes as long as on one stage group holding all "
            "layers (the numbers here; point-to-point sends not counted)."
        )
    if inputs.dp > 1:
        out.append(
            f"DP={inputs.dp} replicas: a sequence runs on one replica; batch b here is per replica (the whole "
            f"server's tok/s at b per replica is {inputs.dp}x)."
        )
    kvb = KV_BYTES[inputs.kv_dtype]
    if m.is_mla:
        kv = (
            f"KV cache: context {inputs.context} tokens per sequence, {inputs.kv_dtype} ({kvb:g} B/elem, scales ignored); "
            f"MLA latent {m.kv_elems_per_token} elems/token/layer (kv_lora_rank + qk_rope_head_dim), replicated on every TP rank"
        )
        if m.index_topk:
            kv += (
                f"; DSA: attention reads min(context, index_topk={m.index_topk}) tokens, the indexer reads all "
                f"context tokens' fp8 keys ({m.index_head_dim} B + 4 B scale)"
            )
        out.append(kv + ". Attention core runs absorbed MLA (score dim kv_lora+rope, value dim kv_lora).")
    else:
        out.append(
            f"KV cache: context {inputs.context} tokens per sequence, {inputs.kv_dtype} ({kvb:g} B/elem); "
            f"{m.kv_heads} KV heads x head_dim {m.head_dim} x 2 (K,V) per token per layer, KV heads split over TP "
            "(at least one per GPU)."
        )
    if inputs.attn_dp > 1:
        out.append(f"Attention DP {inputs.attn_dp}: each DP rank schedules its own requests with its own KV cache "
                   "(sglang's round-robin dispatch), so the busiest GPU's attention, indexer and KV cache serve "
                   f"ceil(b / {inputs.attn_dp}) sequences; the MoE runs on all b tokens gathered over TP"
                   + ("" if inputs.dp_lm_head else f", lm_head on {inputs.attn_dp} x ceil(b / {inputs.attn_dp}) "
                      "gathered rows (every rank padded to the busiest, as a CUDA-graph decode step pads them)")
                   + ".")
    if inputs.decode_attn_tp != atp:
        out.append(f"CP decode attention TP (sglang's enable_cp_decode_attn_tp): at decode the head-split attention "
                   f"weights (q_b_proj, kv_b's w_kc/w_vc, o_proj) and the heads are sliced over attention TP {atp} x CP "
                   f"{inputs.attn_cp} = {inputs.decode_attn_tp} GPUs (q_a/kv_a and the indexer stay as they are) and "
                   f"o_proj all-reduces over those {inputs.decode_attn_tp}.")
    if inputs.dcp > 1:
        out.append(f"DCP={inputs.dcp} (sglang's dcp_size) inside attention TP: each GPU holds 1/{inputs.dcp} of every "
                   f"sequence's KV tokens, KV heads split over attention TP / DCP = {inputs.kv_tp}; per layer the "
                   "group exchanges " + _dcp_exchange(inputs) + ".")
    if inputs.context == 0:
        out.append("Context 0: KV cache reads and attention-core FLOPs are left out (the single-token limit).")
    out.append(
        f"Memory: {g.name} at {g.mem_bw_gbps:g} GB/s fully achieved (no L2 reuse, no kernel launch gaps); "
        "activations are not counted."
    )
    peaks = ", ".join(f"{k} {v:g}" for k, v in g.peak_tflops)
    out.append(
        f"Compute: 2 FLOPs per weight per token (routed experts: k per token); dense peak TFLOPS {peaks} ({g.key}); "
        "NVFP4/MXFP4 weights run at the fp4 peak where the GPU has FP4 tensor cores, else bf16; FP8 at fp8; "
        "BF16 and the attention core at bf16."
    )
    out.append(
        "Per-component roofline: each component (attention, experts, lm_head, KV cache, ...) takes "
        "max(bytes / mem_bw, FLOPs / peak); step time = sum of components + all-reduce time; "
        "no overlap of communication with compute."
    )
    if tp > 1:
        out.append(_communication(inputs))
    else:
        out.append("TP=1: no all-reduce.")
    out.append(
        "tok/s = b / step time: decode only, one token per sequence per step; no scheduler, sampling or "
        "speculative-decoding effects."
    )
    out.append(f"GPU numbers: {g.source}." + (f" {g.notes}" if g.notes else ""))
    return tuple(out)
