"""The decode roofline's communication term: what sglang 0.5.23 moves between GPUs per decode step (pure).

Per layer, by the parallel layout (0.5.23 srt/layers/layer_boundary/factories.py _resolve_ffn: an FFN
computes on the attention's rows, or on this rank's own rows when the MoE input is scattered across
DP ranks, moe/utils.py:721 is_moe_input_scattered_across_dp_ranks):

- TP only (no attention DP, no all-to-all MoE backend): one all-reduce after attention (over
  attention TP) and one after the MLP/MoE (over TP, or the MoE-DP group), each of the b tokens' hidden
  states in bf16.
- All-to-all MoE backend (deepep, mooncake, flashinfer, megamoe, ...): a MoE layer runs on each
  rank's own rows, so the attention output is reduce-scattered over attention TP and all-gathered
  again before the next attention (rows padded to a multiple of attention TP,
  forward_batch_info.py:1770-1772), and the MoE's traffic is a dispatch of each token's top-k copies
  (low-latency mode at decode: one copy per routed expert) at the dispatch dtype plus a bf16 combine of
  the same copies back; the share routed to the rank's own experts, 1/EP under uniform routing, stays
  local. Shared experts are replicated there (no traffic).
- FlashInfer cutlass FP4 all-gather (attention DP = EP = TP, moe_runner_backend flashinfer_cutlass, a
  modelopt_fp4 checkpoint: layers/moe/utils.py:707-718 should_use_flashinfer_cutlass_moe_fp4_allgather):
  each rank quantizes its own tokens to NVFP4 before the gather and the dispatcher all-gathers them over TP
  in one grouped call (token_dispatcher/standard.py:177-210: the fp4 values, their fp8 scales per 16, the
  fp32 top-k weights and int32 top-k ids; parallel_state.py:1441-1510 all_gatherv of the ranks' counts
  as padded for the gather, dp_attention.py:395-411), then reduce-scatters the bf16 expert outputs back
  (standard.py:288-300 reduce_scatterv). Those counts are padded: a CUDA-graph decode step (the default;
  under attention DP without an all-to-all backend utils/common.py:4079-4096 require_mlp_tp_gather) runs
  every rank at the captured batch size of the busiest rank (decode_cuda_graph_runner.py:1623-1626,
  :740-745 [num_tokens] * num_dp_ranks), so the gather and the reduce-scatter move attention DP x
  ceil(b / attention DP) rows (dp_padded_rows; a bucket above the busiest rank's count moves more; an eager
  SUM_LEN step would move the b rows).
- Attention DP without an all-to-all backend: before the MLP/MoE the DP ranks' tokens are gathered over
  TP and after it reduced back (dp_attention.py:987-1043 _dp_gather, :1080 dp_scatter, :1120
  dp_reduce_scatter_tensor). sglang picks one of two modes (DpPaddingMode, dp_attention.py:152-219):
  SUM_LEN gathers with an all-reduce of the summed buffer and reduces with a second all-reduce;
  MAX_LEN pads every rank to the largest and uses an all-gather then a reduce-scatter. At a CUDA-graph
  decode step (the default) every rank's count is already the busiest's captured batch
  (decode_cuda_graph_runner.py:1623-1626, :740-745; :1215-1217 the mode: SUM_LEN while the custom
  all-reduce holds the padded sum, dp_attention.py:207-243), so SUM_LEN's buffer is as padded as MAX_LEN's
  and its two all-reduces move twice the bytes: the roofline takes the cheaper, MAX_LEN's bytes (a bound;
  only an eager step sums the unpadded rows).

- lm_head under attention DP without enable_dp_lm_head (logits_processor.py:483-489
  do_tensor_parallel_all_gather_dp_attn): the DP ranks' last hidden states (bf16, the model dtype:
  dp_attention.py:486-495) are gathered into one buffer by an all-reduce over TP (the logits metadata forces
  SUM_LEN, logits_processor.py:419; _gather_dp_attn_hidden_states :1216-1242 -> dp_gather_replicate,
  dp_attention.py:1065 -> _dp_gather_via_all_reduce :661-713), and every GPU runs lm_head on all of them
  against its vocab/TP shard. A CUDA-graph decode step (the default) pads every DP rank to the captured
  batch size (decode_cuda_graph_runner.py:740-745 [num_tokens] * num_dp_ranks, :1154-1162 the buffer is
  their sum), at least the busiest rank's ceil(b / attention DP): the roofline takes attention DP x that
  (lm_head_rows; an eager step would gather the b rows). With enable_dp_lm_head the vocab is split over
  attention TP (vocab_parallel_embedding.py:258-263) and each rank runs its own rows: no gather.

- Decode context parallelism (dcp_size N inside attention TP; 0.5.23 layers/dcp/comm.py): each DCP rank
  attends over its 1/N of the tokens with the group's N x heads/attn_tp query heads, so per layer the
  queries are all-gathered over the group (MLA: absorbed q_nope + q_pe, forward_mla.py:664-670, skipped under
  dcp_replicate_q_proj; GQA: the triton backend, triton_backend.py:2422-2470) and the partial outputs
  merged: a2a / fi_a2a one all-to-all of bf16 outputs with their LSE packed in (dcp_a2a_lse_reduce,
  comm.py:474-537), ag_rs an fp32 LSE all-gather and an fp32 reduce-scatter of the outputs (MLA,
  cp_lse_ag_out_rs_mla, comm.py:85-123) or all-reduce (GQA, cp_lse_ag_out_rs_mha, comm.py:56-82).

Each collective costs the GPU table's latency plus its bytes per GPU over the link (ring traffic:
all-reduce 2(N-1)/N x message, reduce-scatter and all-gather (N-1)/N x the whole buffer).
"""

from __future__ import annotations

from dataclasses import dataclass

from toolkit.roofline.inputs import ACT_BYTES, RooflineInputs

# Bytes per hidden element a dispatch sends, scales included: fp8 with one fp32 scale per 128 (DeepEP's
# low-latency FP8 dispatch), NVFP4 with one fp8 scale per 16, MX formats with one e8m0 scale per 32.
DISPATCH_BYTES = {"bf16": 2.0, "fp8": 1 + 4 / 128, "nvfp4": 0.5 + 1 / 16, "mxfp4": 0.5 + 1 / 32, "mxfp8": 1 + 1 / 32}
COMBINE_BYTES = float(ACT_BYTES)  # the combine returns bf16 expert outputs
TOPK_BYTES = 4 + 4  # per routed copy in the FP4 all-gather: an fp32 top-k weight and an int32 expert id


@dataclass(frozen=True)
class AllReduceCost:
    """The whole communication term of a step (all-reduces, DP gathers/scatters, all-to-alls)."""

    count: int  # collectives per step
    message_bytes: float  # one all-reduce of the b tokens' hidden states (hidden * 2 B * b)
    ring_factor: float  # bytes_per_gpu / (count * message_bytes)
    bytes_per_gpu: float  # whole step, sent by the busiest GPU
    latency_s: float  # whole step: count * per-collective latency
    transfer_s: float  # whole step: bytes_per_gpu / link_bw
    parts: tuple[tuple[str, int, float], ...] = ()  # (what, collectives per step, bytes per GPU per step)

    @property
    def time_s(self) -> float:
        return self.latency_s + self.transfer_s

    def part_time_s(self, index: int) -> float:
        """Seconds of one part: its collectives' latency plus its bytes over the link."""
        _, n, nbytes = self.parts[index]
        return (n * self.latency_s / self.count if self.count else 0.0) + (
            nbytes * self.transfer_s / self.bytes_per_gpu if self.bytes_per_gpu else 0.0)

    @property
    def costliest(self) -> str:
        """The part that takes the most time, by name without its DP padding mode ("" without collectives)."""
        if not self.parts:
            return ""
        i = max(range(len(self.parts)), key=self.part_time_s)
        return split_mode(self.parts[i][0])[0]


DP_MODES = ("SUM_LEN", "MAX_LEN")
DCP_COMMS = ("a2a", "fi_a2a", "ag_rs")  # sglang 0.5.23's --dcp-comm-backend choices (fields/parallel.py:127-139)


def split_mode(what: str) -> tuple[str, str]:
    """("MoE DP gather + scatter", "SUM_LEN") from "MoE DP gather + scatter (SUM_LEN)"; (what, "") otherwise:
    a part's name is the same at every batch, its attention-DP padding mode may not be."""
    for mode in DP_MODES:
        if what.endswith(f" ({mode})"):
            return what[: -len(mode) - 3], mode
    return what, ""


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _all_reduce(size: int, nbytes: float) -> float:
    """Ring all-reduce traffic per GPU of an `nbytes` buffer over `size` GPUs: 2(N-1)/N of it."""
    return 2 * (size - 1) / size * nbytes


def _gather(size: int, nbytes: float) -> float:
    """Ring all-gather (or reduce-scatter) traffic per GPU of the whole `nbytes` buffer: (N-1)/N of it."""
    return (size - 1) / size * nbytes


def _align(rows: int, to: int) -> int:
    return _ceil(rows, to) * to if to > 1 else rows


def slot_rows(inputs: RooflineInputs, b: int) -> int:
    """Tokens on the busiest attention-DP rank (b spread evenly over the DP ranks)."""
    return _ceil(b, inputs.attn_dp) if inputs.attn_dp > 1 else b


def dp_padded_rows(inputs: RooflineInputs, b: int) -> int:
    """Rows of a buffer gathered from every attention-DP rank at a CUDA-graph decode step: each rank padded to the
    busiest's ceil(b / attention DP) (the smallest captured batch that holds it)."""
    return inputs.attn_dp * slot_rows(inputs, b)


def lm_head_rows(inputs: RooflineInputs, b: int) -> int:
    """Rows lm_head runs on at batch b: the rank's own without attention DP or with enable_dp_lm_head, else the
    DP ranks' gathered buffer (dp_padded_rows)."""
    if inputs.attn_dp == 1 or inputs.dp_lm_head:
        return slot_rows(inputs, b)
    return dp_padded_rows(inputs, b)


def dp_gather_scatter(inputs: RooflineInputs, b: int) -> tuple[str, int, float]:
    """(mode, collectives, bytes per GPU) of one attention-DP gather before an FFN and its reduction after,
    over the TP group: the cheaper of SUM_LEN (two all-reduces of the summed, attention-TP-aligned rows) and
    MAX_LEN (all-gather and reduce-scatter of every rank padded to the largest), every rank's count being the
    busiest's ceil(b / attention DP) as a CUDA-graph decode step pads it (dp_padded_rows)."""
    n, dp, atp, h = inputs.tp, inputs.attn_dp, inputs.attn_tp, inputs.model.hidden * ACT_BYTES
    max_len = _align(slot_rows(inputs, b), atp)
    sum_len = dp * max_len
    sum_bytes = 2 * _all_reduce(n, sum_len * h)
    max_bytes = 2 * _gather(n, dp * max_len * h)
    return ("SUM_LEN", 2, sum_bytes) if sum_bytes < max_bytes else ("MAX_LEN", 2, max_bytes)


def a2a_bytes(inputs: RooflineInputs, b: int) -> float:
    """Dispatch + combine bytes the busiest GPU sends per MoE layer: its tokens' top-k copies that go to
    other EP ranks, the dispatch at its dtype and the combine in bf16."""
    m = inputs.model
    tokens = _ceil(slot_rows(inputs, b), inputs.attn_tp)
    copies = tokens * m.top_k * (inputs.ep - 1) / inputs.ep
    return copies * m.hidden * (DISPATCH_BYTES[inputs.a2a_dispatch] + COMBINE_BYTES)


def fp4_allgather_bytes(inputs: RooflineInputs, b: int) -> float:
    """Bytes per GPU of one MoE layer's FP4 all-gather path: every DP rank's rows, padded as a CUDA-graph decode pads
    them (dp_padded_rows), gathered over TP (NVFP4 hidden states with their scales, top-k weights and ids) and their
    bf16 outputs reduce-scattered back."""
    m, n, rows = inputs.model, inputs.tp, dp_padded_rows(inputs, b)
    gathered = rows * (m.hidden * DISPATCH_BYTES["nvfp4"] + m.top_k * TOPK_BYTES)
    return _gather(n, gathered) + _gather(n, rows * m.hidden * COMBINE_BYTES)


def dcp_parts(inputs: RooflineInputs, b: int) -> list[tuple[str, int, float]]:
    """The DCP group's per-step exchange (see the module docstring): Q all-gather and output merge, per layer."""
    m, n, layers = inputs.model, inputs.dcp, inputs.model.layers
    rows, heads = slot_rows(inputs, b), m.heads / inputs.attn_tp  # this rank's tokens and query heads
    group_heads = n * heads
    out: list[tuple[str, int, float]] = []
    if inputs.dcp_q_gathered:
        q_dim = m.attn_score_dim  # MLA absorbed: kv_lora + rope; GQA: head_dim
        out.append(("DCP query all-gather", layers, layers * _gather(n, n * rows * heads * q_dim * ACT_BYTES)))
    lse = _gather(n, n * rows * group_heads * 4)  # every rank's fp32 LSE of the group's heads
    if inputs.dcp_comm in ("a2a", "fi_a2a") and m.is_mla:
        packed = n * rows * heads * (m.attn_value_dim + 2) * ACT_BYTES  # LSE as 2 bf16 columns (comm.py:497-503)
        out.append((f"DCP output all-to-all ({inputs.dcp_comm})", layers, layers * _gather(n, packed)))
    elif m.is_mla:
        rs = _gather(n, rows * group_heads * m.attn_value_dim * 4)
        out.append(("DCP LSE all-gather + output reduce-scatter (fp32)", 2 * layers, layers * (lse + rs)))
    else:
        ar = _all_reduce(n, rows * group_heads * m.attn_value_dim * 4)
        out.append(("DCP LSE all-gather + output all-reduce (fp32)", 2 * layers, layers * (lse + ar)))
    return out


def comm_cost(inputs: RooflineInputs, b: int) -> AllReduceCost:
    """The step's collectives at batch b: per layer, by what it runs (see the module docstring)."""
    m, g = inputs.model, inputs.gpu
    h = m.hidden * ACT_BYTES
    atp, slot = inputs.attn_tp, slot_rows(inputs, b)
    a2a = inputs.moe_a2a != "none" and m.is_moe
    parts: list[tuple[str, int, float]] = []

    if inputs.decode_attn_tp > 1:  # o_proj's all-reduce: over attention TP (x CP under CP decode attention TP)
        ar_layers = m.layers - (m.moe_layers if a2a and atp > 1 else 0)
        if ar_layers:
            parts.append(("attention all-reduce", ar_layers, ar_layers * _all_reduce(inputs.decode_attn_tp, slot * h)))
    if atp > 1 and a2a and m.moe_layers:
        rows = _align(slot, atp)
        parts.append(("attention reduce-scatter + all-gather", 2 * m.moe_layers, m.moe_layers * 2 * _gather(atp, rows * h)))
    if m.moe_layers and m.is_moe:
        if a2a:
            parts.append((f"MoE {inputs.moe_a2a} dispatch ({inputs.a2a_dispatch}) + combine (bf16)",
                          2 * m.moe_layers, m.moe_layers * a2a_bytes(inputs, b)))
        elif inputs.fp4_allgather:
            parts.append(("MoE FP4 all-gather (nvfp4) + reduce-scatter (bf16)", 2 * m.moe_layers,
                          m.moe_layers * fp4_allgather_bytes(inputs, b)))
        elif inputs.attn_dp > 1:
            mode, n, nbytes = dp_gather_scatter(inputs, b)
            parts.append((f"MoE DP gather + scatter ({mode})", n * m.moe_layers, nbytes * m.moe_layers))
        elif inputs.moe_group > 1:
            parts.append(("MoE all-reduce", m.moe_layers, m.moe_layers * _all_reduce(inputs.moe_group, b * h)))
    if inputs.dcp > 1:
        parts.extend(dcp_parts(inputs, b))
    if m.dense_layers and inputs.mlp_tp > 1:
        if inputs.attn_dp > 1 and inputs.mlp_tp == atp:
            parts.append(("dense MLP all-reduce", m.dense_layers, m.dense_layers * _all_reduce(atp, slot * h)))
        elif inputs.attn_dp > 1:
            mode, n, nbytes = dp_gather_scatter(inputs, b)
            parts.append((f"dense MLP DP gather + scatter ({mode})", n * m.dense_layers, nbytes * m.dense_layers))
        else:
            parts.append(("dense MLP all-reduce", m.dense_layers, m.dense_layers * _all_reduce(inputs.mlp_tp, b * h)))
    if inputs.attn_dp > 1 and not inputs.dp_lm_head:
        parts.append(("lm_head DP gather (all-reduce)", 1, _all_reduce(inputs.tp, lm_head_rows(inputs, b) * h)))
    count = sum(n for _, n, _ in parts)
    total = sum(x for _, _, x in parts)
    message = m.hidden * ACT_BYTES * b
    return AllReduceCost(
        count=count,
        message_bytes=float(message),
        ring_factor=total / (count * message) if count else 0.0,
        bytes_per_gpu=total,
        latency_s=count * inputs.latency_us * 1e-6,
        transfer_s=total / (g.link_bw_gbps * 1e9) if count else 0.0,
        parts=tuple(parts),
    )
