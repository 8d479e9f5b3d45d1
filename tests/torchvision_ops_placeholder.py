"""The one placeholder the CPU import of sglang's MoE top-k needs: torchvision's compiled operators.

Importing `sglang.srt.layers.moe.topk` imports sglang/__init__ (its transformers patches) and
srt/configs (InternVL/DeepSeek-OCR image transforms), which import torchvision. torchvision's import
registers fake kernels for its compiled operators `torchvision::nms` and `torchvision::qnms`, which
only exist once its `_C` extension has loaded. The torchvision wheels on PyPI are CUDA builds whose
`_C` links libtorch_cuda/libc10_cuda, so on CPU torch `_C` cannot load and the import fails.

`install()` loads `_C` as torchvision would; only when that fails does it declare those two operator
schemas (no kernel: calling them raises). Nothing on the routing path calls torchvision: MoE top-k
is torch only. Run before anything imports torchvision. Needs nothing beyond torch.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

# torchvision's own schemas (torchvision/csrc/ops/nms.cpp, quantized/cpu/qnms_kernel.cpp)
SCHEMAS = {
    "nms": "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms": "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
}
_library = None


def install() -> list[str]:
    """Declare the operators torchvision's import needs when its extension cannot load; the names
    declared (empty when torchvision is absent or its `_C` loads)."""
    global _library
    spec = importlib.util.find_spec("torchvision")
    if spec is None or spec.origin is None or _library is not None:
        return []
    extensions = sorted(Path(spec.origin).parent.glob("_C*.so"))
    try:
        if extensions:
            torch.ops.load_library(str(extensions[0]))
            return []
    except OSError:
        pass  # CUDA-linked build on CPU torch
    _library = torch.library.Library("torchvision", "DEF")
    for schema in SCHEMAS.values():
        _library.define(schema)
    return [f"torchvision::{name}" for name in SCHEMAS]
