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


def test_an_fp8_kv_cache_on_cpu_is_refused_where_sglang_refuses_it_at_load():
    """0.5.23 on --device cpu stores fp8_e4m3 as float8_e4m3fn and its KV cache configurator raises at model
    load unless MHA + AMX + intel_amx attention (a 1-4 minute launch on this CPU ended in "CPU FP8 KV
    cache requires Intel AMX support.")."""
    glm = Where("Glm4MoeForCausalLM", cpu_amx=False)
    fields = {"device": "cpu", "attention_backend": "torch_native", "kv_cache_dtype": "fp8_e4m3"}
    (line,) = release_rules(fields, "0.5.23", glm, "load")
    assert "CPU FP8 KV cache requires Intel AMX support." in line and "kv_cache_configurator.py:459-468" in line
    amx = Where("Glm4MoeForCausalLM", cpu_amx=True)
    assert release_rules(fields, "0.5.23", amx, "load")  # torch_native attention: refused with AMX too
    assert release_rules({**fields, "attention_backend": "intel_amx"}, "0.5.23", glm, "load")  # no AMX here
    amx_ok = {**fields, "attention_backend": "intel_amx"}
    assert release_rules(amx_ok, "0.5.23", amx, "load") == []  # what 0.5.23 serves
    assert release_rules({**amx_ok, "decode_attention_backend": "torch_native"}, "0.5.23", amx, "load")
    assert release_rules(amx_ok, "0.5.23", Where("DeepseekV3ForCausalLM", cpu_amx=True), "load")  # MLA
    (e5m2,) = release_rules({**fields, "kv_cache_dtype": "fp8_e5m2"}, "0.5.23", amx, "load")
    assert "fp8_e5m2 is not supported on CPU" in e5m2
    assert release_rules({**fields, "kv_cache_dtype": "auto"}, "0.5.23", glm, "load") == []
    assert release_rules({**fields, "device": "cuda"}, "0.5.23", glm, "load") == []
    assert release_rules(fields, "0.5.10.post1", glm, "load") == []  # read against 0.5.23 only


# What sglang 0.5.23's static check resolves for GLM-5-NVFP4 on the SM120 target (`run --until check`):
# attention `dsa`, an fp8_e4m3 KV cache and both DSA backends flashinfer_sparse_mla.
GLM5_SM120 = {"attention_backend": "dsa", "kv_cache_dtype": "fp8_e4m3",
              "dsa_prefill_backend": "flashinfer_sparse_mla", "dsa_decode_backend": "flashinfer_sparse_mla"}


def test_sm120_backends_attention_backends_that_cannot_serve_glm5_are_refused_before_a_launch():
    """sm120-backends swept --attention-backend trtllm_mla and flashmla: the static check passed both, and
    on SM120 GLM-5 would have failed at model load (dense MLA kernels over the DSA pool, FlashMLA's dense
    decode SM90-only) after minutes of loading weights."""
    assert release_rules(GLM5_SM120, "0.5.23", GLM5, "load") == []  # the default serves
    (line,) = release_rules({**GLM5_SM120, "attention_backend": "flashmla"}, "0.5.23", GLM5, "load")
    assert "--attention-backend flashmla for a DSA model" in line and "SM90a" in line
    (line,) = release_rules({**GLM5_SM120, "attention_backend": "trtllm_mla"}, "0.5.23", GLM5, "load")
    assert "--attention-backend trtllm_mla for a DSA model" in line and "got 576 and 656" in line
    assert "--dsa-decode-backend" in line  # where the decode kernel of GLM-5 is chosen
    # the split flag is the one decode reads
    assert len(release_rules({**GLM5_SM120, "decode_attention_backend": "flashmla"}, "0.5.23", GLM5, "load")) == 1
    # trtllm_mla's dense path reads raw 576-wide rows when a DSA backend is trtllm (DeepSeek-V3.2's SM12x default)
    v32 = Where("DeepseekV32ForCausalLM", (12, 0))
    raw = {**GLM5_SM120, "attention_backend": "trtllm_mla", "dsa_prefill_backend": "trtllm", "dsa_decode_backend": "trtllm"}
    assert release_rules(raw, "0.5.23", v32, "load") == []
    # not a DSA model, another GPU, another release: nothing said
    assert release_rules({**GLM5_SM120, "attention_backend": "flashmla"}, "0.5.23", Where("DeepseekV3ForCausalLM", (12, 0)), "load") == []
    assert release_rules({**GLM5_SM120, "attention_backend": "flashmla"}, "0.5.23", Where("GlmMoeDsaForCausalLM", (9, 0)), "load") == []
    assert release_rules({**GLM5_SM120, "attention_backend": "flashmla"}, "0.5.10.post1", GLM5, "load") == []


def test_glm5_dsa_backends_sglang_refuses_at_load_on_sm120_are_refused_before_a_launch():
    """DeepseekSparseAttnBackend's init (flash_mla_sm120.py) accepts only decode flashinfer_sparse_mla (prefill
    also triton_sparse_mla) for GLM on SM12x with fp8 KV; the parser accepts every choice."""
    for decode in ("trtllm", "flashmla_kv", "flashmla_sparse", "fa3", "tilelang"):
        (line,) = release_rules({**GLM5_SM120, "dsa_decode_backend": decode}, "0.5.23", GLM5, "load")
        assert "flash_mla_sm120.py" in line
    assert release_rules({**GLM5_SM120, "dsa_prefill_backend": "triton_sparse_mla"}, "0.5.23", GLM5, "load") == []
    assert len(release_rules({**GLM5_SM120, "dsa_prefill_backend": "flashmla_sparse"}, "0.5.23", GLM5, "load")) == 1
    bf16 = {**GLM5_SM120, "kv_cache_dtype": "bfloat16"}
    assert len(release_rules(bf16, "0.5.23", GLM5, "load")) == 1  # flashinfer_sparse_mla wants fp8 KV
    assert release_rules({**GLM5_SM120, "dsa_decode_backend": "trtllm"}, "0.5.23",
                         Where("GlmMoeDsaForCausalLM", (10, 0)), "load") == []  # SM100: not this rule's
    assert release_rules({**GLM5_SM120, "dsa_decode_backend": None}, "0.5.23", GLM5, "load") == []  # unresolved


def test_a_dsa_model_on_a_dense_attention_backend_is_said_to_attend_densely():
    (line,) = release_rules({**GLM5_SM120, "attention_backend": "trtllm_mla", "kv_cache_dtype": "bfloat16"},
                            "0.5.23", GLM5, "inert")
    assert "every layer attends densely" in line
    assert release_rules(GLM5_SM120, "0.5.23", GLM5, "inert") == []
    assert release_rules({**GLM5_SM120, "attention_backend": "nsa"}, "0.5.23", GLM5, "inert") == []
    assert release_rules({**GLM5_SM120, "attention_backend": "triton"}, "0.5.23",
                         Where("Glm4MoeForCausalLM", (12, 0)), "inert") == []


def test_dsa_trtllm_backends_on_sm12x_are_refused_before_a_launch():
    """sglang 0.5.23 takes --dsa-*-backend trtllm for DeepSeek-V3.2 on SM12x (and resolves it as the default
    there: `major >= 10`), then runs trtllm-gen sparse MLA, which FlashInfer 0.7.2's runner refuses off
    SM100/103/107: the launch would fail at model load after minutes of loading weights."""
    v32 = Where("DeepseekV32ForCausalLM", (12, 0))
    fp8 = {"attention_backend": "dsa", "kv_cache_dtype": "fp8_e4m3", "dsa_prefill_backend": "trtllm",
           "dsa_decode_backend": "trtllm"}  # what 0.5.23 resolves for DeepSeek-V3.2 on SM120 by default
    (line,) = release_rules(fp8, "0.5.23", v32, "load")
    assert "--dsa-prefill-backend/--dsa-decode-backend trtllm for a DSA model" in line
    assert "fmhaRunner.cuh:37" in line and "arg_groups/overrides.py:716" in line
    for one in ({**fp8, "dsa_prefill_backend": "tilelang"}, {**fp8, "dsa_decode_backend": "flashmla_kv"},
                {**fp8, "kv_cache_dtype": "bfloat16", "dsa_prefill_backend": "flashmla_sparse"}):
        assert len(release_rules(one, "0.5.23", v32, "load")) == 1  # either phase on trtllm
    assert release_rules({**fp8, "dsa_prefill_backend": "tilelang", "dsa_decode_backend": "tilelang"}, "0.5.23",
                         v32, "load") == []
    # GLM-5: bf16 KV with trtllm is this rule's; its fp8 refusal is said once, by its own rule
    (line,) = release_rules({**fp8, "kv_cache_dtype": "bfloat16"}, "0.5.23", GLM5, "load")
    assert "fmhaRunner.cuh:37" in line
    (line,) = release_rules({**GLM5_SM120, "dsa_decode_backend": "trtllm"}, "0.5.23", GLM5, "load")
    assert "flash_mla_sm120.py" in line
    # SM100 (trtllm-gen's own), a dense attention backend (no DSA kernel runs), another release: nothing
    assert release_rules(fp8, "0.5.23", Where("DeepseekV32ForCausalLM", (10, 0)), "load") == []
    assert len(release_rules({**fp8, "attention_backend": "flashinfer"}, "0.5.23", v32, "load")) == 0
    assert release_rules(fp8, "0.5.10.post1", v32, "load") == []
