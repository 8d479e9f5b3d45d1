"""What a roofline is computed from: model shape, GPU, weight formats, parallelism, batch sizes.

Parallelism is sglang's (0.5.23 `srt/runtime_context.derive_parallel_widths`): the TP group of `tp`
GPUs runs attention over attn_tp = tp / attn_dp / attn_cp GPUs (attention weights replicated across
the attention-DP and -CP groups) and the routed experts over EP: each of the `ep` expert groups holds
E/ep whole experts, each sliced over moe_tp = tp / ep GPUs. Dense MLP layers are split over
`dense_tp` (sglang's `moe_dense_tp_size`; None: tp, 1: replicated), the lm_head over tp (or attn_tp
with `dp_lm_head`, sglang's `enable_dp_lm_head`). `pp` stages and `dp` replicas change no GPU's
bytes per token of one sequence: they are recorded so the assumptions say so.

MoE data parallelism (sglang's `moe_dp_size`, 0.5.23 srt/runtime_context.py derive_parallel_widths:
moe_tp_size = tp_size // moe_ep_size // moe_dp_size) splits the TP group into `moe_dp` groups of
tp / moe_dp GPUs; each holds every expert (E/ep per EP rank, sliced over moe_tp = tp / ep / moe_dp) and
runs the MoE on its attention-CP rank's rows (srt/arg_groups/parallel_hook.py allows moe_dp > 1 only with
moe_dp == attn_cp_size; srt/distributed/parallel_state.py builds the MoE-DP group): at decode those are
all b tokens, as CP splits only a prefill's tokens (moe_tokens).
Decode context parallelism (sglang's `dcp_size`, 0.5.23 runtime_context.py: attn_dcp_size, inside the
attention-TP group) leaves every weight where it was and splits each sequence's KV cache: a DCP group's
`dcp` ranks hold the same KV heads (heads split over attn_tp / dcp groups: configs/model_config.py
get_num_kv_heads) and each stores 1/dcp of the tokens (pages interleaved across the group; DSA's top-k
reads are localised per rank: layers/attention/dsa/dsa_dcp.py). The attention FLOPs per GPU stay the
same (all the group's query heads over 1/dcp of the tokens).
The shared experts of a DeepSeek-style MoE are split over `shared_tp` GPUs (None: tp; 1: replicated on every
rank, as sglang 0.5.23 builds them under an all-to-all MoE backend or the FlashInfer FP4 all-gather:
models/deepseek_v2.py DeepseekV2MoE, `parallel_group="replicated"`; toolkit.run.parallel_layout reads which).
Under an all-to-all MoE backend (`moe_a2a`, sglang's moe_a2a_backend) the MoE layer's traffic is a dispatch
(at `a2a_dispatch`) and combine of the routed tokens, not an all-reduce; under the FlashInfer cutlass FP4
all-gather (`fp4_allgather`) an NVFP4 all-gather of the DP ranks' tokens and a bf16 reduce-scatter back:
toolkit.roofline.comm.
"""

from __future__ import annotations

from dataclasses import dataclass

from toolkit.roofline.configs import GpuSpec, ModelShape
from toolkit.roofline.formats import WeightFormats

SHARDINGS = ("even", "sglang")
ACT_BYTES = 2  # all-reduce payload: bf16 activations
DCP_Q_REPLICABLE = ("bf16", "fp16", "fp8")  # attention formats whose q_b_proj / w_kc dcp_replicate_q_proj gathers


@dataclass(frozen=True)
class RooflineInputs:
    model: ModelShape
    gpu: GpuSpec
    weights: WeightFormats
    tp: int = 1
    ep: int = 1
    batches: tuple[int, ...] = (1,)
    context: int = 0  # tokens already in each sequence's KV cache
    kv_dtype: str = "bf16"
    allreduce_latency_us: float | None = None  # None: the GPU table's value
    sharding: str = "even"  # "even": every weight byte / TP; "sglang": replicate what sglang does
    attn_dp: int = 1  # attention data-parallel groups within TP (sglang's attn_dp_size)
    attn_cp: int = 1  # attention context-parallel groups within TP (sglang's attn_cp_size)
    pp: int = 1  # pipeline stages: a token passes through all of them in turn
    dp: int = 1  # data-parallel replicas of the whole server: one sequence runs on one
    dense_tp: int | None = None  # GPUs a dense MLP layer is split over (None: tp; 1: replicated)
    dp_lm_head: bool = False  # lm_head split over the attention-TP group instead of TP
    moe_dp: int = 1  # MoE data-parallel groups within TP (sglang's moe_dp_size): each holds all experts
    shared_tp: int | None = None  # GPUs a shared expert is split over (None: tp; 1: replicated)
    dcp: int = 1  # decode context parallelism inside attention TP (sglang's dcp_size): KV tokens split dcp ways
    moe_a2a: str = "none"  # sglang's moe_a2a_backend: "none", or the all-to-all that dispatches/combines MoE tokens
    a2a_dispatch: str = "bf16"  # the dtype the all-to-all dispatches hidden states in (toolkit.roofline.comm)
    fp4_allgather: bool = False  # the FlashInfer cutlass FP4 all-gather MoE path (toolkit.roofline.comm)
    dcp_comm: str = "a2a"  # sglang's dcp_comm_backend: how DCP ranks merge partial attention outputs
    dcp_replicate_q: bool | None = None  # sglang's dcp_replicate_q_proj (None: its default, dcp_q_gathered)
    cp_attn_tp: bool = False  # sglang's enable_cp_decode_attn_tp: attention weights sliced over the CP ranks at decode
    dwdp: int = 1  # sglang's dwdp_size (refused: toolkit.roofline.model.validate)

    @property
    def attn_tp(self) -> int:
        """GPUs one attention layer's weights are split over."""
        return max(self.tp // (self.attn_dp * self.attn_cp), 1)

    @property
    def decode_attn_tp(self) -> int:
        """GPUs one attention layer's head-split weights (MLA q_b_proj, kv_b's w_kc/w_vc, o_proj) are sliced over at
        decode: attention TP, times the CP ranks under enable_cp_decode_attn_tp (0.5.23 layers/cp/
        cp_decode_attn_tp.py:53-75, models/deepseek_v2.py:2265-2289: q_b_proj, o_proj, w_kc, w_vc and the heads sliced
        over attn_cp ranks; o_proj then all-reduces, layers/linear.py:1803-1823). Without CP it does nothing."""
        return self.attn_tp * self.attn_cp if self.cp_attn_tp and self.attn_cp > 1 else self.attn_tp

    @property
    def moe_tp(self) -> int:
        """GPUs one routed expert is sliced over (tp / ep / moe_dp)."""
        return max(self.tp // self.ep // self.moe_dp, 1)

    @property
    def moe_group(self) -> int:
        """GPUs one MoE-DP group holds every expert over (tp / moe_dp): its MoE output is reduced there."""
        return max(self.tp // self.moe_dp, 1)

    @property
    def shared_experts_tp(self) -> int:
        """GPUs a shared expert is split over."""
        return self.tp if self.shared_tp is None else self.shared_tp

    def moe_tokens(self, b: int) -> int:
        """Tokens a MoE-DP group's experts see at decode batch b: all b. Only a context-parallel extend splits a
        batch's tokens over the attention-CP ranks (0.5.23 layers/layer_boundary/layout.py:206-214
        _batch_shards_over_cp; layers/cp/utils.py:121-135 is_cp_active): at decode every CP rank, so every
        MoE-DP group (moe_dp == attn_cp), runs the same b tokens, and sums them over its own GPUs."""
        return b

    @property
    def kv_tp(self) -> int:
        """Groups a layer's KV heads are split over: attention TP / DCP (the DCP ranks of a group hold the
        same heads, each 1/dcp of the tokens; 0.5.23 configs/model_config.py get_num_kv_heads)."""
        return max(self.attn_tp // self.dcp, 1)

    @property
    def dcp_q_gathered(self) -> bool:
        """Whether an MLA layer all-gathers its queries over the DCP group: unless dcp_replicate_q_proj, which
        0.5.23 turns on by default for DSA models under the a2a/fi_a2a exchange (arg_groups/model_overrides/
        deepseek_v2.py:32-33) and allows only there (arg_groups/parallel_hook.py:265-273). Even then a layer whose
        q_b_proj is neither unquantized 16-bit nor block FP8 (NVFP4, MXFP4) or whose w_kc is not 16-bit (fp32) keeps
        the all-gather: model_executor/model_runner.py:1146-1157 skips it (FP8 checkpoints' w_kc is dequantized to
        bf16, deepseek_weight_loader.py:690-707)."""
        replicable = self.weights.of("attention") in DCP_Q_REPLICABLE
        return not (self.dcp_replicate_requested and replicable)

    @property
    def dcp_replicate_requested(self) -> bool:
        """sglang's resolved dcp_replicate_q_proj for an MLA model (None: its default, see dcp_q_gathered)."""
        replicate = self.dcp_replicate_q
        if replicate is None:
            replicate = bool(self.model.index_topk) and self.dcp_comm in ("a2a", "fi_a2a")
        return bool(replicate) and self.model.is_mla

    @property
    def mlp_tp(self) -> int:
        """GPUs a dense MLP layer is split over."""
        return self.tp if self.dense_tp is None else self.dense_tp

    @property
    def lm_head_tp(self) -> int:
        return self.attn_tp if self.dp_lm_head else self.tp

    @property
    def latency_us(self) -> float:
        """Per all-reduce latency: the override, else the GPU table's value."""
        if self.allreduce_latency_us is not None:
            return float(self.allreduce_latency_us)
        return self.gpu.allreduce_latency_us
