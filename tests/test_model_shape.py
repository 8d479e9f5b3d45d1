"""Model-shape rules (patchbench's, not sglang's) on GLM-5's real config (256 experts, 64 heads)."""

from __future__ import annotations

import pytest

from toolkit.run.model_shape import check_model_shape
from toolkit.roofline import load_model_config

RTX_PRO_6000 = 97887 * (1 << 20)  # bytes, as the device reports
WEIGHTS = "experts=nvfp4,rest=bf16"


@pytest.fixture(scope="module")
def glm5():
    return load_model_config("glm-5")[1]


def rules(check):
    return [v.rule for v in check.violations]


def test_tp8_and_ep8_pass_and_the_weights_fit(glm5):
    for args in ({"tp_size": 8, "ep_size": 1}, {"tp_size": 8, "ep_size": 8}):
        check = check_model_shape(glm5, {**args, "mem_fraction_static": 0.85}, weights=WEIGHTS,
                                  memory_bytes=RTX_PRO_6000, gpu_count=8)
        assert check.ok, check.violations
        # ~441 GB of checkpoint over 8 GPUs is ~55 GB; the model counts a little more (no tied embeddings)
        assert 50 < check.weights_per_gpu_gb < 65
        assert check.budget_gb == pytest.approx(97887 * 2**20 * 0.85 / 1e9)


def test_ep3_on_tp8_breaks_two_rules_and_says_whose(glm5):
    check = check_model_shape(glm5, {"tp_size": 8, "ep_size": "3"}, weights=WEIGHTS)
    assert rules(check) == ["ep-divides-experts", "ep-divides-tp"]
    text = check.violations[0].text()
    assert "ep-size 3 does not divide the 256 routed experts" in text
    assert "patchbench's model-shape rule" in text and "not sglang's" in text


def test_tp_must_divide_the_attention_heads_or_the_dp_attention_layout(glm5):
    assert rules(check_model_shape(glm5, {"tp_size": 6})) == ["tp-divides-heads"]
    # DP attention: attention TP = 8 / 2 = 4 divides 64 heads
    assert check_model_shape(glm5, {"tp_size": 8, "dp_size": 2, "enable_dp_attention": True}).ok
    assert rules(check_model_shape(glm5, {"tp_size": 8, "dp_size": 3, "enable_dp_attention": True})) == \
        ["tp-divides-heads"]


def test_attention_dp_is_read_however_it_is_written(glm5):
    """The static check hands 0.5.23's resolved fields (attn_dp_size 8, dp_size 1: sglang moved the
    old spelling there) or a recipe's --attn-dp-size: each is the same layout as --dp-size 8
    --enable-dp-attention (attention replicated on every GPU), not plain TP 8."""
    old = check_model_shape(glm5, {"tp_size": 8, "dp_size": 8, "enable_dp_attention": True}, weights=WEIGHTS)
    resolved = check_model_shape(glm5, {"tp_size": 8, "dp_size": 1, "attn_dp_size": 8,
                                        "enable_dp_attention": True}, weights=WEIGHTS)
    flag = check_model_shape(glm5, {"tp_size": 8, "attn_dp_size": 8}, weights=WEIGHTS)
    plain = check_model_shape(glm5, {"tp_size": 8}, weights=WEIGHTS)
    assert old.weights_per_gpu_gb == resolved.weights_per_gpu_gb == flag.weights_per_gpu_gb
    assert old.weights_per_gpu_gb > plain.weights_per_gpu_gb  # attention weights not split 8 ways
    assert rules(check_model_shape(glm5, {"tp_size": 8, "attn_dp_size": 3})) == ["tp-divides-heads"]


def test_weights_must_fit_memory_at_mem_fraction_static(glm5):
    check = check_model_shape(glm5, {"tp_size": 4, "mem_fraction_static": 0.85}, weights=WEIGHTS,
                              memory_bytes=RTX_PRO_6000, gpu_count=8)
    assert rules(check) == ["weights-fit"]
    assert "exceed" in check.violations[0].message and "mem-fraction-static 0.85" in check.violations[0].message
    # unresolved fraction: not checked, and said so
    check = check_model_shape(glm5, {"tp_size": 4}, weights=WEIGHTS, memory_bytes=RTX_PRO_6000)
    assert check.ok and check.notes == ("weights-fit not checked: mem-fraction-static unresolved",)


def test_layout_needs_the_target_gpus(glm5):
    check = check_model_shape(glm5, {"tp_size": 16}, gpu_count=8)
    assert "gpus-cover-layout" in rules(check)


def test_gqa_kv_heads(load=load_model_config):
    _, qwen = load("qwen3-30b-a3b")  # 32 heads, 4 KV heads, 128 experts
    assert check_model_shape(qwen, {"tp_size": 8, "ep_size": 8}).ok  # KV heads replicated over 8
    assert rules(check_model_shape(qwen, {"tp_size": 8, "ep_size": 3})) == ["ep-divides-experts", "ep-divides-tp"]


def test_weights_fit_counts_what_sglang_replicates_or_shards_by_the_resolved_layout(glm5):
    """sglang 0.5.23 builds GLM-5's shared experts replicated under an all-to-all MoE backend or the
    FlashInfer cutlass FP4 all-gather (models/deepseek_v2.py DeepseekV2MoE), the dense MLP replicated with
    moe_dense_tp_size 1, and each expert over tp / moe_dp_size: one GPU holds that much more."""
    base = {"tp_size": 8, "ep_size": 8, "attn_dp_size": 8, "dp_size": 1, "mem_fraction_static": 0.8,
            "moe_runner_backend": "flashinfer_cutlass", "quantization": "modelopt_fp4"}

    def gb(args, environ=None):
        return check_model_shape(glm5, args, weights=WEIGHTS, memory_bytes=RTX_PRO_6000, gpu_count=8,
                                 environ=environ)

    plain = gb({**base, "disable_flashinfer_cutlass_moe_fp4_allgather": True})
    assert plain.ok
    # GLM-5's shared experts: 75 MoE layers x 3 x 6144 x 2048 bf16 = 5.66 GB, whole instead of an eighth
    shared = 75 * 3 * 6144 * 2048 * 2 / 1e9
    assert gb({**base, "moe_a2a_backend": "deepep"}).weights_per_gpu_gb == pytest.approx(
        plain.weights_per_gpu_gb + shared * 7 / 8)
    tp8 = {"tp_size": 8, "mem_fraction_static": 0.8}
    assert gb(tp8, {"SGLANG_SHARED_EXPERT_TP1": "1"}).weights_per_gpu_gb == pytest.approx(
        gb(tp8).weights_per_gpu_gb + shared * 7 / 8)
    fp4_gather = gb(base)  # ~84.7 GB a GPU, over 97,887 MiB x 0.8 = 82.1 GB (it read 79.8 GB: fits)
    assert fp4_gather.weights_per_gpu_gb == pytest.approx(plain.weights_per_gpu_gb + shared * 7 / 8)
    assert rules(fp4_gather) == ["weights-fit"]
    dense = gb({**base, "disable_flashinfer_cutlass_moe_fp4_allgather": True, "moe_dense_tp_size": 1})
    assert dense.weights_per_gpu_gb == pytest.approx(plain.weights_per_gpu_gb + 3 * 3 * 6144 * 12288 * 2 / 1e9 * 7 / 8)
    moe_dp = gb({"tp_size": 8, "ep_size": 4, "attn_cp_size": 2, "moe_dp_size": 2, "mem_fraction_static": 0.8})
    assert moe_dp.weights_per_gpu_gb > 2 * 45  # every expert over 4 GPUs, not 8: ~100 GB of NVFP4 experts
    assert rules(moe_dp) == ["weights-fit"]
