"""Does the recipe's sglang tune FlashInfer's tactics before it serves? Read per release (pure).

A kernel table should time the tactic the server runs: tuned where the server tunes, FlashInfer's
first (default) tactic where it does not. Read against the releases patchbench pins:

- sglang 0.5.23 (model_executor/runner/flashinfer_autotune.py:77-161, should_run_flashinfer_autotune):
  no tuning with `--enable-kv-cache-sharding`, `--disable-flashinfer-autotune` or
  `--enable-deterministic-inference` ("tuned configs are per problem shape, so the reduction order would
  follow the batch shape"; :84-94), nor for the flashinfer_cutedsl runner under the deepep all-to-all
  (:112); else it tunes when the configured `moe_runner_backend` (the resolved string: an `auto` left for
  the NVFP4 MoE to decide does not count) is one of flashinfer_trtllm(_routed), flashinfer_mxfp4,
  flashinfer_cutedsl, flashinfer_cutlass, flashinfer_megamoe (:117-124), or an NVFP4 model
  (modelopt_fp4/modelopt_mixed) runs its dense FP4 GEMMs on flashinfer_cutlass/cutedsl (:130-138; the
  backend's `auto` is decided per GPU: fp4_utils.py initialize_fp4_gemm_config), or an FP8 GEMM may run on
  FlashInfer (:140-150, not resolvable here: taken as tuning, said so); and never below compute
  capability 9 (:155). Tuning runs the whole model's dummy forward, so every tunable FlashInfer op in it
  is tuned once any condition holds.
- sglang 0.5.10 (model_executor/model_runner.py, _should_run_flashinfer_autotune): it tunes only when
  `--moe-runner-backend` is flashinfer_trtllm or flashinfer_mxfp4 (flashinfer_cutlass is commented out
  there, "will cause some flashinfer compilation errors"), so a flashinfer_cutlass server runs
  FlashInfer's default tactics for its MoE and its dense FP4 GEMMs alike.

Another release: not read; the table tunes (as 0.5.23 does) and says so.
"""

from __future__ import annotations

from typing import Mapping

from toolkit.run.parallel_layout import enabled, flag

TUNES_0_5_10 = ("flashinfer_trtllm", "flashinfer_mxfp4")
TUNES_0_5_23 = ("flashinfer_trtllm", "flashinfer_trtllm_routed", "flashinfer_mxfp4", "flashinfer_cutedsl",
                "flashinfer_cutlass", "flashinfer_megamoe")
FP4_MODELS = ("modelopt_fp4", "modelopt_mixed")
FP4_TUNED_BACKENDS = ("flashinfer_cutlass", "flashinfer_cutedsl")
FP8_MAYBE = ("fp8", "mxfp8", "minimax_m3_nvfp4", "modelopt", "modelopt_fp8", "modelopt_mixed")
WHERE = "runner/flashinfer_autotune.py should_run_flashinfer_autotune"


def server_autotunes(sglang_version: str | None, args: Mapping, fp4_gemm: str | None = None,
                     capability: tuple[int, int] | None = None) -> tuple[bool, str]:
    """(whether the server tunes FlashInfer's tactics, why: a line for the table's notes). `args`: the
    resolved config (or flags); `fp4_gemm`: the FP4 GEMM backend the server runs (its `auto` decided for
    the GPU; None: the configured value); `capability`: the target GPU's (None: not known, taken as >= 9)."""
    if enabled(flag(args, "disable-flashinfer-autotune")):
        return False, "the recipe passes --disable-flashinfer-autotune: the server runs FlashInfer's default tactics"
    version = str(sglang_version or "")
    if version.startswith("0.5.10"):
        runner = str(flag(args, "moe-runner-backend") or "auto")
        if runner in TUNES_0_5_10:
            return True, f"sglang {version} tunes FlashInfer for --moe-runner-backend {runner}"
        return False, (f"sglang {version} tunes FlashInfer only for --moe-runner-backend "
                       f"{' or '.join(TUNES_0_5_10)} (model_runner.py _should_run_flashinfer_autotune; "
                       f"flashinfer_cutlass is left out there), not {runner}: the server runs FlashInfer's "
                       "default tactics, and so does this table")
    if version.startswith("0.5.23"):
        return _tunes_0_5_23(version, args, fp4_gemm, capability)
    return True, (f"sglang {version or '(unknown)'}: whether it tunes FlashInfer was not read for this release; "
                  "tuned as sglang 0.5.23 does")


def _tunes_0_5_23(version: str, args: Mapping, fp4_gemm: str | None,
                  capability: tuple[int, int] | None) -> tuple[bool, str]:
    default = ": the server runs FlashInfer's default tactics"
    for name, what in (("enable-deterministic-inference", "deterministic inference"),
                       ("enable-kv-cache-sharding", "KV cache sharding")):
        if enabled(flag(args, name)):
            return False, f"sglang {version} does not tune FlashInfer with {what} (--{name}; {WHERE}){default}"
    runner = str(flag(args, "moe-runner-backend") or "auto")
    a2a = str(flag(args, "moe-a2a-backend") or "none")
    if runner == "flashinfer_cutedsl" and a2a == "deepep":
        return False, (f"sglang {version} does not tune FlashInfer for the flashinfer_cutedsl runner under "
                       f"--moe-a2a-backend deepep ({WHERE}){default}")
    if capability is not None and tuple(capability)[0] < 9:
        return False, (f"sglang {version} tunes FlashInfer on compute capability >= 9 only (SM{capability[0]}"
                       f"{capability[1]}; {WHERE}){default}")
    if runner in TUNES_0_5_23:
        return True, f"sglang {version} tunes FlashInfer before serving: MoE runner {runner} ({WHERE})"
    quant = flag(args, "quantization")
    fp4 = str(fp4_gemm or flag(args, "fp4-gemm-runner-backend") or flag(args, "fp4-gemm-backend") or "auto")
    if (quant in FP4_MODELS or quant in (None, "")) and fp4 in FP4_TUNED_BACKENDS:
        model = quant or "the checkpoint's quantization, taken as NVFP4 like the op timed"
        return True, (f"sglang {version} tunes FlashInfer before serving: the NVFP4 model's ({model}) dense FP4 "
                      f"GEMMs run on {fp4} ({WHERE}; MoE runner {runner} alone would not tune)")
    if quant in FP8_MAYBE:
        return True, (f"sglang {version} tunes FlashInfer when a {quant} model's FP8 GEMMs run on FlashInfer, "
                      f"which depends on the GPU and its FlashInfer and is not read here: taken as tuning ({WHERE})")
    return False, (f"sglang {version} does not tune FlashInfer for MoE runner {runner} with FP4 GEMM backend {fp4}"
                   f" and quantization {quant or 'unset'} ({WHERE}: none of its runner, FP4-GEMM or FP8-GEMM "
                   f"conditions hold){default}")
