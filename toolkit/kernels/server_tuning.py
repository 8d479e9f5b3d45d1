"""Does the recipe's sglang tune FlashInfer's tactics before it serves? Read per release (pure).

A kernel table should time the tactic the server runs: tuned where the server tunes, FlashInfer's
first (default) tactic where it does not. Read against the releases patchbench pins:

- sglang 0.5.23 (model_executor/runner/flashinfer_autotune.py, should_run_flashinfer_autotune): on a
  CUDA GPU of capability >= 9 it tunes when the MoE runner is one of flashinfer_trtllm(_routed),
  flashinfer_mxfp4, flashinfer_cutedsl, flashinfer_cutlass, flashinfer_megamoe, or an NVFP4 model's
  dense FP4 GEMM runs on flashinfer_cutlass/cutedsl: so for the two ops patchbench times (the
  flashinfer_cutlass runner's cutlass_fused_moe, NVFP4 mm_fp4) it tunes; `--disable-flashinfer-autotune`
  turns it off, and so do `--enable-deterministic-inference` ("tuned configs are per problem shape, so the
  reduction order would follow the batch shape") and `--enable-kv-cache-sharding` (both checked before the
  runner, flashinfer_autotune.py:84-94).
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


def server_autotunes(sglang_version: str | None, args: Mapping) -> tuple[bool, str]:
    """(whether the server tunes FlashInfer's tactics, why: a line for the table's notes)."""
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
        for name, what in (("enable-deterministic-inference", "deterministic inference"),
                           ("enable-kv-cache-sharding", "KV cache sharding")):
            if enabled(flag(args, name)):
                return False, (f"sglang {version} does not tune FlashInfer with {what} (--{name}; "
                               "runner/flashinfer_autotune.py should_run_flashinfer_autotune): the server runs "
                               "FlashInfer's default tactics")
        return True, f"sglang {version} tunes FlashInfer before serving (runner/flashinfer_autotune.py)"
    return True, (f"sglang {version or '(unknown)'}: whether it tunes FlashInfer was not read for this release; "
                  "tuned as sglang 0.5.23 does")
