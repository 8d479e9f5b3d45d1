"""Did FlashInfer's run-time JIT build what the recipe declares? The verdict over what each module in
the env's FlashInfer cache holds (toolkit.envs.steps.fatbin, read with cuobjdump). Pure.

Why a run needs it (read against sglang 0.5.23 and FlashInfer 0.7.2): FlashInfer reads
FLASHINFER_CUDA_ARCH_LIST once, when it is imported (compilation_context.py, CompilationContext.__init__;
jit/core.py `current_compilation_context`; refresh_current_compilation_context re-reads it only when that
set came out empty), and sglang's model load then sets the variable to the device's arch + "a"
(srt/utils/common.py set_cuda_arch, called from model_executor/model_runner.py load_model: "12.0a" on
SM120). A recipe's 12.0f holds only because the scheduler imported FlashInfer first; a process that
imports it after the reset (a child inheriting the environment, a patch deferring the import, another
release) builds for 12.0a. Only the binary says which arch was built.

The rules, per module (cached_ops/<name>/<name>.so):
- a module that follows the arch list may hold code (SASS or PTX) only for declared arches: a
  list-following module built for sm_120a in a 12.0f recipe is a problem. It need not hold every
  declared arch: FlashInfer builds a module only for the arches of the majors it supports
  (get_nvcc_flags_list(supported_major_versions=...)), so 9.0a is absent from an SM120-only module.
- a module FlashInfer builds for its own fixed arch whatever the list (`PINNED`, each with where
  FlashInfer 0.7.2 says so) is recorded, not judged;
- a module written before the env was built is not this env's build (a stale cache: FlashInfer loads
  a module whose .so exists and ninja finds up to date): a problem whatever it holds;
- only modules the launch wrote or loaded are judged (`used`): another launch of the same env (a recipe
  sharing it, with other server settings) may have left modules this one never ran. Where the launch's
  loaded modules cannot be read (its server gone), every module counts as used.
No declared arch: FlashInfer chose from the device; recorded, not judged.

Error rate: deterministic, no sampling. A false failure needs a module that pins its own arch and is
missing from `PINNED` (the message names it; add it there); a miss needs a module FlashInfer loaded
from outside this cache (an installed flashinfer-jit-cache / AOT package: checked at build,
toolkit.envs.steps.flashinfer) or a wrong kernel compiled for a declared arch.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Sequence

from toolkit.envs.steps.arch import sm_name
from toolkit.envs.steps.fatbin import Holds

# FlashInfer 0.7.2 modules built for a fixed arch, whatever FLASHINFER_CUDA_ARCH_LIST says
# (module-name pattern, where FlashInfer fixes it).
PINNED: tuple[tuple[str, str], ...] = (
    ("fp4_quantization_*", "flashinfer/jit/fp4_quantization.py gen_fp4_quantization_sm*_module: one "
     "module per backend, 120 -> sm_120a, 120f -> sm_120f (quantization/fp4_quantization.py picks 120f "
     "on CUDA >= 12.9)"),
    ("gdn_fused_decode_sm120_*", "flashinfer/jit/gdn_fused_decode.py: sm120a_nvcc_flags"),
    ("cudnn_frost_*_moe_v2_*", "flashinfer/jit/cudnn_frost.py: sm107a / sm120a flags by name"),
    ("minimax_h3_sm120_quant_*_sm120a_v1", "flashinfer/jit/cake_minimax_h3_sm120_quant_*.py: "
     "sm120a_nvcc_flags"),
    ("cake_sage_block_sparse_attention_*", "flashinfer/jit/cake_sage_block_sparse_attention.py: "
     "sm120a_nvcc_flags"),
)


@dataclass(frozen=True)
class Module:
    """One FlashInfer JIT module in the cache: its path (as shown), name, what it holds, its mtime,
    and whether the launch wrote or loaded it."""

    path: str
    name: str
    holds: Holds
    mtime: float
    used: bool = True


def pinned_by(name: str) -> str | None:
    """Where FlashInfer fixes this module's arch, or None: it follows the arch list."""
    return next((why for pattern, why in PINNED if fnmatchcase(name, pattern)), None)


def module_problem(m: Module, declared: Sequence[str], env_built: float | None) -> str | None:
    """The one-line problem of one module, or None."""
    if not m.used:
        return None
    if env_built is not None and m.mtime < env_built:
        return (f"{m.path} was written before this env was built: a stale FlashInfer JIT cache, "
                "not this env's kernel")
    if not declared or pinned_by(m.name):
        return None
    allowed = {sm_name(a) for a in declared}
    extra = sorted(m.holds.any - allowed)
    if not extra:
        return None
    kinds = [("SASS", m.holds.sass), ("PTX", m.holds.ptx)]
    held = "; ".join(f"{kind} {', '.join(sorted(arches))}" for kind, arches in kinds if arches)
    return (f"{m.path} holds {held}: {', '.join(extra)} not in the recipe's build.arch "
            f"{', '.join(declared)} (FlashInfer imported after sglang's set_cuda_arch reset FLASHINFER_CUDA_ARCH_LIST?)")


def verdict(modules: Sequence[Module], declared: Sequence[str], env_built: float | None) -> list[str]:
    """Every module's problem (empty: the JIT built what the recipe declares)."""
    return [p for m in modules if (p := module_problem(m, declared, env_built))]
