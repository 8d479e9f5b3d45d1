"""A server's parallel layout from its args: recipe flags or ServerArgs fields (pure).

`layout(args)`: tp, dp, pp, ep, base_gpu_id, gpu_id_step, nnodes, the attention-DP width; `gpu_count(args)`:
the GPUs one launch holds (tp x pp per DP replica; attention DP runs within tp).

The attention-DP width, whichever way the args say it: sglang 0.5.23 spells attention data
parallelism `--attn-dp-size N`; the older `--dp-size N --enable-dp-attention` is still accepted and moved there (srt/arg_groups/parallel_hook.py,
handle_deprecated_dp_attention: attn_dp_size = N, dp_size = 1), and a resolved config reports
enable_dp_attention set whenever attention DP runs. So the width is read from recipe flags
(`attn-dp-size`, or `dp-size` with `enable-dp-attention`), from 0.5.23's resolved fields (attn_dp_size
with dp_size 1) and from older releases' fields (dp_size with enable_dp_attention) alike.

`roofline_layout(info)`: the decode roofline's parallel arguments (toolkit.roofline.make_inputs; moe_dp_size,
the all-to-all MoE backend and its dispatch dtype (`a2a_dispatch_dtype`), the FlashInfer FP4 all-gather
(`fp4_allgather`), dcp_size with its dcp_comm_backend and dcp_replicate_q_proj, enable_cp_decode_attn_tp and
dwdp_size (the roofline refuses DWDP, with the reason) (decode context parallelism: the KV cache split) included, sglang 0.5.23 srt/runtime_context.py derive_parallel_widths) from a
run's stored /server_info (sglang's resolved config), or why there are none.

With attention DP, 0.5.23 divides the chunked prefill size among the attention-DP ranks
(_handle_data_parallelism: chunked_prefill_size // attn_dp_size): `per_rank_chunk` is that value.
"""

from __future__ import annotations

from typing import Any, Mapping

from toolkit.errors import BadInput, PatchbenchError

NO_CONFIG = "no resolved server config stored (/server_info), so the GPUs sharing the weights are unknown"


_ALIASES = {"tp_size": ("tp_size", "tp", "tensor_parallel_size"), "dp_size": ("dp_size", "dp", "data_parallel_size"),
            "pp_size": ("pp_size", "pp", "pipeline_parallel_size"), "attn_dp_size": ("attn_dp_size",),
            "ep_size": ("ep_size", "ep", "expert_parallel_size"), "moe_dp_size": ("moe_dp_size", "moe_data_parallel_size"),
            "base_gpu_id": ("base_gpu_id",), "gpu_id_step": ("gpu_id_step",), "nnodes": ("nnodes",),
            "enable_dp_attention": ("enable_dp_attention",)}
_DEFAULTS = {"tp_size": 1, "dp_size": 1, "pp_size": 1, "attn_dp_size": 1, "ep_size": 1, "moe_dp_size": 1, "base_gpu_id": 0,
             "gpu_id_step": 1, "nnodes": 1}
_INTS = ("tp_size", "dp_size", "pp_size", "ep_size", "moe_dp_size", "base_gpu_id", "gpu_id_step", "nnodes",
         "attn_dp_size")


def _norm(args) -> dict[str, Any]:
    """Flags (`tp-size`) and fields (`tp_size`) alike; a mapping or (name, value) pairs."""
    return {str(k).replace("-", "_"): v for k, v in dict(args).items()}


def _arg(norm: dict, key: str) -> Any:
    for name in _ALIASES[key]:
        if norm.get(name) is not None:
            return norm[name]
    return _DEFAULTS.get(key)


def _int(norm: dict, key: str) -> int:
    value = _arg(norm, key)
    try:
        out = int(value)
    except (TypeError, ValueError):
        raise BadInput(f"server arg {key.replace('_', '-')}={value!r} is not an integer") from None
    if out < (0 if key == "base_gpu_id" else 1):
        raise BadInput(f"server arg {key.replace('_', '-')}={value!r} is out of range")
    return out


def flag(args, name: str) -> Any:
    """A server argument by flag or field name (`chunked-prefill-size` or `chunked_prefill_size`)."""
    return _norm(args).get(name.replace("-", "_"))


def enabled(value: Any) -> bool:
    return str(value).strip().lower() in ("true", "1", "yes")


def attention_dp_size(args: Mapping) -> int:
    """How many attention-DP groups the server's TP ranks form (1: no attention DP)."""
    norm = _norm(args)
    attn = _int(norm, "attn_dp_size")
    if attn > 1:
        return attn
    return _int(norm, "dp_size") if enabled(_arg(norm, "enable_dp_attention")) else 1


def per_rank_chunk(chunk: int, attn_dp: int) -> int:
    """The chunked prefill size each attention-DP rank uses (a chunk <= 0, chunking off, is kept)."""
    return chunk // attn_dp if chunk > 0 and attn_dp > 1 else chunk


def layout(args: Mapping) -> dict:
    """tp_size, dp_size, pp_size, ep_size, moe_dp_size, base_gpu_id, gpu_id_step, nnodes, attn_dp_size and dp_attention
    (attention DP on) from ServerArgs fields or flags; BadInput on a value that is no integer or out of range."""
    norm = _norm(args)
    out: dict[str, Any] = {key: _int(norm, key) for key in _INTS}
    out["attn_dp_size"] = attention_dp_size(norm)
    out["dp_attention"] = out["attn_dp_size"] > 1 or enabled(_arg(norm, "enable_dp_attention"))
    return out


def gpu_count(args: Mapping) -> int:
    """The GPUs one launch of the server holds: tp x pp, times dp replicas (attention DP is within tp)."""
    lay = layout(args)
    return lay["tp_size"] * lay["pp_size"] * (1 if lay["dp_attention"] else lay["dp_size"])


# sglang 0.5.23 models/deepseek_v2.py DeepseekV2MoE.__init__ (the `_shared_expert_use_tp1` test): the
# all-to-all backends under which the shared experts are built "replicated" (TP1) on every rank
SHARED_TP1_A2A = ("deepep", "pplx", "mooncake", "nixl", "mori", "ascend_fuseep", "flashinfer", "megamoe",
                  "flashinfer_megamoe", "deepep_v2")


def fp4_allgather(info: Mapping, lay: Mapping) -> bool:
    """Whether sglang 0.5.23 runs the FlashInfer cutlass FP4 all-gather MoE path (layers/moe/utils.py:707-718
    should_use_flashinfer_cutlass_moe_fp4_allgather): no all-to-all backend, moe_runner_backend flashinfer_cutlass,
    attention DP, a modelopt_fp4 checkpoint, ep_size == attn_dp_size, not disable_flashinfer_cutlass_moe_fp4_allgather."""
    return (str(flag(info, "moe_a2a_backend") or "none") == "none"
            and not enabled(flag(info, "disable_flashinfer_cutlass_moe_fp4_allgather"))
            and flag(info, "moe_runner_backend") == "flashinfer_cutlass" and lay["attn_dp_size"] > 1
            and flag(info, "quantization") == "modelopt_fp4" and lay["ep_size"] == lay["attn_dp_size"])


def shared_experts_tp(info: Mapping, lay: Mapping, environ: Mapping | None = None) -> tuple[int | None, str]:
    """(GPUs a DeepSeek-style shared expert is split over: None for TP, 1 replicated; why), as sglang 0.5.23
    builds it from the resolved config: `shared_experts_tp_size` when set (Kimi-K3's flag,
    arg_groups/parallel_hook.py handle_shared_experts_tp), else replicated under an all-to-all MoE backend
    (SHARED_TP1_A2A), under the FlashInfer cutlass FP4 all-gather (layers/moe/utils.py
    should_use_flashinfer_cutlass_moe_fp4_allgather: no a2a backend, moe_runner_backend flashinfer_cutlass,
    attention DP, modelopt_fp4, ep_size == attn_dp_size, not disable_flashinfer_cutlass_moe_fp4_allgather),
    or with SGLANG_SHARED_EXPERT_TP1 in the server's environment; else over TP."""
    size = flag(info, "shared_experts_tp_size")
    if size not in (None, ""):
        return int(size), f"shared_experts_tp_size {size}"
    a2a = str(flag(info, "moe_a2a_backend") or "none")
    if a2a in SHARED_TP1_A2A:
        return 1, f"moe_a2a_backend {a2a}"
    if fp4_allgather(info, lay):
        return 1, "the FlashInfer cutlass FP4 all-gather"
    if enabled((environ or {}).get("SGLANG_SHARED_EXPERT_TP1", "false")):
        return 1, "SGLANG_SHARED_EXPERT_TP1"
    return None, ""


def a2a_dispatch_dtype(info: Mapping, environ: Mapping | None = None) -> tuple[str, str]:
    """(the dtype sglang 0.5.23's all-to-all MoE backend dispatches hidden states in, why) from the resolved
    config and the server's environment. deepep: --deepep-dispatcher-output-dtype when not auto, else
    SGLANG_DEEPEP_BF16_DISPATCH -> bf16, NVFP4 when a modelopt_fp4 checkpoint sets its input scale for the
    dispatcher (SGLANG_MOE_NVFP4_DISPATCH, quantization/modelopt_quant.py:294-301, :2913-2925), bf16 under the
    flashinfer_cutedsl / cutlass runners (they quantize themselves), else fp8 (layers/moe/utils.py:344-406,
    get_deepep_output_dtype); flashinfer: --flashinfer-a2a-dispatch-type, else SGLANG_MOE_NVFP4_DISPATCH, else
    bf16 (layers/moe/utils.py:323-336); mooncake: fp8 (token_dispatcher/mooncake.py:184); nixl: fp8 unless
    SGLANG_NIXL_EP_BF16_DISPATCH (token_dispatcher/nixl.py:364); any other: bf16, not read from sglang."""
    env = environ or {}
    a2a = str(flag(info, "moe_a2a_backend") or "none")
    nvfp4_env = enabled(env.get("SGLANG_MOE_NVFP4_DISPATCH", "false"))
    if a2a == "deepep":
        asked = str(flag(info, "deepep_dispatcher_output_dtype") or "auto")
        if asked != "auto":
            return ("fp8" if asked == "int8" else asked), f"deepep_dispatcher_output_dtype {asked}"
        if enabled(env.get("SGLANG_DEEPEP_BF16_DISPATCH", "false")):
            return "bf16", "SGLANG_DEEPEP_BF16_DISPATCH"
        if nvfp4_env and flag(info, "quantization") == "modelopt_fp4":
            return "nvfp4", "SGLANG_MOE_NVFP4_DISPATCH with modelopt_fp4"
        runner = str(flag(info, "moe_runner_backend") or "auto")
        if runner in ("flashinfer_cutedsl", "cutlass", "humming"):
            return "bf16", f"moe_runner_backend {runner} quantizes itself"
        return "fp8", "deepep's default"
    if a2a == "flashinfer":
        asked = flag(info, "flashinfer_a2a_dispatch_type")
        if asked not in (None, "", "auto"):
            return str(asked), f"flashinfer_a2a_dispatch_type {asked}"
        if "SGLANG_MOE_NVFP4_DISPATCH" in env:
            return ("nvfp4" if nvfp4_env else "bf16"), "SGLANG_MOE_NVFP4_DISPATCH"
        return "bf16", "flashinfer's default"
    if a2a == "mooncake":
        return "fp8", "mooncake dispatches fp8"
    if a2a == "nixl":
        if enabled(env.get("SGLANG_NIXL_EP_BF16_DISPATCH", "false")):
            return "bf16", "SGLANG_NIXL_EP_BF16_DISPATCH"
        return "fp8", "nixl's default"
    return "bf16", f"bf16 assumed: {a2a}'s dispatch dtype is not read"


def roofline_layout(info: Mapping[str, Any] | None, source: str = "/server_info",
                    environ: Mapping | None = None) -> tuple[dict, str] | str:
    """The roofline's parallel arguments and their text ("TP8 EP8 from /server_info") from a resolved
    sglang config (ServerArgs fields; `source` names where they came from) and the server's environment
    variables (`environ`: the recipe's [server.env]), or the reason there are none."""
    if not info or info.get("tp_size") is None:
        return NO_CONFIG
    try:
        lay = layout(info)
        cp = int(flag(info, "attn_cp_size") or 1)
        dcp = int(flag(info, "dcp_size") or 1)
        dwdp = int(flag(info, "dwdp_size") or 1)
        moe_dp = lay["moe_dp_size"]
        dense = flag(info, "moe_dense_tp_size")
        dense_tp = int(dense) if dense not in (None, "") else None
        shared_tp, shared_why = shared_experts_tp(info, lay, environ)
        a2a = str(flag(info, "moe_a2a_backend") or "none")
        dispatch, dispatch_why = a2a_dispatch_dtype(info, environ)
    except (PatchbenchError, TypeError, ValueError) as exc:
        return f"{source} has an unreadable parallel field ({exc})"
    kw = {"tp": lay["tp_size"], "ep": lay["ep_size"], "attn_dp": lay["attn_dp_size"], "attn_cp": cp,
          "pp": lay["pp_size"], "dp": 1 if lay["dp_attention"] else lay["dp_size"], "dense_tp": dense_tp,
          "dp_lm_head": enabled(flag(info, "enable_dp_lm_head")), "moe_dp": moe_dp, "shared_tp": shared_tp, "dcp": dcp}
    if a2a != "none":
        kw.update(moe_a2a=a2a, a2a_dispatch=dispatch)
    if cp > 1 and enabled(flag(info, "enable_cp_decode_attn_tp")):
        kw["cp_attn_tp"] = True
    if dwdp > 1:
        kw["dwdp"] = dwdp
    if fp4_allgather(info, lay):
        kw["fp4_allgather"] = True
    parts = [f"TP{kw['tp']}"] + [f"{name}{kw[key]}" for key, name in
                                 (("ep", "EP"), ("attn_dp", "attn-DP"), ("attn_cp", "attn-CP"), ("moe_dp", "MoE-DP"),
                                  ("dcp", "DCP"), ("pp", "PP"), ("dp", "DP")) if kw[key] > 1]
    if a2a != "none":
        parts.append(f"MoE all-to-all {a2a} ({dispatch} dispatch: {dispatch_why})")
    if dcp > 1:
        comm = str(flag(info, "dcp_comm_backend") or "")
        rep = flag(info, "dcp_replicate_q_proj")
        kw.update(dcp_comm=comm or "a2a", dcp_replicate_q=None if rep is None else enabled(rep))
        parts.append(f"DCP exchange {comm}" if comm else "DCP exchange a2a (assumed: no dcp_comm_backend)")
    if kw.get("cp_attn_tp"):
        parts.append("CP decode attention TP")
    if dwdp > 1:
        parts.append(f"DWDP{dwdp}")
    if kw.get("fp4_allgather"):
        parts.append("MoE FlashInfer cutlass FP4 all-gather")
    if shared_tp is not None:
        parts.append(f"shared experts {'replicated' if shared_tp == 1 else f'TP{shared_tp}'} ({shared_why})")
    return kw, " ".join(parts) + f" from {source}"
