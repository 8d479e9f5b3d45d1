"""Flags sglang accepts and echoes in /server_info on a path that never reads them: the static check
says so for the release each rule was read against (toolkit/run/inert_flags.py)."""

from __future__ import annotations

from toolkit.run.inert_flags import inert_flags

SBO = {"enable_single_batch_overlap": True, "moe_a2a_backend": "none"}


def test_sbo_without_an_all_to_all_backend_is_said_inert_for_glm5_decode():
    (line,) = inert_flags(SBO, "0.5.23", "GlmMoeDsaForCausalLM")
    assert line.startswith("sglang 0.5.23: --enable-single-batch-overlap with moe_a2a_backend none")
    assert "a decode difference from the baseline is not SBO's" in line


def test_sbo_where_it_acts_or_another_release_or_model_says_nothing():
    assert inert_flags({**SBO, "moe_a2a_backend": "deepep"}, "0.5.23", "GlmMoeDsaForCausalLM") == []
    assert inert_flags({**SBO, "enable_single_batch_overlap": False}, "0.5.23", "GlmMoeDsaForCausalLM") == []
    assert inert_flags(SBO, "0.5.10.post1", "GlmMoeDsaForCausalLM") == []  # not read against that release
    assert inert_flags(SBO, "0.5.23", "Qwen3MoeForCausalLM") == []  # another model's MoE path
