"""What sglang's parser accepts and the model's path does not honor: a flag echoed in /server_info that
the path never reads (a warning), a combination refused only at model load (refused before any
launch), each for the release its rule was read against (toolkit/run/release_rules.py)."""

from __future__ import annotations

from toolkit.run.release_rules import Where, release_rules

GLM5 = Where("GlmMoeDsaForCausalLM", (12, 0))

SBO = {"enable_single_batch_overlap": True, "moe_a2a_backend": "none"}


def test_sbo_without_an_all_to_all_backend_is_said_inert_for_glm5_decode():
    (line,) = release_rules(SBO, "0.5.23", GLM5, "inert")
    assert line.startswith("sglang 0.5.23: --enable-single-batch-overlap with moe_a2a_backend none")
    assert "a decode difference from the baseline is not SBO's" in line


def test_sbo_where_it_acts_or_another_release_or_model_says_nothing():
    assert release_rules({**SBO, "moe_a2a_backend": "deepep"}, "0.5.23", GLM5, "inert") == []
    assert release_rules({**SBO, "enable_single_batch_overlap": False}, "0.5.23", GLM5, "inert") == []
    assert release_rules(SBO, "0.5.10.post1", GLM5, "inert") == []  # not read against that release
    assert release_rules(SBO, "0.5.23", Where("Qwen3MoeForCausalLM", (12, 0)), "inert") == []  # another model's MoE path


def test_a_combination_sglang_refuses_at_load_is_refused_before_any_launch():
    fields = {"moe_runner_backend": "cutlass", "quantization": "modelopt_fp4"}
    (line,) = release_rules(fields, "0.5.23", GLM5, "load")
    assert "raises NotImplementedError when the NVFP4 MoE builds its runner" in line
    assert release_rules({**fields, "moe_runner_backend": "flashinfer_cutlass"}, "0.5.23", GLM5, "load") == []
    assert release_rules(fields, "0.5.23", GLM5, "inert") == []


def test_the_sweeps_runners_that_cannot_run_nvfp4_on_sm120_are_refused_before_a_launch():
    nvfp4 = {"quantization": "modelopt_fp4"}
    for runner in ("triton", "deep_gemm", "flashinfer_trtllm"):
        (line,) = release_rules({**nvfp4, "moe_runner_backend": runner}, "0.5.23", GLM5, "load")
        assert runner in line
    # trtllm-gen runs on SM100: refused only where its cubins cannot run
    assert release_rules({**nvfp4, "moe_runner_backend": "flashinfer_trtllm"}, "0.5.23",
                         Where("GlmMoeDsaForCausalLM", (10, 0)), "load") == []
    assert release_rules({**nvfp4, "moe_runner_backend": "flashinfer_trtllm"}, "0.5.23", Where("x"), "load") == []
    assert release_rules({"moe_runner_backend": "triton"}, "0.5.23", GLM5, "load") == []  # BF16 experts
    assert release_rules({**nvfp4, "moe_runner_backend": "flashinfer_cutlass"}, "0.5.23", GLM5, "load") == []


def test_a_graph_flag_whose_graphs_are_off_or_sized_otherwise_is_said_inert():
    """`--cuda-graph-max-bs-decode 8` on CPU: /server_info echoes 8, the decode graphs sglang resolved are
    disabled with max_bs 32 (a real sglang 0.5.23 launch, tests/test_real_sglang.py)."""
    cpu = {"cuda_graph_max_bs_decode": 8, "cuda_graph_config": {"decode": {"backend": "disabled", "max_bs": 32}}}
    (line,) = release_rules(cpu, "0.5.23", Where("Glm4MoeForCausalLM"), "inert")
    assert line.startswith("sglang 0.5.23: --cuda-graph-max-bs-decode") and "no effect" in line
    on = {"cuda_graph_max_bs_decode": 8, "cuda_graph_config": {"decode": {"backend": "full", "max_bs": 8}}}
    assert release_rules(on, "0.5.23", GLM5, "inert") == []
    assert release_rules({"cuda_graph_config": cpu["cuda_graph_config"]}, "0.5.23", GLM5, "inert") == []  # not given


def test_flashinfer_attention_on_cpu_is_refused_before_a_launch():
    fields = {"device": "cpu", "attention_backend": "flashinfer"}
    (line,) = release_rules(fields, "0.5.23", Where("Glm4MoeForCausalLM"), "load")
    assert "NameError: BatchPrefillWithRaggedKVCacheWrapper" in line
    assert release_rules({**fields, "attention_backend": "torch_native"}, "0.5.23", Where("x"), "load") == []
    assert release_rules({**fields, "device": "cuda"}, "0.5.23", Where("x"), "load") == []
