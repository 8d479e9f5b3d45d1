"""What sglang's parser accepts that the model's path does not honor, read against one release (pure).

`/server_info` echoes a flag as set whether or not the code the model runs reads it, so a recipe can
pass every check and measure the baseline twice (the brief's "EP8" script that never passed
`--ep-size 8`, one level down); and some combinations parse and resolve, then fail when the model
loads, after a launch's minutes. Each rule was read against one sglang release's source and names it;
it applies to that release only. The static check prints an `inert` rule's line as a warning (stored
with the run) and refuses on a `load` rule, before any launch (a sweep prunes the variant, with it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

from toolkit.run.parallel_layout import enabled

DEEPSEEK_FAMILY = ("DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM",
                   "GlmMoeDsaForCausalLM", "Glm4MoeForCausalLM")


@dataclass(frozen=True)
class Where:
    """What a rule reads besides the resolved fields: the model and the target GPU."""

    architecture: str = ""
    capability: tuple | None = None  # the [target]'s compute capability, (12, 0) for SM120; None: no target
    cpu_amx: bool | None = None  # --device cpu: whether the CPU the server runs on has AMX tiles; None: unknown


@dataclass(frozen=True)
class Rule:
    release: str  # the sglang version the rule was read against
    kind: str  # "inert": accepted and echoed, not read on this path; "load": refused when the model loads
    applies: Callable[[Mapping, Where], bool]  # (resolved fields, model and target) -> holds here
    text: str


def _nvfp4(f: Mapping) -> bool:
    return str(f.get("quantization")) == "modelopt_fp4"


def _sm12x(w: Where) -> bool:
    return w.capability is not None and int(w.capability[0]) == 12


RULES = (
    Rule("0.5.23", "inert",
         lambda f, w: enabled(f.get("enable_single_batch_overlap")) and str(f.get("moe_a2a_backend", "none")) == "none"
         and w.architecture in DEEPSEEK_FAMILY,
         "--enable-single-batch-overlap with moe_a2a_backend none: sglang 0.5.23 overlaps SBO's combine only in "
         "its all-to-all MoE path (models/deepseek_v2.py forward_deepep); a decode step captured in a CUDA graph "
         "takes forward_normal_dual_stream, which puts the shared expert on a second stream with or without the "
         "flag, so it acts only on eager forwards (prefills, decode batches above the graphs' max_bs): a decode "
         "difference from the baseline is not SBO's"),
    Rule("0.5.23", "load",
         lambda f, w: str(f.get("moe_runner_backend")) == "cutlass" and _nvfp4(f),
         "--moe-runner-backend cutlass with modelopt_fp4: sglang 0.5.23 parses and resolves it, then raises "
         "NotImplementedError when the NVFP4 MoE builds its runner at model load "
         "(layers/quantization/modelopt_quant.py create_moe_runner; use flashinfer_cutlass)"),
    Rule("0.5.23", "load",
         lambda f, w: str(f.get("moe_runner_backend")) in ("triton", "deep_gemm") and _nvfp4(f),
         "--moe-runner-backend triton or deep_gemm with modelopt_fp4: sglang 0.5.23 accepts it and builds the "
         "runner, but the NVFP4 MoE's apply has no branch for it and raises NotImplementedError ('Unsupported "
         "moe_runner_backend for NVFP4 MoE') at the first forward (layers/quantization/modelopt_quant.py)"),
    Rule("0.5.23", "load",
         lambda f, w: str(f.get("moe_runner_backend")) == "flashinfer_trtllm" and _nvfp4(f) and _sm12x(w),
         "--moe-runner-backend flashinfer_trtllm with modelopt_fp4 on an SM12x target: sglang 0.5.23 keeps the "
         "explicit value (it resolves only `auto` to flashinfer_cutlass on SM120), and FlashInfer 0.7.2's "
         "trtllm-gen MoE ships cubins for sm100/103/107 only: its FLASHINFER_CHECK fails ('no kernels runnable "
         "on sm120', csrc/trtllm_batched_gemm_runner.cu)"),
    Rule("0.5.23", "load",
         lambda f, w: str(f.get("moe_runner_backend")) == "flashinfer_cutlass"
         and str(f.get("moe_a2a_backend", "none")) not in ("none", "flashinfer") and _nvfp4(f),
         "--moe-a2a-backend other than none/flashinfer with the flashinfer_cutlass MoE runner (what modelopt_fp4 "
         "resolves to on SM120): sglang 0.5.23 registers that runner's fused function for the a2a backends none "
         "and flashinfer only (layers/moe/moe_runner/flashinfer_cutlass.py), and it has no runner core, so "
         "MoeRunner raises NotImplementedError ('requires a fused func for a2a backend ...') when FusedMoE is "
         "built at model load (layers/moe/moe_runner/runner.py); DeepEP's normal mode also wants NVLink, which "
         "PCIe-only cards lack"),
)


def _graph_phase(f: Mapping, phase: str) -> Mapping:
    cfg = f.get("cuda_graph_config")
    return (cfg.get(phase) or {}) if isinstance(cfg, Mapping) else {}


def _graph_flag_ignored(f: Mapping, phase: str) -> bool:
    """--cuda-graph-max-bs-<phase> given, and the phase's resolved graphs are off or another max_bs."""
    given, c = f.get(f"cuda_graph_max_bs_{phase}"), _graph_phase(f, phase)
    return given is not None and bool(c) and (str(c.get("backend")) == "disabled"
                                               or str(c.get("max_bs")) != str(given))


RULES = RULES + tuple(
    Rule("0.5.23", "inert", lambda f, w, phase=phase: _graph_flag_ignored(f, phase),
         f"--cuda-graph-max-bs-{phase}: sglang 0.5.23 echoes the flag in /server_info, but the {phase} graphs it "
         f"resolved (cuda_graph_config.{phase}, arg_groups/cuda_graph_hook.py) are disabled or capture another "
         "max_bs: the flag had no effect on this launch (on --device cpu graphs are off unless enabled)")
    for phase in ("decode", "prefill")) + (
    Rule("0.5.23", "load",
         lambda f, w: str(f.get("device")) == "cpu" and str(f.get("attention_backend")) == "flashinfer",
         "--attention-backend flashinfer with --device cpu: sglang 0.5.23 imports FlashInfer's wrappers only when "
         "the CUDA build of flashinfer is available (layers/attention/flashinfer_backend.py), so the server "
         "dies at its first forward with NameError: BatchPrefillWithRaggedKVCacheWrapper (use torch_native or "
         "intel_amx on CPU)"),
)


# DeepSeek Sparse Attention (DSA) models. sglang 0.5.23 sets attention_backend "dsa" for them only when
# no attention backend is given (arg_groups/model_overrides/deepseek_v2.py:99-104); an explicit one is kept.
DSA_ARCHS = ("GlmMoeDsaForCausalLM", "DeepseekV32ForCausalLM")
_DSA_NAMES = ("dsa", "nsa")  # "nsa": 0.5.23's deprecated alias (layers/attention/attention_registry.py:166)


def _attn(f: Mapping, phase: str) -> str:
    """The attention backend 0.5.23 runs for `phase` (prefill/decode): the split flag, else --attention-backend."""
    return str(f.get(f"{phase}_attention_backend") or f.get("attention_backend"))


def _dsa_attention_off(f: Mapping, w: Where) -> bool:
    return w.architecture in DSA_ARCHS and f.get("attention_backend") is not None and not {_attn(f, "prefill"), _attn(f, "decode")} & set(_DSA_NAMES)


def _dsa_scaled_fp8_rows(f: Mapping) -> bool:
    """The DSA KV pool's fp8 rows carry per-block scales (656 B, not the 576 an MLA kernel reads): 0.5.23's
    calculate_mla_kv_cache_dim (mem_cache/kv_cache_configurator.py:3413-3475), unless a DSA backend is
    trtllm or both are tilelang."""
    dsa = (str(f.get("dsa_prefill_backend")), str(f.get("dsa_decode_backend")))
    return str(f.get("kv_cache_dtype")) == "fp8_e4m3" and "trtllm" not in dsa and dsa != ("tilelang", "tilelang")


def _glm_dsa_sm12x_refused(f: Mapping, w: Where) -> bool:
    """DeepseekSparseAttnBackend's init (layers/attention/dsa_backend.py:742-752) runs sglang's
    _validate_flashinfer_sparse_mla_backend (kernels/ops/attention/flash_mla_sm120.py:678-713)."""
    if w.architecture != "GlmMoeDsaForCausalLM" or not _sm12x(w) or _dsa_attention_off(f, w):
        return False
    prefill, decode, kv = (f.get(k) for k in ("dsa_prefill_backend", "dsa_decode_backend", "kv_cache_dtype"))
    if prefill is None or decode is None or str(kv) in ("None", "auto"):  # not resolved: nothing to read
        return False
    if str(kv) != "fp8_e4m3":
        return "flashinfer_sparse_mla" in (str(prefill), str(decode))
    return str(decode) != "flashinfer_sparse_mla" or str(prefill) not in ("flashinfer_sparse_mla", "triton_sparse_mla")


def _dsa_trtllm_sm12x(f: Mapping, w: Where) -> bool:
    """A DSA backend is trtllm (set, or 0.5.23's default from SM10 up: arg_groups/overrides.py:714-725,
    or --dcp-size > 1's, arg_groups/model_overrides/deepseek_v2.py:27-31) while the DSA attention runs, on
    SM12x; GLM-5's fp8 refusal (_glm_dsa_sm12x_refused) comes earlier and says it."""
    if w.architecture not in DSA_ARCHS or not _sm12x(w) or _dsa_attention_off(f, w) or _glm_dsa_sm12x_refused(f, w):
        return False
    return "trtllm" in (str(f.get("dsa_prefill_backend")), str(f.get("dsa_decode_backend")))


RULES = RULES + (
    Rule("0.5.23", "load", _dsa_trtllm_sm12x,
         "--dsa-prefill-backend/--dsa-decode-backend trtllm for a DSA model (DeepSeek-V3.2, GLM-5) on an SM12x "
         "target: sglang 0.5.23 accepts it (arg_groups/fields/exec_.py:299-360; _check_dsa_backend_constraints, "
         "arg_groups/overrides.py:550-585, checks only triton and tilelang) and even resolves it as the default "
         "from SM10 up (arg_groups/overrides.py:716 and :724, where major >= 10 takes SM12x too); its DSA backend then runs "
         "trtllm-gen sparse MLA (layers/attention/dsa_backend.py:2210, 2567 -> _forward_trtllm, "
         "backend='trtllm-gen' at :3982), and FlashInfer 0.7.2's TllmGenFmhaRunner accepts SM100/103/107 "
         "only (include/flashinfer/trtllm/fmha/fmhaRunner.cuh:37: 'Unsupported architecture'): it fails when "
         "the decode graphs are captured at model load (at the first forward without graphs). Name SM12x "
         "kernels explicitly for both phases (e.g. tilelang for both with fp8 KV: not verified on SM12x here)"),
    Rule("0.5.23", "load",
         lambda f, w: w.architecture in DSA_ARCHS and _sm12x(w) and _attn(f, "decode") == "flashmla",
         "--attention-backend flashmla for a DSA model (GLM-5, DeepSeek-V3.2) on an SM12x target: sglang 0.5.23 "
         "keeps the explicit backend (arg_groups/model_overrides/deepseek_v2.py:102), which builds no DSA "
         "metadata (layers/attention/base_attn_backend.py:407), so the indexer gives no top-k "
         "(layers/attention/dsa/dsa_indexer.py:1952) and decode takes FlashMLA's dense kernel, which exists "
         "only in the SM90 build (flash_mla/flash_mla_interface.py:174-186; its _C_legacy extension: 'Dense "
         "decode MLA is only supported on SM90a architecture'): it fails when the decode graphs are captured at model load (at the "
         "first decode without graphs). GLM-5's decode "
         "kernel is --dsa-decode-backend's (on SM120 with fp8 KV: flashinfer_sparse_mla)"),
    Rule("0.5.23", "load",
         lambda f, w: w.architecture in DSA_ARCHS and _sm12x(w) and _attn(f, "decode") == "trtllm_mla"
         and _dsa_scaled_fp8_rows(f),
         "--attention-backend trtllm_mla for a DSA model (GLM-5, DeepSeek-V3.2) on an SM12x target with fp8 KV: "
         "sglang 0.5.23 keeps the explicit backend (arg_groups/model_overrides/deepseek_v2.py:102) and accepts "
         "it on SM12x (arg_groups/overrides.py _mla_kv_cache_dtype_checks), but the model still gets the DSA "
         "KV pool, whose fp8 rows hold per-block scales (656 B; mem_cache/kv_cache_configurator.py:3413-3475, "
         "dsa backends not trtllm); FlashInfer 0.7.2 sends SM12x dense MLA decode to XQA (flashinfer/mla/_core.py:4206), "
         "which raises ValueError ('Expected head dim 576 for query and kv_cache, got 576 and 656', "
         "flashinfer/mla/_core.py:806) when the decode graphs are captured at model load (at the first decode "
         "without graphs). GLM-5's decode kernel is "
         "--dsa-decode-backend's (on SM120 with fp8 KV: flashinfer_sparse_mla)"),
    Rule("0.5.23", "load", _glm_dsa_sm12x_refused,
         "--dsa-prefill-backend/--dsa-decode-backend for GLM-5 (GlmMoeDsaForCausalLM) on an SM12x target: "
         "sglang 0.5.23 parses and resolves any of its choices, then the DSA attention backend refuses at model "
         "load (kernels/ops/attention/flash_mla_sm120.py:694-712, from layers/attention/dsa_backend.py:746) "
         "all but decode flashinfer_sparse_mla with prefill flashinfer_sparse_mla or triton_sparse_mla, on an "
         "fp8_e4m3 KV cache (with any other KV dtype it refuses flashinfer_sparse_mla)"),
    Rule("0.5.23", "inert", _dsa_attention_off,
         "a DSA model (GLM-5, DeepSeek-V3.2) with an attention backend other than dsa: sglang 0.5.23 keeps the "
         "explicit backend (arg_groups/model_overrides/deepseek_v2.py:102), which builds no DSA metadata "
         "(layers/attention/base_attn_backend.py:407), so the indexer returns no top-k "
         "(layers/attention/dsa/dsa_indexer.py:1952) and every layer attends densely: /server_info still echoes "
         "dsa_prefill_backend/dsa_decode_backend, which pick only the KV pool's layout here. This is not the "
         "model's sparse attention (the same attention only while a context fits in index_topk tokens)"),
)


def release_rules(fields: Mapping, version: str | None, where: Where, kind: str) -> list[str]:
    """The lines of the `kind` rules read against `version` that hold for these resolved fields."""
    return [f"sglang {r.release}: {r.text}" for r in RULES
            if r.kind == kind and version == r.release and r.applies(fields, where)]


# sglang 0.5.23 on --device cpu: the KV cache dtypes it stores as float8_e4m3fn ("fp8_e4m3", and "mxfp8":
# mem_cache/kv_cache_dtype.py:67-73) pass the parser and the resolution, then the KV cache configurator
# raises at model load unless the model is MHA, the CPU backend has AMX and every attention backend is
# intel_amx (mem_cache/kv_cache_configurator.py:459-468). Its AMX test (utils/common.py:354-372,
# cpu_has_amx_support) also wants sgl_kernel's CPU build (torch.ops.sgl_kernel.convert_weight_packed), which
# a CPU env on the stand-in (upstream/sgl-kernel-standin) lacks; and intel_amx without AMX resolves to
# torch_native (arg_groups/overrides.py:1301-1309).
MLA_ARCHS = ("DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "GlmMoeDsaForCausalLM")


def _cpu_fp8_kv_refused(f: Mapping, w: Where) -> bool:
    if str(f.get("device")) != "cpu" or str(f.get("kv_cache_dtype")) not in ("fp8_e4m3", "mxfp8"):
        return False
    backends = {_attn(f, "prefill"), _attn(f, "decode")} - {"None"}
    return w.architecture in MLA_ARCHS or w.cpu_amx is False or bool(backends - {"intel_amx"})


RULES = RULES + (
    Rule("0.5.23", "load", _cpu_fp8_kv_refused,
         "--kv-cache-dtype fp8_e4m3 (or mxfp8) with --device cpu: sglang 0.5.23 parses and resolves it, then its "
         "KV cache configurator raises ValueError at model load ('CPU FP8 KV cache requires Intel AMX support.', "
         "'... requires the intel_amx attention backend.', '... is only supported for MHA.'; "
         "mem_cache/kv_cache_configurator.py:459-468) unless the model is MHA, the CPU has AMX with sgl_kernel's "
         "CPU build (utils/common.py:354-372; not the stand-in) and both attention backends are intel_amx "
         "(use the model's dtype: kv-cache-dtype auto)"),
    Rule("0.5.23", "load",
         lambda f, w: str(f.get("device")) == "cpu" and str(f.get("kv_cache_dtype")) == "fp8_e5m2",
         "--kv-cache-dtype fp8_e5m2 with --device cpu: sglang 0.5.23 parses and resolves it, then raises "
         "ValueError ('--kv-cache-dtype fp8_e5m2 is not supported on CPU.') when the model loads "
         "(mem_cache/kv_cache_dtype.py:60-62)"),
)
