"""A cached CPU interpreter that imports sglang's MoE top-k from an applied tree, without a GPU.

sglang is not installed into it: the applied tree goes on PYTHONPATH, so the modules imported are
the tree's own (patched) files. The venv holds CPU torch 2.13.0 from this machine's pip sources and
the real distributions that `import sglang.srt.layers.moe.topk` reaches (found by importing it on a
CPU machine until it succeeded), at the versions the release's own metadata pins where it pins one.
The one thing that cannot load on CPU, torchvision's CUDA-linked operators, is declared by
tests/torchvision_ops_placeholder.py in the interpreter that runs the check.

The venv is cached under TEST_CACHE, keyed by its requirement list; the first build installs about
1.5 GB (torch, triton, transformers, ...) with uv, from its cache when warm.
"""

from __future__ import annotations

import hashlib
import sys
from importlib.metadata import PathDistribution
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from conftest import TEST_CACHE, cached_venv

TORCH = "torch==2.13.0+cpu"
# What the import chain of sglang.srt.layers.moe.topk needs on CPU (sglang/__init__, srt.utils,
# srt.configs, the quantization registry, the runtime context, ...).
IMPORT_CHAIN = ("aiohttp", "apache-tvm-ffi", "compressed-tensors", "dill", "einops", "fastapi", "gguf",
                "ipython", "msgspec", "numpy", "orjson", "packaging", "pillow", "psutil", "pybase64",
                "pydantic", "pyzmq", "requests", "sentencepiece", "tqdm", "transformers")
# Not in sglang's metadata: torch's CUDA builds bring triton (topk.py imports it; it imports on CPU)
# and torchvision is left unpinned there (0.28 is torch 2.13's release).
UNPINNED = ("triton==3.9.0", "torchvision==0.28.0")
INSTALL_TIMEOUT_S = 900


def requirements(dist_info: Path) -> list[str]:
    """The install list: torch, the import chain at the release's pins, triton and torchvision."""
    pins = {}
    for line in PathDistribution(dist_info).requires or ():
        req = Requirement(line)
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            pins[canonicalize_name(req.name)] = f"{req.name}{req.specifier}"
    return [TORCH, *(pins.get(canonicalize_name(n), n) for n in IMPORT_CHAIN), *UNPINNED]


def sglang_cpu_python(tree: Path) -> Path:
    """The venv's python for the applied sglang tree at `tree` (the directory holding sglang/)."""
    (dist_info,) = tree.glob("sglang-*.dist-info")
    reqs = requirements(dist_info)
    python = f"python{sys.version_info.major}.{sys.version_info.minor}"
    key = hashlib.sha256("\n".join([python, *reqs]).encode()).hexdigest()[:12]
    return cached_venv(TEST_CACHE / f"sglang-cpu-{key}", reqs, timeout_s=INSTALL_TIMEOUT_S)
