"""FlashInfer modules that pick their own arch, and the module a binary in the env belongs to. Pure.

FlashInfer builds a module for the arches of FLASHINFER_CUDA_ARCH_LIST that its kernels support
(get_nvcc_flags_list(supported_major_versions=...): an SM120-only GEMM has no 9.0a code in a
"12.0a 9.0a" build), except the modules below, which fix their arch whatever the list says. Both
the build's cuobjdump check (toolkit.envs.steps.cuda.verify_arches) and a run's check of what the
JIT built (toolkit.run.jit_verdict) judge a FlashInfer module by these rules, not by "every declared
arch in every binary", which holds only for the recipe's own `[build.cuda]` objects.
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from pathlib import PurePath

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

# the folders FlashInfer keeps one folder per module under: the JIT workspace
# (<base>/.cache/flashinfer/<version>/<archs>/cached_ops/<module>/) and the AOT package (data/aot/<module>/)
_MODULE_PARENTS = ("cached_ops", "aot")


def pinned_by(name: str) -> str | None:
    """Where FlashInfer fixes this module's arch, or None: it follows the arch list."""
    return next((why for pattern, why in PINNED if fnmatchcase(name, pattern)), None)


def module_of(path: PurePath | str) -> str | None:
    """The FlashInfer module a binary belongs to (the folder under cached_ops/ or aot/), or None
    for a binary that is not a FlashInfer module (the recipe's own CUDA objects)."""
    parts = PurePath(path).parts
    for i, part in enumerate(parts[:-2]):
        if part in _MODULE_PARENTS:
            return parts[i + 1]
    return None
