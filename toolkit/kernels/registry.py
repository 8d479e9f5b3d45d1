"""The op registry: what patchbench knows about each kernel op it can measure (pure data).

One entry per op. The entry says which shape dimensions the op takes, where it runs, the formats of
its operands (for the roofline floor: bytes per element from `toolkit.roofline.BYTES_PER_PARAM`),
its FLOPs per shape, the tolerances of its correctness check, and what flashinfer-bench calls it.
How to build its inputs, call it and compute its fp32 reference lives in the program that runs
inside the env, `toolkit/probes/kernel_bench.py` (class with the same `name` in its `OPS`): it can
import only the env's own packages. Adding an op is one entry here and one class there.
"""

from __future__ import annotations

from dataclasses import dataclass

from toolkit.errors import BadInput


@dataclass(frozen=True)
class OpSpec:
    name: str
    kind: str  # "gemm": out[M,N] = A[M,K] B[N,K]^T; "moe": a grouped gated-MLP over top-k experts
    device: str  # "cuda" or "cpu": where it must run
    description: str
    weight_format: str  # key of toolkit.roofline.BYTES_PER_PARAM
    act_format: str  # the activation input's format
    out_bytes: float  # bytes per output element
    peak_dtype: str  # which peak of toolkit/data/gpus.toml its FLOPs run at
    fi_op_type: str  # flashinfer-bench's op_type
    rtol: float  # correctness: |out - ref| <= atol * max|ref| + rtol * |ref| ...
    atol: float
    min_within: float  # ... for at least this share of the elements
    test_only: bool = False

    @property
    def dims(self) -> tuple[str, ...]:
        return ("m", "n", "k") if self.kind == "gemm" else ("tokens", "experts", "top_k", "hidden", "inter")

    @property
    def needs_gpu(self) -> bool:
        return self.device == "cuda"


OPS: dict[str, OpSpec] = {
    op.name: op
    for op in (
        OpSpec(
            name="flashinfer.mm_fp4",
            kind="gemm",
            device="cuda",
            description="FlashInfer NVFP4 GEMM (mm_fp4), one backend at a time (cutlass, cudnn, trtllm, ...)",
            weight_format="nvfp4", act_format="nvfp4", out_bytes=2.0, peak_dtype="fp4", fi_op_type="gemm_fp4",
            rtol=0.02, atol=0.01, min_within=0.99,
        ),
        OpSpec(
            name="flashinfer.cutlass_fused_moe",
            kind="moe",
            device="cuda",
            description="FlashInfer NVFP4 grouped MoE (cutlass_fused_moe: gate/up GEMM, SiLU*up, down GEMM, top-k sum), "
                        "the call of sglang's flashinfer_cutlass MoE runner",
            weight_format="nvfp4", act_format="nvfp4", out_bytes=2.0, peak_dtype="fp4", fi_op_type="moe",
            rtol=0.1, atol=0.05, min_within=0.95,
        ),
        OpSpec(
            name="test.matmul",
            kind="gemm",
            device="cpu",
            description="bf16 matmul with torch on CPU: the measurement plumbing's test op "
                        "(PATCHBENCH_TEST_OP_ZEROS_FROM_M=8 in the recipe's [server.env] makes it return zeros for M >= 8)",
            weight_format="bf16", act_format="bf16", out_bytes=2.0, peak_dtype="bf16", fi_op_type="gemm_bf16",
            rtol=0.02, atol=0.01, min_within=0.99, test_only=True,
        ),
    )
}


def get_op(name: str) -> OpSpec:
    if name not in OPS:
        import difflib

        close = difflib.get_close_matches(name, list(OPS), n=1)
        raise BadInput(f"unknown kernel op {name!r}",
                       hint=(f"did you mean {close[0]}? " if close else "") + f"known: {', '.join(OPS)}")
    return OPS[name]


def flops(op: OpSpec, shape: dict) -> float:
    """Useful FLOPs of one call (multiply-adds x 2)."""
    if op.kind == "gemm":
        return 2.0 * shape["m"] * shape["n"] * shape["k"]
    pairs = shape["tokens"] * shape["top_k"]  # token-expert pairs
    return 2.0 * pairs * 3 * shape["hidden"] * shape["inter"]
