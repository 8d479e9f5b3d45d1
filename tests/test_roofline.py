"""Decode roofline (toolkit/roofline.py, toolkit/commands/roofline.py)."""

from __future__ import annotations

import argparse
import json
from itertools import pairwise

import pytest

from toolkit import roofline as rl
from toolkit.commands import roofline as cmd
from toolkit.errors import BadInput

# --------------------------------------------------------------------------------------------
# Expected distinct experts
# --------------------------------------------------------------------------------------------


def test_distinct_experts_batch_one_is_top_k():
    assert rl.expected_distinct_experts(256, 8, 1) == pytest.approx(8.0)
    assert rl.expected_distinct_experts(128, 8, 1) == pytest.approx(8.0)


def test_distinct_experts_large_batch_tends_to_all_experts():
    assert rl.expected_distinct_experts(256, 8, 10_000) == pytest.approx(256.0, abs=1e-6)
    assert rl.expected_distinct_experts(256, 8, 256) == pytest.approx(256 * (1 - (1 - 8 / 256) ** 256))
    assert rl.expected_distinct_experts(256, 8, 256) < 256


def test_distinct_experts_formula_and_monotonic():
    assert rl.expected_distinct_experts(256, 8, 2) == pytest.approx(256 * (1 - (31 / 32) ** 2))  # 15.75
    values = [rl.expected_distinct_experts(256, 8, b) for b in range(1, 513)]
    assert all(a < b for a, b in pairwise(values))
    assert rl.expected_distinct_experts(256, 8, 0) == 0.0
    assert rl.expected_distinct_experts(0, 0, 4) == 0.0


# --------------------------------------------------------------------------------------------
# Data files
# --------------------------------------------------------------------------------------------


def test_gpu_table_has_sources_and_datasheet_bandwidths():
    gpus = rl.load_gpus()
    assert {g.mem_bw_gbps for g in gpus.values()} >= {1792, 3350, 4800, 8000}
    assert gpus["rtx-pro-6000"].mem_bw_gbps == 1792
    assert gpus["rtx-pro-6000"].memory_gb == 96
    assert gpus["rtx-pro-6000"].arch == "SM120"
    assert gpus["rtx-pro-6000"].link_bw_gbps == 64
    assert gpus["rtx-pro-6000"].allreduce_latency_us == 10
    assert gpus["h200"].mem_bw_gbps == 4800
    assert gpus["b200"].mem_bw_gbps == 8000
    assert gpus["h100-sxm"].mem_bw_gbps == 3350
    for gpu in gpus.values():
        if gpu.arch == "CPU":  # the demo's machine: declared float32 rates, no tensor cores
            assert gpu.source and "Declared estimates" in gpu.source and gpu.peak("fp32")
            continue
        assert gpu.source and gpu.peak("bf16") and gpu.peak("fp8")
    assert gpus["h100-sxm"].peak("fp4") is None and gpus["b200"].peak("fp4")
    assert rl.get_gpu("RTX PRO 6000 Blackwell").key == "rtx-pro-6000"
    assert rl.get_gpu("H100").key == "h100-sxm"


def test_model_files_have_sources():
    assert {"glm-5", "qwen3-30b-a3b", "llama-3.1-8b"} <= set(rl.known_models())
    for name in ("glm-5", "qwen3-30b-a3b", "llama-3.1-8b"):
        _, cfg = rl.load_model_config(name)
        assert cfg["_source"]


def test_glm5_shape_matches_published_sizes():
    _, cfg = rl.load_model_config("glm-5")
    m = rl.model_shape(cfg, "glm-5")
    assert (m.kind, m.layers, m.dense_layers, m.moe_layers) == ("mla_moe", 78, 3, 75)
    assert (m.n_experts, m.top_k, m.hidden) == (256, 8, 6144)
    assert m.total_params() / 1e9 == pytest.approx(744, rel=0.005)  # "744B parameters"
    assert m.active_params(1) / 1e9 == pytest.approx(40, rel=0.025)  # "40B active"


def test_qwen3_moe_shape():
    _, cfg = rl.load_model_config("qwen3-30b-a3b")
    m = rl.model_shape(cfg, "qwen3-30b-a3b")
    assert (m.kind, m.moe_layers, m.dense_layers, m.shared_params) == ("gqa_moe", 48, 0, 0)
    assert m.total_params() / 1e9 == pytest.approx(30.5, rel=0.01)
    # "3.3B activated" counts the embedding table too; a decode step reads only one row of it
    assert (m.active_params(1) + m.vocab * m.hidden) / 1e9 == pytest.approx(3.3, rel=0.02)
    mixed = rl.model_shape({**cfg, "mlp_only_layers": [0, 1]})
    assert (mixed.dense_layers, mixed.moe_layers) == (2, 46)


# --------------------------------------------------------------------------------------------
# The seed: GLM-5 on 8x RTX PRO 6000, TP8, batch 1
# --------------------------------------------------------------------------------------------


def test_seed_allreduce_figures():
    row = rl.roofline(rl.seed_glm5_inputs()).rows[0]
    ar = row.allreduce
    assert ar.count == 156  # 78 layers x 2
    # 156 * 6144 * 2 B * b=1 = 1.92 MB of messages; x ring factor 2*7/8 = 1.75 -> 3.35 MB per GPU
    assert ar.count * ar.message_bytes == 156 * 6144 * 2
    assert ar.ring_factor == pytest.approx(1.75)
    assert ar.bytes_per_gpu / 1e6 == pytest.approx(3.3, abs=0.06)
    assert ar.latency_s == pytest.approx(1.56e-3)  # 156 x 10 us
    assert ar.transfer_s == pytest.approx(ar.bytes_per_gpu / 64e9)


def test_seed_309_tok_s_under_the_seed_assumption():
    """309 tok/s is reproduced (within 1%; the model gives 311.1) by: every weight NVFP4 including
    attention, DSA indexer, dense MLP, shared expert, router and lm_head; only active weights
    (8 routed + 1 shared expert per MoE layer); every byte split evenly over the 8 GPUs (no
    replication); KV cache negligible (context 0); 1,792 GB/s; 156 x (10 us + ring bytes / 64 GB/s)."""
    result = rl.seed_glm5()
    row = result.rows[0]
    assert result.inputs.weights.spec == rl.SEED_GLM5_WEIGHTS == "all=nvfp4"
    assert {fmt for _, fmt in result.inputs.weights.formats} == {"nvfp4"}
    assert row.tok_s == pytest.approx(309, rel=0.01)
    assert row.tok_s == pytest.approx(311.1, abs=0.1)
    # ~1.6 ms of weight streaming + ~1.6 ms of all-reduce ("roughly half the time budget")
    assert row.mem_s == pytest.approx(1.60e-3, abs=0.01e-3)
    assert row.weight_bytes / 1e9 == pytest.approx(2.87, abs=0.01)  # per GPU
    assert result.assumptions[0] == rl.SEED_ASSUMPTION
    assert "NVFP4" in rl.SEED_ASSUMPTION and "context 0" in rl.SEED_ASSUMPTION
    assert rl.theoretical_tok_s("glm-5", "rtx-pro-6000", 8, 1, 1, 0, "all=nvfp4") == pytest.approx(row.tok_s)


def test_seed_real_checkpoint_mix_is_slower():
    """The real GLM-5-NVFP4 checkpoint: experts NVFP4, attention and the rest BF16."""
    seed = rl.roofline(rl.seed_glm5_inputs()).rows[0]
    real = rl.roofline(rl.seed_glm5_inputs(rl.GLM5_CHECKPOINT_WEIGHTS)).rows[0]
    assert real.component("experts").bytes == seed.component("experts").bytes
    assert real.component("attention").bytes == pytest.approx(seed.component("attention").bytes * 2 / 0.5625)
    assert real.component("attention").fmt == "bf16"
    assert real.tok_s == pytest.approx(198.5, abs=0.5)
    # and with sglang's replication of q_a/kv_a, the DSA indexer and the router on every rank
    replicated = rl.roofline(rl.seed_glm5_inputs(rl.GLM5_CHECKPOINT_WEIGHTS, sharding="sglang")).rows[0]
    assert replicated.tok_s == pytest.approx(140.9, abs=0.5)
    assert replicated.tok_s < real.tok_s < seed.tok_s


def test_seed_sensitivity_to_context():
    short = rl.roofline(rl.seed_glm5_inputs()).rows[0]
    long = rl.roofline(rl.seed_glm5_inputs(context=1024)).rows[0]
    # bf16 MLA latent 576 x 2 B + fp8 index key 132 B, per token per layer, replicated on each rank
    assert long.kv_bytes == 1024 * 78 * (576 * 2 + 132)
    assert long.tok_s < short.tok_s
    assert long.tok_s == pytest.approx(309, rel=0.02)


# --------------------------------------------------------------------------------------------
# Dense, batch, compute, EP
# --------------------------------------------------------------------------------------------


def test_dense_llama_single_gpu():
    inputs = rl.make_inputs("llama-3.1-8b", "h100-sxm", batches=(1,), weights="all=bf16")
    row = rl.roofline(inputs).rows[0]
    per_layer = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336  # q,o + k,v + gate/up/down
    params = 32 * per_layer + 128256 * 4096  # + lm_head; embedding lookup reads 1 row
    assert row.weight_bytes == pytest.approx(2 * params + 2 * 4096)
    assert row.allreduce.count == 0 and row.allreduce.time_s == 0
    assert row.distinct_experts == 0
    assert row.tok_s == pytest.approx(3350e9 / (2 * params), rel=1e-3)  # ~223 tok/s
    assert row.bound == "memory"
    assert inputs.model.total_params() / 1e9 == pytest.approx(8.03, rel=0.005)


def test_dense_llama_kv_and_tp():
    inputs = rl.make_inputs("llama-3.1-8b", "h100-sxm", tp=2, batches=(4,), context=2048, weights="all=fp8")
    row = rl.roofline(inputs).rows[0]
    assert row.kv_bytes == 4 * 32 * 2048 * 2 * (8 / 2) * 128 * 2  # b x L x C x (K,V) x heads/GPU x hd x 2 B
    assert row.allreduce.count == 64
    assert row.component("attention").peak_dtype == "fp8"


def test_tok_s_monotonic_in_batch_while_memory_bound():
    batches = (1, 2, 4, 8, 16, 32, 64, 128, 256)
    for model, gpu, tp in (("glm-5", "rtx-pro-6000", 8), ("qwen3-30b-a3b", "h200", 1), ("llama-3.1-8b", "b200", 1)):
        result = rl.roofline(rl.make_inputs(model, gpu, tp=tp, batches=batches, context=512))
        tok = [r.tok_s for r in result.rows]
        assert all(a < b for a, b in pairwise(tok)), (model, tok)
        assert all(r.bound != "compute" for r in result.rows), model
        steps = [r.step_s for r in result.rows]
        assert all(a <= b for a, b in pairwise(steps))


def test_compute_bound_at_huge_batch():
    row = rl.roofline(rl.make_inputs("llama-3.1-8b", "h100-sxm", batches=(8192,), weights="all=bf16")).rows[0]
    assert row.component("dense_mlp").bound == "compute"
    assert row.bound == "compute"


def test_nvfp4_without_fp4_tensor_cores_computes_in_bf16():
    row = rl.roofline(rl.make_inputs("qwen3-30b-a3b", "h100-sxm", weights="all=nvfp4")).rows[0]
    assert row.component("experts").peak_dtype == "bf16"
    row = rl.roofline(rl.make_inputs("qwen3-30b-a3b", "b200", weights="all=nvfp4")).rows[0]
    assert row.component("experts").peak_dtype == "fp4"


# The miniature's torch step (toolkit/data/models/minisglang-torch-step.json), worked by hand: 2 layers,
# hidden 256, 8 heads = 8 KV heads x 32: attention 2 x 256 x 256 (q, o) + 2 x 256 x 256 (k, v) = 262,144
# params a layer; E=8, k=2 experts of 3 x 256 x 768 = 589,824 params; lm_head 2048 x 256 = 524,288.
MINI = "minisglang-torch-step"
ATTN, EXPERT, HEAD = 262_144, 589_824, 524_288


def _row(**kw):
    return rl.roofline(rl.make_inputs(MINI, "h200", weights="all=bf16", **kw)).rows[0]


@pytest.mark.parametrize("kw, attention, experts, lm_head, allreduces, ring_bytes", [
    # TP2: everything halves; the 2 active experts are read as halves on both GPUs; 2 all-reduces a layer
    (dict(tp=2), 2 * ATTN / 2, 2 * 2 * EXPERT / 2, HEAD / 2, 4, 4 * 512 * 2 * 1 / 2),
    # TP8 EP1: 1/8 slices of the 2 active experts
    (dict(tp=8), 2 * ATTN / 8, 2 * 2 * EXPERT / 8, HEAD / 8, 4, 4 * 512 * 2 * 7 / 8),
    # TP8 EP8: a GPU holds whole experts; top-2 over 8 ranks: the busiest reads 1 whole expert a layer (4x TP8's)
    (dict(tp=8, ep=8), 2 * ATTN / 8, 2 * 1 * EXPERT, HEAD / 8, 4, 4 * 512 * 2 * 7 / 8),
    # TP8 with attention DP8: attention replicated on every GPU, no all-reduce after it; the MoE's tokens are
    # gathered over TP8 and reduced back (0.5.23 dp_attention.py _dp_gather / dp_scatter): at b=1 a CUDA-graph step
    # pads every rank to 1 row, so MAX_LEN's all-gather + reduce-scatter of 8 rows (2 x 7/8 x 8 x 512 B a layer),
    # cheaper than SUM_LEN's two all-reduces of the same 8 rows; and lm_head's hidden-state gather, one all-reduce
    # over TP8 of the 8 ranks' rows (2 x 7/8 x 8 x 512 B; logits_processor.py:1216-1242)
    (dict(tp=8, attn_dp=8), 2 * ATTN, 2 * 2 * EXPERT / 8, HEAD / 8, 5, 2 * 2 * 7 / 8 * 8 * 512 + 2 * 7 / 8 * 8 * 512),
    # TP4, attention DP2, EP2: attention over 2 GPUs, experts whole on 2 ranks sliced over 2: 1 expert / 2;
    # attention all-reduce of 1 row over 2 (512 B) + the DP gather/reduce over TP4 of rows aligned to attention
    # TP 2: SUM_LEN 2 rows x 2 all-reduces (2 x 2 x 3/4 x 2 x 512) = MAX_LEN 2 ranks x 2 rows (2 x 3/4 x 4 x 512)
    # + lm_head's gather: one all-reduce over TP4 of the 2 ranks' rows (2 x 3/4 x 2 x 512)
    (dict(tp=4, attn_dp=2, ep=2), 2 * ATTN / 2, 2 * 1 * EXPERT / 2, HEAD / 4, 7,
     2 * (512 * 2 * 1 / 2 + 2 * 3 / 4 * 4 * 512) + 2 * 3 / 4 * 2 * 512),
    # PP2 and DP2 replicas: one sequence's token still reads every layer once on TP2: as TP2
    (dict(tp=2, pp=2, dp=2), 2 * ATTN / 2, 2 * 2 * EXPERT / 2, HEAD / 2, 4, 4 * 512 * 2 * 1 / 2),
])
def test_layout_bytes_per_gpu_worked_by_hand(kw, attention, experts, lm_head, allreduces, ring_bytes):
    row = _row(**kw)
    assert row.component("attention").bytes == pytest.approx(2 * attention)  # bf16: 2 B a param
    assert row.component("experts").bytes == pytest.approx(2 * experts)
    assert row.component("lm_head").bytes == pytest.approx(2 * lm_head)
    assert row.allreduce.count == allreduces
    assert row.allreduce.bytes_per_gpu == pytest.approx(ring_bytes)  # message: hidden 256 x 2 B x b=1 = 512 B


def test_layout_changes_the_bound_and_is_stated():
    tp8 = rl.roofline(rl.seed_glm5_inputs(batches=(1, 16)))
    ep8 = rl.roofline(rl.seed_glm5_inputs(batches=(1, 16), ep=8))
    # GLM-5 (k=8, E=256) at b=1: 8 active experts over 8 ranks, balanced, is one whole expert each = TP8's
    assert tp8.rows[0].step_s == pytest.approx(ep8.rows[0].step_s)
    # b=16: ~100.5 distinct experts; the busiest EP rank reads ceil(100.5 / 8) = 13 whole ones, not 12.56
    d = tp8.rows[1].distinct_experts
    assert ep8.rows[1].component("experts").bytes == pytest.approx(tp8.rows[1].component("experts").bytes * 13 / (d / 8))
    assert any("EP=8" in line and "busiest" in line for line in ep8.assumptions)
    dp = rl.roofline(rl.seed_glm5_inputs(attn_dp=8, pp=2))
    assert any("attention DP 8 = 1 GPU (its weights replicated" in line for line in dp.assumptions)
    assert any(line.startswith("PP=2") for line in dp.assumptions)
    with pytest.raises(BadInput, match="attention DP 3 x CP 1 must divide TP=8"):
        rl.roofline(rl.seed_glm5_inputs(attn_dp=3))


def test_allreduce_latency_override():
    row = rl.roofline(rl.seed_glm5_inputs(allreduce_latency_us=5)).rows[0]
    assert row.allreduce.latency_s == pytest.approx(0.78e-3)
    assert any("overridden" in line for line in rl.roofline(rl.seed_glm5_inputs(allreduce_latency_us=5)).assumptions)


def test_assumptions_cover_the_numbers():
    text = "\n".join(rl.roofline(rl.seed_glm5_inputs(rl.GLM5_CHECKPOINT_WEIGHTS)).assumptions)
    for needle in (
        "E*(1-(1-k/E)^b)",
        "2(N-1)/N",
        "max(bytes / mem_bw, FLOPs / peak)",
        "1792 GB/s",
        "10 us",
        "0.5625 B/param",
        "bf16",
        "Sharding 'even'",
    ):
        assert needle in text, needle


# --------------------------------------------------------------------------------------------
# Weight specs and bad input
# --------------------------------------------------------------------------------------------


def test_weight_spec_all_but_lm_head():
    w = rl.parse_weights("all=nvfp4,lm_head=bf16")
    assert w.of("lm_head") == "bf16" and w.of("attention") == "nvfp4" and w.of("experts") == "nvfp4"


def test_weight_spec_rest_and_order():
    a = rl.parse_weights("experts=nvfp4,rest=bf16")
    b = rl.parse_weights("rest=bf16,routed_experts=nvfp4")
    assert a.formats == b.formats
    assert a.of("experts") == "nvfp4" and a.of("attention") == "bf16" and a.of("shared_experts") == "bf16"
    assert rl.parse_weights(["experts=nvfp4", "rest=fp8", "experts=fp8"]).of("experts") == "fp8"
    partial = rl.parse_weights("experts=nvfp4")
    assert partial.of("attention") == "bf16" and "attention" in partial.defaulted
    assert rl.BYTES_PER_PARAM["nvfp4"] == 0.5625 and rl.BYTES_PER_PARAM["bf16"] == 2


@pytest.mark.parametrize("spec", ["experts", "experts=nvfp3", "wings=bf16", "", "=bf16"])
def test_bad_weight_spec(spec):
    with pytest.raises(BadInput) as info:
        rl.parse_weights(spec)
    assert info.value.hint and "\n" not in str(info.value)


def test_bad_inputs():
    with pytest.raises(BadInput, match="unknown GPU"):
        rl.get_gpu("gtx-1080")
    with pytest.raises(BadInput, match="unknown model"):
        rl.load_model_config("no-such-model")
    with pytest.raises(BadInput, match="EP=3 must divide TP=8"):
        rl.roofline(rl.seed_glm5_inputs(ep=3))
    with pytest.raises(BadInput, match="dense model"):
        rl.roofline(rl.make_inputs("llama-3.1-8b", "h200", tp=2, ep=2))
    with pytest.raises(BadInput, match="batch"):
        rl.roofline(rl.seed_glm5_inputs(batches=(0,)))


def test_model_from_path_and_dict(tmp_path):
    _, cfg = rl.load_model_config("qwen3-30b-a3b")
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    name, loaded = rl.load_model_config(tmp_path)
    assert loaded == cfg and name == tmp_path.name
    by_dict = rl.theoretical_tok_s(cfg, "h200", 1, 1, 8, 1024, "all=bf16")
    by_name = rl.theoretical_tok_s("qwen3-30b-a3b", "h200", 1, 1, 8, 1024, "all=bf16")
    assert by_dict == pytest.approx(by_name)


# --------------------------------------------------------------------------------------------
# CLI verb module
# --------------------------------------------------------------------------------------------


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cmd.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_cli_prints_table_and_assumptions(capsys):
    assert isinstance(cmd.HELP, str) and cmd.HELP
    rc = cmd.run(
        _args("--model", "glm-5", "--gpu", "rtx-pro-6000", "--tp", "8", "--batch", "1,8", "--weights", "all=nvfp4")
    )
    out = capsys.readouterr().out
    assert rc == 0
    assert "tok/s" in out and "311.1" in out and "156" in out
    assert "experts" in out and "kv_cache" in out and "all-reduce" in out
    assert "Assumptions:" in out and "2(N-1)/N" in out


def test_cli_repeatable_weights_and_json(capsys):
    rc = cmd.run(
        _args(
            "--model",
            "glm-5",
            "--gpu",
            "rtx-pro-6000",
            "--tp",
            "8",
            "--batch",
            "1",
            "--json",
            "--weights",
            "experts=nvfp4",
            "--weights",
            "rest=bf16",
        )
    )
    data = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert data["weights"]["attention"] == "bf16" and data["weights"]["experts"] == "nvfp4"
    assert data["rows"][0]["allreduce"]["count"] == 156
    assert data["rows"][0]["tok_s"] == pytest.approx(198.5, abs=0.5)
    assert data["assumptions"]


def test_cli_bad_input_raises_badinput():
    with pytest.raises(BadInput, match="unknown GPU"):
        cmd.run(_args("--model", "glm-5", "--gpu", "a100"))
    with pytest.raises(BadInput, match="unknown weight format"):
        cmd.run(_args("--model", "glm-5", "--gpu", "h200", "--weights", "experts=int3"))


def test_the_demo_roofline_describes_the_miniature():
    """The demo's [roofline] is the miniature's torch step on the CPU it runs on: float32 weights at
    the declared float32 rate, and a floor well below the miniature's paced step."""
    inputs = rl.make_inputs("minisglang-torch-step", "cpu-2core", tp=1, ep=1, batches=(4,), context=128,
                            weights="all=fp32")
    row = rl.roofline(inputs).rows[0]
    experts = next(c for c in row.components if c.name == "experts")
    assert experts.peak_dtype == "fp32" and experts.fmt == "fp32"
    # 2 layers x E(1-(1-k/E)^4) = 5.47 of 8 experts x 3 x 256 x 768 params x 4 B
    assert experts.bytes == pytest.approx(2 * 8 * (1 - 0.75 ** 4) * 3 * 256 * 768 * 4, rel=1e-6)
    assert 0.5 < row.step_s * 1e3 < 12.0  # the miniature paces a decode step at >= 12 ms


# sglang 0.5.23's moe_dp_size (runtime_context.derive_parallel_widths: moe_tp = tp / ep / moe_dp; allowed
# > 1 only equal to attn_cp_size, parallel_hook.py): each MoE-DP group of tp / moe_dp GPUs holds every
# expert and runs its own tokens. The miniature by hand (as above), TP8 attn-CP2:
@pytest.mark.parametrize("kw, batch, experts, ring_bytes", [
    # MoE DP2: the 2 active experts sliced over 4 GPUs, not 8 (twice TP8's bytes); the MoE output is
    # reduced over the group's 4 GPUs like attention over attention TP 4
    (dict(moe_dp=2), 1, 2 * 2 * EXPERT / 4, 4 * 512 * 2 * 3 / 4),
    # EP4 x MoE DP2 = TP8: whole experts; top-2 over 4 ranks of the group: the busiest reads 1 whole one
    (dict(moe_dp=2, ep=4), 1, 2 * 1 * EXPERT, 4 * 512 * 2 * 3 / 4),
    # b=2: a decode batch is not split over the CP ranks (0.5.23 layer_boundary/layout.py:206-214), so each
    # group runs both tokens: 8 x (1 - (6/8)^2) = 3.5 distinct experts, like the 2 tokens it all-reduces
    (dict(moe_dp=2), 2, 2 * 3.5 * EXPERT / 4, 4 * 1024 * 2 * 3 / 4),
])
def test_moe_data_parallelism_worked_by_hand(kw, batch, experts, ring_bytes):
    row = rl.roofline(rl.make_inputs(MINI, "h200", weights="all=bf16", tp=8, attn_cp=2, batches=(batch,),
                                     **kw)).rows[0]
    assert row.component("experts").bytes == pytest.approx(2 * experts)
    assert row.distinct_experts == pytest.approx(2 if batch == 1 else 3.5)
    assert row.allreduce.bytes_per_gpu == pytest.approx(ring_bytes)


def test_a_server_with_moe_dp_gets_a_roofline_figure_and_sglangs_own_refusals():
    from toolkit.run.parallel_layout import roofline_layout

    # the fields 0.5.23's /server_info reports (ServerArgs.resolved_dict(), flat)
    info = {"tp_size": 8, "ep_size": 1, "attn_dp_size": 1, "dp_size": 1, "attn_cp_size": 2, "moe_dp_size": 2,
            "pp_size": 1, "moe_dense_tp_size": None, "enable_dp_lm_head": False, "enable_dp_attention": False}
    kw, text = roofline_layout(info)
    assert text == "TP8 attn-CP2 MoE-DP2 from /server_info" and kw["moe_dp"] == 2
    moe_dp = rl.theoretical_tok_s("glm-5", "rtx-pro-6000", batch=1, context=0, weights="experts=nvfp4,rest=bf16", **kw)
    cp = rl.theoretical_tok_s("glm-5", "rtx-pro-6000", batch=1, context=0, weights="experts=nvfp4,rest=bf16",
                              **{**kw, "moe_dp": 1})
    assert moe_dp < cp  # each GPU reads its experts' 1/4 slices instead of 1/8
    result = rl.roofline(rl.seed_glm5_inputs(attn_cp=2, moe_dp=2))
    assert any(line.startswith("MoE DP=2 (sglang's moe_dp_size)") for line in result.assumptions)
    with pytest.raises(BadInput, match="MoE DP 2 must equal attention CP 1"):
        rl.roofline(rl.seed_glm5_inputs(moe_dp=2))
    with pytest.raises(BadInput, match="EP=2 x MoE DP 2 must equal TP=8"):
        rl.roofline(rl.seed_glm5_inputs(attn_cp=2, moe_dp=2, ep=2))


def test_cli_roofline_takes_moe_dp(capsys):
    from toolkit.cli import main

    assert main(["roofline", "--model", "glm-5", "--gpu", "rtx-pro-6000", "--tp", "8", "--attn-cp", "2",
                 "--moe-dp", "2", "--batch", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["moe_dp"] == 2 and out["attn_cp"] == 2
    assert main(["roofline", "--model", "glm-5", "--gpu", "rtx-pro-6000", "--tp", "8", "--moe-dp", "2"]) != 0
    assert "MoE DP 2 must equal attention CP 1" in capsys.readouterr().err


def test_a_server_with_decode_context_parallelism_gets_its_kv_split(capsys):
    """sglang 0.5.23's dcp_size splits every sequence's KV tokens over the DCP ranks inside attention TP
    (heads over attn_tp / dcp groups, configs/model_config.py get_num_kv_heads): a /server_info with
    dcp_size 2 must get a roofline whose KV reads are those of 1/2 the tokens, said in the layout."""
    from toolkit.cli import main
    from toolkit.run.parallel_layout import roofline_layout

    info = {"tp_size": 8, "ep_size": 1, "attn_dp_size": 1, "dp_size": 1, "attn_cp_size": 1, "moe_dp_size": 1,
            "dcp_size": 2, "pp_size": 1, "moe_dense_tp_size": None, "enable_dp_lm_head": False,
            "enable_dp_attention": False}
    kw, text = roofline_layout(info)
    assert text == "TP8 DCP2 DCP exchange a2a (assumed: no dcp_comm_backend) from /server_info" and kw["dcp"] == 2
    w = "experts=nvfp4,rest=bf16"
    dcp = rl.roofline(rl.make_inputs("glm-5", "rtx-pro-6000", batches=(8,), context=65536, weights=w, **kw)).rows[0]
    flat = rl.roofline(rl.make_inputs("glm-5", "rtx-pro-6000", batches=(8,), context=65536, weights=w,
                                      **{**kw, "dcp": 1})).rows[0]
    # a2a's default dcp_replicate_q_proj (GLM-5 is DSA): each rank also reads its DCP peer's q_b_proj and w_kc shard
    # (78 layers x (2048 x 64 x 256 + 512 x 64 x 192) / 8 x 2 B = 776,994,816 B); the other weights are unchanged
    assert dcp.kv_bytes == pytest.approx(flat.kv_bytes / 2) and dcp.weight_bytes == flat.weight_bytes + 776_994_816
    assert rl.theoretical_tok_s("glm-5", "rtx-pro-6000", batch=8, context=65536, weights=w, **kw) > \
        rl.theoretical_tok_s("glm-5", "rtx-pro-6000", batch=8, context=65536, weights=w, **{**kw, "dcp": 1})
    # GQA (Llama-3.1-8B, 8 KV heads): at TP8 each GPU holds 1 head, with DCP2 2 heads of half the tokens (the
    # same bytes); at TP16 one head is held twice without DCP, and DCP2 keeps it once, each rank half the tokens
    def gqa(tp, d):
        return rl.roofline(rl.make_inputs("llama-3.1-8b", "rtx-pro-6000", tp=tp, context=4096, dcp=d)).rows[0].kv_bytes
    assert gqa(8, 2) == gqa(8, 1) and gqa(16, 2) == pytest.approx(gqa(16, 1) / 2) == gqa(16, 4)
    assert main(["roofline", "--model", "glm-5", "--gpu", "rtx-pro-6000", "--tp", "8", "--dcp", "2",
                 "--context", "4096", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["dcp"] == 2 and any(a.startswith("DCP=2 (sglang's dcp_size)") for a in out["assumptions"])
    assert main(["roofline", "--model", "glm-5", "--gpu", "rtx-pro-6000", "--tp", "8", "--dcp", "3"]) == 2
    assert "decode context parallel size 3 must divide attention TP=8" in capsys.readouterr().err


# sglang 0.5.23 builds DeepSeek/GLM-5 shared experts replicated (TP1) under an all-to-all MoE backend, the
# FlashInfer cutlass FP4 all-gather, or SGLANG_SHARED_EXPERT_TP1 (models/deepseek_v2.py DeepseekV2MoE)
_ATTN_DP8 = {"tp_size": 8, "ep_size": 8, "attn_dp_size": 8, "dp_size": 1, "enable_dp_attention": True,
             "moe_a2a_backend": "none", "moe_runner_backend": "flashinfer_cutlass", "quantization": "modelopt_fp4",
             "disable_flashinfer_cutlass_moe_fp4_allgather": False, "shared_experts_tp_size": None}


@pytest.mark.parametrize("info, environ, shared_tp, said", [
    ({**_ATTN_DP8, "moe_a2a_backend": "deepep"}, {}, 1, "shared experts replicated (moe_a2a_backend deepep)"),
    ({**_ATTN_DP8, "moe_a2a_backend": "mooncake"}, {}, 1, "(moe_a2a_backend mooncake)"),
    (_ATTN_DP8, {}, 1, "shared experts replicated (the FlashInfer cutlass FP4 all-gather)"),
    ({**_ATTN_DP8, "disable_flashinfer_cutlass_moe_fp4_allgather": True}, {}, None, ""),
    ({**_ATTN_DP8, "ep_size": 1}, {}, None, ""),  # the all-gather needs ep_size == attn_dp_size
    ({**_ATTN_DP8, "moe_runner_backend": "cutlass"}, {}, None, ""),
    ({"tp_size": 8}, {"SGLANG_SHARED_EXPERT_TP1": "1"}, 1, "(SGLANG_SHARED_EXPERT_TP1)"),
    ({"tp_size": 8}, {}, None, ""),
    ({**_ATTN_DP8, "moe_a2a_backend": "deepep", "shared_experts_tp_size": 2}, {}, 2, "shared experts TP2"),
])
def test_shared_experts_sharding_is_read_from_the_resolved_config(info, environ, shared_tp, said):
    from toolkit.run.parallel_layout import roofline_layout

    kw, text = roofline_layout(info, environ=environ)
    assert kw["shared_tp"] == shared_tp
    assert said in text if said else "shared experts" not in text


def test_replicated_shared_experts_are_read_whole_on_every_gpu():
    tp8 = rl.roofline(rl.seed_glm5_inputs(rl.GLM5_CHECKPOINT_WEIGHTS, ep=8, attn_dp=8)).rows[0]
    tp1 = rl.roofline(rl.seed_glm5_inputs(rl.GLM5_CHECKPOINT_WEIGHTS, ep=8, attn_dp=8, shared_tp=1))
    assert tp1.rows[0].component("shared_experts").bytes == pytest.approx(8 * tp8.component("shared_experts").bytes)
    assert tp1.rows[0].tok_s < 0.9 * tp8.tok_s  # GLM-5 on 8x RTX PRO 6000: ~57 -> ~49 tok/s
    assert any("shared experts replicated on every GPU" in line for line in tp1.assumptions)
    with pytest.raises(BadInput, match="shared-expert TP 3 must divide TP=8"):
        rl.roofline(rl.seed_glm5_inputs(shared_tp=3))


def test_attention_dp_kv_cache_holds_only_the_ranks_own_sequences(capsys):
    """sglang 0.5.23 sends each request to one attention-DP rank (round robin), which keeps its KV cache: at
    b=8 over attention DP8 a GPU reads one sequence's KV, not eight (the old roofline charged all b)."""
    from toolkit.cli import main

    args = ["roofline", "--model", "glm-5", "--gpu", "rtx-pro-6000", "--tp", "8", "--batch", "1,8,9",
            "--context", "4096", "--weights", "experts=nvfp4,rest=bf16", "--json"]
    assert main(args) == 0
    tp8 = json.loads(capsys.readouterr().out)["rows"]
    assert main(args + ["--attn-dp", "8"]) == 0
    data = json.loads(capsys.readouterr().out)
    dp8 = data["rows"]
    kv = {r["batch"]: r["kv_bytes"] for r in dp8}
    assert kv[8] == pytest.approx(kv[1]) and kv[8] == pytest.approx(tp8[0]["kv_bytes"])
    assert kv[9] == pytest.approx(2 * kv[1])  # the busiest rank holds ceil(9 / 8) = 2
    assert tp8[1]["kv_bytes"] == pytest.approx(8 * tp8[0]["kv_bytes"])  # without attention DP: all b on each GPU
    attn = {r["batch"]: next(c for c in r["components"] if c["name"] == "attention") for r in dp8}
    assert attn[8]["flops"] == pytest.approx(attn[1]["flops"])  # its own row through the replicated projections
    assert any("ceil(b / 8) sequences" in line for line in data["assumptions"])
