"""Kernel-family analysis of profiler traces: classification of real sglang 0.5.23 kernel names,
per-step breakdown arithmetic, floors from the roofline, the kernel diff and the stacked bar."""

from __future__ import annotations

import gzip
import json

import pytest

from toolkit.profile.breakdown import breakdown, classified_share, decode_stage, idle_only, kernels
from toolkit.profile.diff import kernel_diff
from toolkit.profile.families import OTHER, classify, load_families
from toolkit.profile.floors import component_floors_ms, family_floors_ms, floor_spec
from toolkit.profile.render import floor_lines, step_check
from toolkit.profile.trace import load_trace

# Kernel names as they appear in torch profiler traces of sglang 0.5.23 decode on NVIDIA GPUs
# (FlashInfer, sgl-kernel, TensorRT-LLM MoE, CUTLASS, cuBLAS, NCCL, PyTorch), with a share of a
# GLM-5/DeepSeek-like NVFP4 decode step (microseconds per step) and the family the rules must give.
SGLANG_0523_KERNELS = [
    ("void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cutlass::gemm::GroupProblemShape<cute::tuple<int, int, int> >, "
     "cutlass::gemm::collective::CollectiveMma<cutlass::gemm::MainloopSm120TmaWarpSpecializedBlockScaled<3, 2>, "
     "cute::tuple<cute::C<128>, cute::C<128>, cute::C<128> >, cutlass::nv_float4_t<cutlass::float_e2m1_t> > > >", 4100, "moe_gemm"),
    ("void tensorrt_llm::kernels::cutlass_kernels::expandInputRowsKernel<__nv_bfloat16, __nv_fp4_e2m1, 2, false>", 180, "moe_gemm"),
    ("void tensorrt_llm::kernels::cutlass_kernels::finalizeMoeRoutingKernel<__nv_bfloat16, __nv_bfloat16, 1, false>", 160, "moe_gemm"),
    ("void tensorrt_llm::kernels::cutlass_kernels::doActivationKernel<__nv_bfloat16, __nv_fp4_e2m1>", 120, "moe_gemm"),
    ("fused_moe_kernel", 90, "moe_gemm"),
    ("void moe_fused_gate_kernel<float, 256, 8, 1, 32, 8, 1>(void*, void*, float*, int*, long, long, long, long, double)", 95, "moe_routing"),
    ("void biased_grouped_topk_kernel<__nv_bfloat16>", 40, "moe_routing"),
    ("void moe_align_block_size_kernel<int>(int*, int*, int*, int*, int, int, int, unsigned long)", 30, "moe_routing"),
    ("void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, int, int>, "
     "cutlass::gemm::collective::CollectiveMma<cutlass::gemm::MainloopSm120TmaWarpSpecializedBlockScaled<4, 2>, "
     "cutlass::nv_float4_t<cutlass::float_e2m1_t> > > >", 1500, "gemm_fp4"),
    ("void flashinfer::gemm::cutlass_fp4_gemm_sm120<cutlass::bfloat16_t, CtaShape128x128x128B>", 300, "gemm_fp4"),
    ("void deep_gemm::fp8_gemm_kernel<128u, 128u, 128u, 1u, 8u, 4u, 2u>", 400, "gemm_fp8"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas", 350, "gemm_bf16"),
    ("nvjet_tst_128x64_64x8_1x1_v_bz_coopA_NNT", 260, "gemm_bf16"),
    ("void flashinfer::BatchDecodeWithPagedKVCacheKernel<(flashinfer::PosEncodingMode)0, 2u, 16u, 8u, 16u, 1u, 8u, "
     "flashinfer::DefaultAttention<false, false, false, false>, flashinfer::BatchDecodeParams<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, int> >", 620, "attention"),
    ("void flash_fwd_splitkv_mla_kernel<Flash_fwd_kernel_traits_mla<576, 64, 64, 8, cutlass::bfloat16_t, 512>, true>", 540, "attention"),
    ("void flash_fwd_mla_combine_kernel<cutlass::bfloat16_t, float, 512, 64>", 60, "attention"),
    ("void flashinfer::MergeStatesKernel<8u, 16u, 8u, 4u, __nv_bfloat16, __nv_bfloat16>", 30, "attention"),
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 900, "allreduce"),
    ("void sglang::cross_device_reduce_1stage<__nv_bfloat16, 8>(sglang::RankData*, sglang::RankSignals, sglang::Signal*, __nv_bfloat16*, int, int)", 700, "allreduce"),
    ("void sglang::cross_device_reduce_2stage<__nv_bfloat16, 8>(sglang::RankData*, sglang::RankSignals, sglang::Signal*, __nv_bfloat16*, int, int)", 200, "allreduce"),
    ("void cvt_fp16_to_fp4<__nv_bfloat16, false>(int, int, __nv_bfloat16 const*, float const*, unsigned int*, unsigned int*)", 150, "quant"),
    ("void per_token_group_quant_8bit_kernel<__nv_bfloat16, c10::Float8_e4m3fn, false>", 60, "quant"),
    ("void flashinfer::norm::FusedAddRMSNormKernel<8u, __nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16*, unsigned int, unsigned int, unsigned int, float, float)", 230, "norm_act"),
    ("void flashinfer::norm::RMSNormKernel<8u, __nv_bfloat16>", 80, "norm_act"),
    ("void flashinfer::activation::act_and_mul_kernel<__nv_bfloat16, &silu>(__nv_bfloat16*, __nv_bfloat16 const*, int)", 70, "norm_act"),
    ("void flashinfer::BatchQKApplyRotaryPosIdsCosSinCacheKernel<true, 64u, 8u, 16u, __nv_bfloat16, long>", 50, "norm_act"),
    ("void flashinfer::sampling::TopKTopPSamplingFromProbKernel<1024u, (cub::BlockScanAlgorithm)2, (cub::BlockReduceAlgorithm)2, 4u, true, float, int>", 45, "sampling"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, at::native::(anonymous namespace)::SoftMaxForwardEpilogue>", 25, "sampling"),
    ("Memcpy DtoD (Device -> Device)", 40, "copies"),
    ("Memset (Device)", 10, "copies"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<int>, at::detail::Array<char*, 1> >", 30, "copies"),
    ("void at::native::index_elementwise_kernel<128, 4, at::native::gpu_index_kernel<at::native::index_kernel_impl<at::native::OpaqueType<2> > > >", 35, "copies"),
    ("triton_poi_fused_add_mul_0", 120, OTHER),  # a torch.compile kernel: not ours to guess
]
STEP_GAP_US = 400.0  # idle on the GPU per step (launch gaps)
# The kernels GLM-5's decode step launches on SM120 in sglang 0.5.23 with FlashInfer 0.7.2 that the
# first table missed, named as their sources define them (DSA indexer: DeepGEMM's paged MQA logits and
# sglang's deepseek_v4/topk_v2.cuh; router: moe_fused_gate.py's Triton kernel, tiny_gemm.cuh;
# cutlass_fused_moe_kernels.cuh's expert maps; the MLA and indexer KV-cache writes; the PCIe IPC all-reduce).
GLM5_SM120_KERNELS = [
    ("void deep_gemm::sm120_fp8_paged_mqa_logits_reference<32u, 128u, 64u, false, 256u, float>(unsigned int)", "attention"),
    ("void deep_gemm::smxx_paged_mqa_logits_metadata<64u, 32u, 132u>(unsigned int, unsigned int const*, unsigned int*)",
     "attention"),  # "logits" made these sampling
    ("void sglang::topk_main_kernel<true, 0, (sglang::TopKMode)1>(sglang::TopKPagedParams)", "attention"),
    ("void sglang::topk_persistent_cluster_kernel<true, 8u>(sglang::TopKPagedParams)", "attention"),
    ("sglang::topk_split_hist(sglang::TopKPagedParams, sglang::SplitWorkspace)", "attention"),
    ("void sglang::fused_store_indexer_cache<__nv_bfloat16, long, 6u, true>(sglang::FusedStoreCacheParam)", "attention"),
    ("void set_mla_kv_buffer_kernel<1024, 128, true>(SetMlaKVBufferParams)", "attention"),
    ("_quantize_k_cache_fast_kernel", "attention"),
    ("_router_triton_kernel", "moe_routing"),
    ("void sglang::tiny_n_gemm_kernel<sglang::GEMMTraitN<256u, 6144u, 16u, 1u, float, true, __nv_bfloat16> >"
     "(sglang::TinyGEMMParams)", "moe_routing"),
    ("void tensorrt_llm::kernels::deepseek_v3_topk_kernel<float, float, int, float, true, false>(float*)", "moe_routing"),
    ("void tensorrt_llm::kernels::cutlass_kernels::fusedBuildExpertMapsSortFirstTokenKernel<64, 9, 9>(int const*, int*)",
     "moe_routing"),  # "cutlass" made these dense BF16 GEMMs
    ("void tensorrt_llm::kernels::cutlass_kernels::globalExpertPrefixSumKernel<1024>(int const*, int*, long*, long)",
     "moe_routing"),
    ("void flashinfer::comm::pcie_ipc::ipc_topo_rsag8_push_param_kernel<__nv_bfloat16, 8>(flashinfer::comm::pcie_ipc::Params)",
     "allreduce"),
]


def _gpu_trace(path, steps: int = 3, batch: int = 8, ranks=(0,), stage: str = "DECODE"):
    """Chrome traces laid out like sglang 0.5.23's (GPU kernels on a stream, step spans on both sides)."""
    out = []
    for rank in ranks:
        events, ts = [], 1_000.0
        for s in range(steps):
            start = ts
            for name, dur, _ in SGLANG_0523_KERNELS:
                events.append({"ph": "X", "cat": "kernel", "name": name, "pid": rank, "tid": 7, "ts": ts, "dur": dur,
                               "args": {"grid": [132, 1, 1], "block": [128, 1, 1]}})
                ts += dur
            ts += STEP_GAP_US
            span = {"ph": "X", "name": f"step[{stage} bs={batch}]", "ts": start, "dur": ts - start, "pid": rank}
            events.append({**span, "cat": "gpu_user_annotation", "tid": 7})
            events.append({**span, "cat": "user_annotation", "tid": 1, "dur": 300.0})
            events.append({"ph": "X", "cat": "cpu_op", "name": "aten::empty", "pid": rank, "tid": 1, "ts": start, "dur": 5})
        p = path / f"patchbench-x-TP-{rank}.trace.json.gz"
        with gzip.open(p, "wt") as fh:
            json.dump({"schemaVersion": 1, "traceEvents": events, "deviceProperties": [{"name": "NVIDIA RTX PRO 6000"}]}, fh)
        out.append(p)
    return out


def test_sglang_0523_kernel_names_classified(tmp_path):
    fams = load_families()
    wrong = [(n[:60], want, classify(fams, n)) for n, _, want in SGLANG_0523_KERNELS if classify(fams, n) != want]
    assert not wrong
    trace = load_trace(_gpu_trace(tmp_path)[0])
    assert trace.has_gpu_kernels and trace.rank == 0
    share = classified_share(trace, fams)
    assert share >= 0.95, share


@pytest.mark.parametrize("name, family", GLM5_SM120_KERNELS)
def test_glm5_sm120_decode_kernels_are_in_their_family(name, family):
    assert classify(load_families(), name) == family


def test_breakdown_sums_to_the_step_per_rank(tmp_path):
    fams = load_families()
    for i, path in enumerate(_gpu_trace(tmp_path, steps=4, ranks=(0, 1))):
        b = breakdown(load_trace(path), fams)
        assert b.rank == i and b.mode == "gpu" and len(b.steps) == 4
        kernel_us = sum(d for _, d, _ in SGLANG_0523_KERNELS)
        assert b.step_ms == pytest.approx((kernel_us + STEP_GAP_US) / 1e3)
        ms = b.family_ms()
        assert sum(ms.values()) == pytest.approx(b.step_ms)
        assert ms["idle"] == pytest.approx(STEP_GAP_US / 1e3)
        assert ms["moe_gemm"] == pytest.approx((4100 + 180 + 160 + 120 + 90) / 1e3)
        assert next(iter(ms)) == "moe_gemm"  # largest first
        assert b.counts_per_step()["allreduce"] == 3
        assert "grid" in next(iter(b.shapes["moe_gemm"]))
        check = step_check(b.to_dict(), itl_ms=b.step_ms * 1.05)
        assert abs(check["sum_vs_step"]) < 1e-9 and check["step_vs_itl"] == pytest.approx(1 / 1.05 - 1)


# Real sglang 0.5.23 on CPU (`patchbench profile` of recipes/cpu/baseline, 8 steps at batch 8, an idle
# 2-core box, 2026-12-06): the first recorded decode step and its aten::linear time, then the next seven
REAL_CPU_STEPS_MS = [(100.6, 77.9), (16.7, 3.5), (9.6, 2.3), (9.3, 2.6), (11.4, 4.5), (8.5, 2.0), (11.0, 2.2), (19.5, 6.1)]


def test_the_first_recorded_step_the_profilers_start_up_is_left_out(tmp_path):
    """torch's profiler pays its start-up in the first step it traces: on real sglang 0.5.23 that step
    took 100.6 ms against 8.5-19.5 ms for the next seven, so the mean over the 8 gave 23.3 ms a step and
    GEMMs 12.6 ms a step (3.3 over the seven), and `profile` said "trace step +93% vs" the ITL of the
    recorded steps (12.1 ms). `profile` now records one step more and the breakdown leaves the first out,
    saying so; the ITL window leaves its arrival out too."""
    from toolkit.profile import window
    from toolkit.profile.render import render
    from toolkit.profile.session import WARMUP_STEPS, summarize

    events, ts = [], 0.0
    for step_ms, gemm_ms in REAL_CPU_STEPS_MS:
        dur = step_ms * 1e3
        events.append({"ph": "X", "cat": "user_annotation", "name": "step[DECODE bs=8]", "ts": ts, "dur": dur,
                       "pid": 0, "tid": 1})
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::linear", "ts": ts + 10, "dur": gemm_ms * 1e3,
                       "pid": 0, "tid": 1})
        ts += dur + 2000.0
    path = tmp_path / "patchbench-x-TP-0.trace.json.gz"
    with gzip.open(path, "wt") as fh:
        json.dump({"schemaVersion": 1, "traceEvents": events}, fh)
    assert WARMUP_STEPS == 1
    summary = summarize([path], load_families(), 12.1)
    (rank,) = summary["ranks"]
    kept = REAL_CPU_STEPS_MS[1:]
    assert rank["steps"] == 7 and rank["warmup_ms"] == pytest.approx([100.6])
    assert rank["step_ms"] == pytest.approx(sum(s for s, _ in kept) / 7)  # 12.29 ms, not 23.3
    assert rank["family_ms"]["gemm_bf16"] == pytest.approx(sum(g for _, g in kept) / 7)
    lines = [x for x in render("cpu/baseline", load_families(), summary, None) if isinstance(x, str)]
    assert "first recorded step left out (the profiler's start-up): 100.60 ms, against 12.29 ms a step over the 7 kept" \
        in lines
    # the ITL window: arrival 1 is the step in flight, 2 the start-up step's, 3.. the kept steps'
    gaps = [12.0] * 3 + [100.0] + [12.0] * 7 + [300.0] + [12.0] * 4
    t, arrivals = 0.0, []
    for g in gaps:
        t += g / 1e3
        arrivals.append((t, 1))
    got = window.split([arrivals], started=(sum(gaps[:3]) - 6.0) / 1e3, steps=8, warmup=1)
    assert got.profiled_ms == pytest.approx(12.0) and got.profiled_tokens == 6


def test_speculative_and_idle_ranks_are_read_as_what_they_ran(tmp_path):
    """A speculative server's target steps are `step[VERIFY ...]`: they are its decode steps. A DP
    attention rank with no request runs only `step[IDLE ...]`: not a short trace, nothing to show."""
    from toolkit.profile.capture import short_trace
    from toolkit.profile.render import render

    fams = load_families()
    (tmp_path / "v").mkdir()
    (tmp_path / "i").mkdir()
    (verify,) = _gpu_trace(tmp_path / "v", steps=4, stage="VERIFY")
    (idle,) = _gpu_trace(tmp_path / "i", steps=4, ranks=(1,), stage="IDLE")
    v, i = load_trace(verify), load_trace(idle)
    assert decode_stage(v) == "VERIFY" and decode_stage(i) == "DECODE" and idle_only(i) and not idle_only(v)
    ranks = [{**breakdown(v, fams, decode_stage(v)).to_dict(), "idle_only": False},
             {**breakdown(i, fams, decode_stage(i)).to_dict(), "idle_only": True}]
    assert ranks[0]["steps"] == 4 and ranks[0]["stage"] == "VERIFY" and ranks[1]["steps"] == 0
    assert short_trace(ranks, 4) is None and short_trace(ranks, 5) == "short trace: rank 0: 4 decode step(s) of 5 asked"
    text = [x if isinstance(x, str) else str(x.title) for x in render("r", fams, {"ranks": ranks}, None)]
    assert any("4 target VERIFY steps (speculative decoding" in t for t in text)
    assert any("rank 1 ran only idle steps" in t for t in text)


def test_cpu_trace_scopes_classify_top_level_ops(tmp_path):
    """A CPU-only trace: top-level aten ops, classified by their innermost record_function scope."""
    ev = [
        {"ph": "X", "cat": "user_annotation", "name": "step[DECODE bs=2]", "pid": 1, "tid": 1, "ts": 0, "dur": 1000},
        {"ph": "X", "cat": "user_annotation", "name": "mini::fused_moe_experts", "pid": 1, "tid": 1, "ts": 10, "dur": 500},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 20, "dur": 300},
        {"ph": "X", "cat": "cpu_op", "name": "aten::addmm_inner", "pid": 1, "tid": 1, "ts": 30, "dur": 100},  # nested
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 600, "dur": 200},  # no scope
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 850, "dur": 50},
    ]
    p = tmp_path / "cpu.json"
    p.write_text(json.dumps({"traceEvents": ev}))
    trace = load_trace(p)
    ks = kernels(trace)
    assert [(k.name, k.scope) for k in ks] == [("aten::mm", "mini::fused_moe_experts"), ("aten::mm", None),
                                               ("aten::add", None)]
    b = breakdown(trace, load_families())
    assert b.mode == "cpu"
    assert b.family_ms() == pytest.approx({"moe_gemm": 0.3, "gemm_bf16": 0.2, "copies": 0.05, "idle": 0.45})


def test_user_rules_come_first(tmp_path):
    extra = tmp_path / "mine.toml"
    extra.write_text('[[family]]\nname = "compiled"\nroofline = []\npatterns = ["^triton_poi_"]\n')
    fams = load_families(extra)
    assert classify(fams, "triton_poi_fused_add_mul_0") == "compiled"
    assert classify(fams, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL") == "allreduce"
    bad = tmp_path / "bad.toml"
    bad.write_text('[[family]]\nname = "x"\npatterns = ["("]\n')
    from toolkit.errors import BadInput

    with pytest.raises(BadInput):
        load_families(bad)


def test_floors_from_the_roofline(tmp_path):
    fams = load_families()
    spec = floor_spec({"roofline": {"model": "glm-5", "gpu": "rtx-pro-6000", "weights": "all=nvfp4"},
                       "server": {"args": {"tp-size": 8}}, "benchmark": {"input_len": 1024, "output_len": 256}}, batch=1)
    assert spec is not None and spec.tp == 8 and spec.context == 1024 + 128
    comps = component_floors_ms(spec)
    floors = family_floors_ms(fams, comps, {"moe_gemm", "gemm_fp4", "allreduce", "norm_act", "attention"})
    assert floors["moe_gemm"] == pytest.approx(comps["experts"] + comps["shared_experts"])
    assert floors["allreduce"] == pytest.approx(comps["allreduce"]) and floors["allreduce"] > 0
    assert floors["norm_act"] is None
    b = breakdown(load_trace(_gpu_trace(tmp_path)[0]), fams).to_dict()
    rows = floor_lines(fams, b, spec)
    gaps = [r["ms"] - (r["floor_ms"] or 0) for r in rows]
    assert gaps == sorted(gaps, reverse=True)
    moe = next(r for r in rows if r["family"] == "moe_gemm")
    assert moe["pct_of_floor"] == pytest.approx(100 * moe["floor_ms"] / moe["ms"])
    assert floor_spec({"roofline": {}}, 1) is None
    assert spec.text().startswith("glm-5 on rtx-pro-6000, TP8 from the recipe's flags,")  # no run yet


def test_floors_use_the_layout_sglang_resolved():
    """The recipe says `--dp-size 8 --enable-dp-attention` beside tp 8; sglang 0.5.23 resolves it to
    attention DP 8 (attn_dp_size 8, dp_size 1): attention is replicated on every GPU, so its floor is 8x
    the TP8 one, and no all-reduce follows it; the MLP/MoE's tokens are gathered over TP8 before it and
    reduced after (0.5.23 dp_attention.py _dp_gather / dp_scatter): at b=1 as many collectives as TP8's two
    all-reduces a layer, each of the rows a CUDA-graph decode pads every rank to (8 x ceil(1/8) = 8 rows,
    decode_cuda_graph_runner.py), so more bytes than TP8's one row."""
    recipe = {"roofline": {"model": "glm-5", "gpu": "rtx-pro-6000", "weights": "all=nvfp4"},
              "server": {"args": {"tp-size": 8, "dp-size": 8, "enable-dp-attention": True}},
              "benchmark": {"input_len": 1024, "output_len": 256}}
    info = {"tp_size": 8, "dp_size": 1, "attn_dp_size": 8, "enable_dp_attention": True, "ep_size": 1, "pp_size": 1}
    resolved = floor_spec(recipe, 1, info)
    tp8 = floor_spec({**recipe, "server": {"args": {"tp-size": 8}}}, 1, {"tp_size": 8})
    assert resolved.text().startswith("glm-5 on rtx-pro-6000, TP8 attn-DP8 from /server_info,")
    a, b = component_floors_ms(resolved), component_floors_ms(tp8)
    assert a["attention"] == pytest.approx(8 * b["attention"])
    # the DP gather takes the attention all-reduce's place, on 8 padded rows instead of 1
    assert b["allreduce"] < a["allreduce"] < 8 * b["allreduce"]


def _profile(**per_family_steps):
    return {"ranks": [{"rank": 0, "step_ms": 0.0, "family_ms": {f: sum(v) / len(v) for f, v in per_family_steps.items()},
                       "per_step_ms": per_family_steps}]}


def test_kernel_diff_verdicts():
    """Faster/slower only from 2 profiles each (Student's t on the per-profile minima, p < 0.05, and
    at least 10% of A); one profile of either recipe shows its numbers and no verdict."""
    from toolkit.profile.diff import FamilyDiff, NEGLIGIBLE, NOT_SIGNIFICANT, ONE_EACH, TOO_FEW

    a = [_profile(moe_gemm=[10.0, 10.5, 9.8, 10.2], norm_act=[1.0, 1.2, 0.9, 1.1]),
         _profile(moe_gemm=[10.1, 10.3, 9.9, 10.0], norm_act=[1.05, 1.0, 1.1, 0.95])]
    b = [_profile(moe_gemm=[3.0, 3.1, 2.9, 3.2], norm_act=[1.1, 0.9, 1.0, 1.2]),
         _profile(moe_gemm=[3.05, 3.0, 2.95, 3.1], norm_act=[0.92, 1.0, 1.1, 1.0])]
    diffs = {d.family: d for d in kernel_diff(a, b)}
    assert diffs["moe_gemm"].verdict == "faster" and diffs["moe_gemm"].delta_ms == pytest.approx(2.925 - 9.85, abs=0.01)
    assert diffs["moe_gemm"].p_value < 0.01 and diffs["moe_gemm"].n_a == diffs["moe_gemm"].n_b == 2
    assert diffs["norm_act"].verdict == NOT_SIGNIFICANT
    # one profile of B: the numbers, no verdict (the steps of one trace cannot show the run-to-run spread)
    one = {d.family: d for d in kernel_diff(a, b[:1])}
    assert one["moe_gemm"].verdict == TOO_FEW and one["moe_gemm"].p_value is None
    assert kernel_diff(a[:1], b[:1])[0].verdict == ONE_EACH

    assert FamilyDiff("x", 0.20, 0.16, 0.005, 2, 2, step_a_ms=30.0, p_value=0.001).verdict == NEGLIGIBLE
    assert FamilyDiff("x", 0.20, 0.16, 0.005, 2, 2, step_a_ms=1.0, p_value=0.001).verdict == "faster"
    assert FamilyDiff("x", 0.20, 0.16, 0.005, 2, 2, step_a_ms=1.0, p_value=0.2).verdict == NOT_SIGNIFICANT
    assert FamilyDiff("x", 0.20, 0.19, 0.001, 2, 2, step_a_ms=1.0, p_value=0.001).verdict == NOT_SIGNIFICANT  # < 10%


def test_stacked_bar_figure(tmp_path):
    pytest.importorskip("matplotlib")
    from toolkit.profile.figure import stacked_bar

    out = stacked_bar({"A": {"moe_gemm": 10.0, "idle": 2.0}, "B": {"moe_gemm": 3.0, "idle": 2.0}},
                      tmp_path / "bars.png", families=load_families(), floors_ms={"A": 1.0, "B": 1.0})
    assert out.stat().st_size > 1000 and out.read_bytes()[:4] == b"\x89PNG"


def test_gpu_annotation_scopes_name_generic_kernels(tmp_path):
    """On a GPU trace of the miniature, a generic cuBLAS GEMM inside the `mini::fused_moe_experts`
    gpu_user_annotation counts as MoE experts; outside any scope it is a dense GEMM."""
    gemm = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64_cublas"
    ev = [
        {"ph": "X", "cat": "gpu_user_annotation", "name": "step[DECODE bs=8]", "pid": 0, "tid": 7, "ts": 0, "dur": 100},
        {"ph": "X", "cat": "gpu_user_annotation", "name": "mini::fused_moe_experts", "pid": 0, "tid": 7, "ts": 10, "dur": 50},
        {"ph": "X", "cat": "kernel", "name": gemm, "pid": 0, "tid": 7, "ts": 12, "dur": 40},
        {"ph": "X", "cat": "kernel", "name": gemm, "pid": 0, "tid": 7, "ts": 70, "dur": 20},
    ]
    p = tmp_path / "gpu.json"
    p.write_text(json.dumps({"traceEvents": ev}))
    b = breakdown(load_trace(p), load_families())
    assert b.mode == "gpu"
    assert b.family_ms() == pytest.approx({"moe_gemm": 0.04, "gemm_bf16": 0.02, "idle": 0.04})


def test_a_family_faster_than_its_floor_flags_the_inputs(tmp_path):
    """The same trace against the floors of a far bigger model: measured below the floor, which is
    an error of the roofline inputs, not a percentage."""
    from toolkit.profile.render import render

    fams = load_families()
    b = breakdown(load_trace(_gpu_trace(tmp_path)[0]), fams).to_dict()
    huge = floor_spec({"roofline": {"model": "glm-5", "gpu": "rtx-pro-6000", "weights": "all=bf16"},
                       "server": {"args": {"tp-size": 1}}, "benchmark": {"input_len": 1024, "output_len": 256}},
                      batch=64)
    rows = floor_lines(fams, b, huge)
    beyond = [r for r in rows if r["beyond"]]
    assert beyond and all(r["floor_ms"] > 1.02 * r["ms"] for r in beyond)
    text = "\n".join(str(x) for x in render("r", fams, {"ranks": [b], "itl_ms_median": None}, huge)
                     if isinstance(x, str))
    assert "the roofline inputs do not describe this run" in text
    assert not any(f"{r['pct_of_floor']:.1f}%" in text for r in beyond)


def test_cpu_torch_native_attention_is_attention():
    """sglang 0.5.23 on --device cpu (torch_native attention, the cpu recipes): torch's SDPA ops are the
    attention of the step (an audit found them in "other"/elementwise), the leaf op as its parent."""
    fams = load_families()
    for name in ("aten::scaled_dot_product_attention", "aten::_scaled_dot_product_flash_attention_for_cpu"):
        assert classify(fams, name) == "attention"
