"""CUDA arch strings: "12.0a" -> (12, 0, "a"), sm_120a, "-gencode=arch=compute_120a,code=sm_120a",
and the arch-list variables FlashInfer and torch read. Pure."""

from __future__ import annotations

import re
from typing import Sequence

from toolkit.errors import BadInput

_ARCH_RE = re.compile(r"^(\d+)\.(\d)([af]?)$")


def parse_arch(arch: str) -> tuple[int, int, str]:
    """'12.0a' -> (12, 0, 'a'); 'a' = arch-specific, 'f' = family, '' = plain."""
    m = _ARCH_RE.match(arch.strip())
    if not m:
        raise BadInput(f"arch {arch!r} is not like 12.0a, 12.0f, 9.0a or 8.9")
    return int(m.group(1)), int(m.group(2)), m.group(3)


def sm_name(arch: str) -> str:
    major, minor, suffix = parse_arch(arch)
    return f"sm_{major}{minor}{suffix}"


def gencode_flags(arches: Sequence[str]) -> list[str]:
    """nvcc flags that emit SASS for each arch: 12.0a -> compute_120a/sm_120a, 12.0f ->
    compute_120f/sm_120f (cuobjdump --list-elf names that cubin sm_120; its fatbin header
    says sm_120f), 9.0a -> compute_90a/sm_90a."""
    out = []
    for a in arches:
        major, minor, suffix = parse_arch(a)
        cc = f"{major}{minor}{suffix}"
        out.append(f"-gencode=arch=compute_{cc},code=sm_{cc}")
    return out


def flashinfer_arch_list(arches: Sequence[str]) -> str:
    """FLASHINFER_CUDA_ARCH_LIST is space-separated ("12.0a 9.0a")."""
    return " ".join(arches)


def torch_arch_list(arches: Sequence[str]) -> str:
    """TORCH_CUDA_ARCH_LIST is semicolon-separated ("12.0a;9.0a"). torch knows no family arches: its
    cpp_extension accepts 12.0 / 12.0a / 12.1 / 12.1a and raises "Unknown CUDA arch (12.0f)" (torch
    2.14.1, _get_cuda_arch_flags; sglang 0.5.23 calls load_inline at run time), so 12.0f is given to
    torch as 12.0a, the one device it targets; FlashInfer's list keeps 12.0f."""
    out = []
    for a in arches:
        major, minor, suffix = parse_arch(a)
        out.append(f"{major}.{minor}{'a' if suffix == 'f' else suffix}")
    return ";".join(dict.fromkeys(out))
