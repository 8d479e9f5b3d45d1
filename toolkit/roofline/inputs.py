"""What a roofline is computed from: model shape, GPU, weight formats, parallelism, batch sizes."""

from __future__ import annotations

from dataclasses import dataclass

from toolkit.roofline.configs import GpuSpec, ModelShape
from toolkit.roofline.formats import WeightFormats

SHARDINGS = ("even", "sglang")
ACT_BYTES = 2  # all-reduce payload: bf16 activations


@dataclass(frozen=True)
class RooflineInputs:
    model: ModelShape
    gpu: GpuSpec
    weights: WeightFormats
    tp: int = 1
    ep: int = 1
    batches: tuple[int, ...] = (1,)
    context: int = 0  # tokens already in each sequence's KV cache
    kv_dtype: str = "bf16"
    allreduce_latency_us: float | None = None  # None: the GPU table's value
    sharding: str = "even"  # "even": every weight byte / TP; "sglang": replicate what sglang does

    @property
    def latency_us(self) -> float:
        """Per all-reduce latency: the override, else the GPU table's value."""
        if self.allreduce_latency_us is not None:
            return float(self.allreduce_latency_us)
        return self.gpu.allreduce_latency_us
