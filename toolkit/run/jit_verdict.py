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
- a module FlashInfer builds for its own fixed arch whatever the list (toolkit.envs.steps.flashinfer_pinned.PINNED, each with where
  FlashInfer 0.7.2 says so) is recorded, not judged;
- a module written before the env was built is not this env's build (a stale cache: FlashInfer loads
  a module whose .so exists and ninja finds up to date): a problem whatever it holds;
- only modules the launch wrote or loaded are judged (`used`): another launch of the same env (a recipe
  sharing it, with other server settings) may have left modules this one never ran. Where the launch's
  loaded modules cannot be read (its server gone), every module counts as used.
No declared arch: FlashInfer chose from the device; recorded, not judged.

Error rate: deterministic, no sampling. A false failure needs a module that pins its own arch and is
missing from PINNED (the message names it; add it there); a miss needs a module FlashInfer loaded
from outside this cache (an installed flashinfer-jit-cache / AOT package: checked at build,
toolkit.envs.steps.flashinfer) or a wrong kernel compiled for a declared arch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from toolkit.envs.steps.arch import sm_name
from toolkit.envs.steps.fatbin import Holds
from toolkit.envs.steps.flashinfer_pinned import pinned_by

@dataclass(frozen=True)
class Module:
    """One FlashInfer JIT module in the cache: its path (as shown), name, what it holds, its mtime,
    and whether the launch wrote or loaded it."""

    path: str
    name: str
    holds: Holds
    mtime: float
    used: bool = True


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
