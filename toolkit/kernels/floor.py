"""The roofline floor of one kernel call: max(bytes / memory bandwidth, FLOPs / peak), from the
roofline's own tables (`toolkit.roofline`: GPU rows of toolkit/data/gpus.toml, bytes per parameter).

Bytes: the weights once (N x K, or for the MoE op every expert the routing touched, 3 x hidden x I_s
each), the activation input and the output once; no L2 reuse (the measurement flushes L2 anyway).
"""

from __future__ import annotations

from dataclasses import dataclass

from toolkit.kernels.registry import OpSpec, flops
from toolkit.roofline import BYTES_PER_PARAM, GpuSpec, expected_distinct_experts, get_gpu
from toolkit.roofline.model import Bounded


@dataclass(frozen=True)
class Floor(Bounded):
    bytes: float
    flops: float
    mem_s: float
    compute_s: float
    gpu: str


def bytes_moved(op: OpSpec, dims: dict, touched_experts: int | None = None) -> float:
    w, a = BYTES_PER_PARAM[op.weight_format], BYTES_PER_PARAM[op.act_format]
    if op.kind == "gemm":
        m, n, k = dims["m"], dims["n"], dims["k"]
        return n * k * w + m * k * a + m * n * op.out_bytes
    t, h, i = dims["tokens"], dims["hidden"], dims["inter"]
    if touched_experts is None:  # uniform routing over this GPU's experts
        touched_experts = expected_distinct_experts(dims["experts"], dims["top_k"], t)
    return touched_experts * 3 * h * i * w + t * h * a + t * h * op.out_bytes


def floor(op: OpSpec, dims: dict, gpu: str | GpuSpec, touched_experts: int | None = None) -> Floor:
    g = get_gpu(gpu)
    nbytes = bytes_moved(op, dims, touched_experts)
    f = flops(op, dims)
    peak = g.peak(op.peak_dtype) or g.peak("bf16")
    return Floor(nbytes, f, nbytes / (g.mem_bw_gbps * 1e9), f / peak if peak else 0.0, g.key)


def gpu_of(recipe_resolved: dict) -> str | None:
    """The GPU a recipe's numbers are measured against: [roofline] gpu, else [target] gpu."""
    roof = recipe_resolved.get("roofline") or {}
    target = recipe_resolved.get("target") or {}
    return roof.get("gpu") or target.get("gpu") or None
