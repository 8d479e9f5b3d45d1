"""Declares torchvision's two compiled operator schemas when its CUDA-linked `_C` cannot load.

Run at interpreter start (from a .pth file) in the env only. Lazy: torch is imported only when
torchvision is installed, and the schemas are declared only when `_C` fails to load, so a working
torchvision is left untouched. The declared operators have no kernel: calling one raises.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

SCHEMAS = {
    "nms": "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms": "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
}
_library = None


def install() -> None:
    global _library
    if _library is not None:
        return
    try:
        spec = importlib.util.find_spec("torchvision")
    except (ImportError, ValueError):
        return
    if spec is None or spec.origin is None:
        return
    import torch

    extensions = sorted(Path(spec.origin).parent.glob("_C*.so"))
    try:
        if extensions:
            torch.ops.load_library(str(extensions[0]))
            return
    except (OSError, RuntimeError):
        pass
    _library = torch.library.Library("torchvision", "DEF")
    for schema in SCHEMAS.values():
        _library.define(schema)
    print("patchbench_cpu_shims: torchvision's _C does not load on this torch; declared "
          f"torchvision::{', torchvision::'.join(SCHEMAS)} without kernels", file=sys.stderr)
