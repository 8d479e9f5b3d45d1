"""Which MoE runner and FP4 GEMM backend the recipe's server runs, and whether an op is its kernel (pure).

A kernel table is worth something only for the kernel the server calls. sglang 0.5.23 picks the
routed experts' runner from `moe_runner_backend` as its argument hooks resolve it (the static
resolution's, or /server_info's; e.g. `auto` becomes flashinfer_cutlass for modelopt_fp4 on SM120).
A value left at `auto` is decided again when an NVFP4 MoE builds its runner
(layers/quantization/modelopt_quant.py:3117-3124, ModelOptNvFp4FusedMoEMethod.create_moe_runner):
marlin on SM80-SM9x, else flashinfer_trtllm. Of these only flashinfer_cutlass calls FlashInfer's
`cutlass_fused_moe` (layers/moe/moe_runner/flashinfer_cutlass.py); flashinfer_trtllm calls the
trtllm-gen block-scale MoE, triton / deep_gemm / marlin / cutedsl are other kernels altogether; under
`--moe-a2a-backend megamoe` no runner is built at all (modelopt_quant.py:3127).

The dense NVFP4 GEMMs follow `fp4_gemm_runner_backend` (`--fp4-gemm-backend`), whose `auto` is decided
at scheduler start (layers/quantization/fp4_utils.py:149-162, initialize_fp4_gemm_config):
flashinfer_cutedsl on SM100, marlin on SM80-SM9x, flashinfer_cutlass otherwise (SM120 included).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from toolkit.run.parallel_layout import flag

# the op patchbench times -> the sglang MoE runner that calls it
OP_RUNNER = {"flashinfer.cutlass_fused_moe": "flashinfer_cutlass"}
# sglang's FP4 GEMM backend -> FlashInfer mm_fp4's backend name (fp4_utils.py get_flashinfer_backend)
MM_FP4_BACKEND = {"flashinfer_cutlass": "cutlass", "flashinfer_cudnn": "cudnn", "flashinfer_trtllm": "trtllm",
                  "flashinfer_cutedsl": "cute-dsl"}


@dataclass(frozen=True)
class ServerRunner:
    moe: str | None  # the MoE runner the server runs (None: unknown)
    configured: str  # moe_runner_backend as sglang's config holds it (what its autotune test reads)
    fp4_gemm: str | None  # the dense FP4 GEMM backend (None: unknown)
    fp4_configured: str  # fp4_gemm_runner_backend as configured
    source: str  # where the config came from
    capability: tuple[int, int] | None = None  # the target GPU's compute capability
    notes: tuple[str, ...] = ()


def _value(resolved: Mapping | None, args: Mapping, *names: str) -> str:
    """A resolved field, else the recipe's flag (a field and its CLI spelling may differ), else auto."""
    for where in (resolved or {}, args):
        for name in names:
            v = flag(where, name)
            if v not in (None, ""):
                return str(v)
    return "auto"


def server_runner(resolved: Mapping | None, args: Mapping, capability: tuple[int, int] | None,
                  source: str) -> ServerRunner:
    """The MoE runner and FP4 GEMM backend an NVFP4 server of these arguments runs on a GPU of
    `capability` (None: the recipe names no [target]; an `auto` then stays unknown)."""
    configured = _value(resolved, args, "moe_runner_backend")
    fp4_configured = _value(resolved, args, "fp4_gemm_runner_backend", "fp4_gemm_backend")
    notes = []
    moe, fp4 = configured, fp4_configured
    if configured == "auto":
        if capability is None:
            moe = None
            notes.append("moe_runner_backend auto and the recipe names no target GPU: the NVFP4 MoE picks its runner by compute "
                         "capability (modelopt_quant.py:3117), so the server's MoE kernel is not known here")
        else:
            moe = "marlin" if (8, 0) <= tuple(capability) < (10, 0) else "flashinfer_trtllm"
            notes.append(f"moe_runner_backend auto: an NVFP4 MoE on SM{capability[0]}{capability[1]} runs {moe} "
                         "(modelopt_quant.py:3117-3124 create_moe_runner)")
    if fp4_configured == "auto":
        if capability is None:
            fp4 = None
        elif capability[0] == 10:
            fp4 = "flashinfer_cutedsl"
        elif (8, 0) <= tuple(capability) < (10, 0):
            fp4 = "marlin"
        else:
            fp4 = "flashinfer_cutlass"
    a2a = _value(resolved, args, "moe_a2a_backend")
    if a2a == "megamoe":
        notes.append(f"moe_a2a_backend megamoe: the NVFP4 MoE builds no runner and its FusedMoE.forward is never "
                     f"reached (modelopt_quant.py:3127), whatever moe_runner_backend ({configured}) says")
        moe = "megamoe"
    return ServerRunner(moe, configured, fp4, fp4_configured, source,
                        tuple(capability) if capability else None, tuple(notes))


def op_mismatch(op_name: str, runner: ServerRunner) -> str | None:
    """Why `op_name` is not the kernel the server runs (None: it is, or it cannot be told)."""
    want = OP_RUNNER.get(op_name)
    if want is None or runner.moe is None or runner.moe == want:
        return None
    return (f"the server runs its routed experts through sglang's {runner.moe} MoE runner ({runner.source}), "
            f"and {op_name} is the {want} runner's kernel: this table would time a kernel the server never runs")


def describe(op_name: str, runner: ServerRunner) -> list[str]:
    """Lines for the table's notes: which runner/backend the server uses for this op."""
    if op_name in OP_RUNNER:
        moe = runner.moe or f"unknown ({runner.configured})"
        return [f"the server's MoE runner: {moe} ({runner.source})", *runner.notes]
    if op_name == "flashinfer.mm_fp4":
        fp4 = runner.fp4_gemm
        if fp4 is None:
            return [f"the server's FP4 GEMM backend: unknown ({runner.fp4_configured} is decided by the GPU, and "
                    "the recipe names no target GPU)"]
        api = MM_FP4_BACKEND.get(fp4)
        return [f"the server's FP4 GEMM backend: {fp4} ({runner.source})"
                + (f", mm_fp4 backend {api}" if api else ": not a FlashInfer mm_fp4 backend")]
    return []


def not_the_servers(record: dict) -> str | None:
    """The label of a stored table that timed another runner's kernel (`kernels --other-runner`), else None."""
    sr = record.get("server_runner") or {}
    if sr.get("times_servers_kernel", True):
        return None
    return f"not the server's kernel: its MoE runner is {sr.get('moe')} ({sr.get('source')})"
