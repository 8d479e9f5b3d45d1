"""The miniature's cost model: how long one forward step takes.

This is the "GPU" of minisglang. The scheduler (sglang/srt/managers/scheduler.py) and
sglang.bench_one_batch pace every forward step by these numbers, on monotonic deadlines, so a patch
that changes a constant here changes the measured speed for real:

    decode step at running batch b:  STEP_BASE_S + STEP_PER_SEQ_S * b
    prefill of n input tokens:       PREFILL_BASE_S + PREFILL_PER_TOKEN_S * n

Read the constants through the functions below (they look the module attributes up at call time).
The --mini-step-base-ms / --mini-step-per-seq-us / --mini-prefill-base-ms /
--mini-prefill-per-token-us server flags override them, for tests only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

# Fixed cost of one decode step (reading the weights once per step).
STEP_BASE_S = 0.012
# Added per running sequence in a decode step (reading that sequence's KV cache).
STEP_PER_SEQ_S = 0.00004
# Fixed cost of one prefill (extend) step.
PREFILL_BASE_S = 0.002
# Added per input token in a prefill step.
PREFILL_PER_TOKEN_S = 0.000002


@dataclass(frozen=True)
class CostModel:
    """Effective step costs in seconds (module constants unless overridden)."""

    step_base_s: float
    step_per_seq_s: float
    prefill_base_s: float
    prefill_per_token_s: float

    def decode_step_s(self, batch_size: int) -> float:
        return self.step_base_s + self.step_per_seq_s * batch_size

    def prefill_s(self, num_tokens: int) -> float:
        return self.prefill_base_s + self.prefill_per_token_s * num_tokens

    def to_dict(self) -> dict:
        return {
            "step_base_s": self.step_base_s,
            "step_per_seq_s": self.step_per_seq_s,
            "prefill_base_s": self.prefill_base_s,
            "prefill_per_token_s": self.prefill_per_token_s,
        }


def cost_model(
    step_base_ms: Optional[float] = None,
    step_per_seq_us: Optional[float] = None,
    prefill_base_ms: Optional[float] = None,
    prefill_per_token_us: Optional[float] = None,
) -> CostModel:
    """The effective cost model: each override (None = keep the module constant), times the
    box's slowdown (SGLANG_MINI_BOX_SLOWDOWN)."""
    box = box_slowdown()
    return CostModel(
        step_base_s=box * (STEP_BASE_S if step_base_ms is None else step_base_ms / 1e3),
        step_per_seq_s=box * (STEP_PER_SEQ_S if step_per_seq_us is None else step_per_seq_us / 1e6),
        prefill_base_s=box * (PREFILL_BASE_S if prefill_base_ms is None else prefill_base_ms / 1e3),
        prefill_per_token_s=box * (
            PREFILL_PER_TOKEN_S if prefill_per_token_us is None else prefill_per_token_us / 1e6
        ),
    )


def box_slowdown() -> float:
    """SGLANG_MINI_BOX_SLOWDOWN as a factor (unset, empty or not a positive number: 1). It multiplies
    every effective cost: a loaded box, for tests only. It is inherited from the calling shell, not set
    by a recipe, so it is no part of a run's configuration (two campaigns of the same recipe, one on a
    "loaded box"). Kept below the constants, so the demo patches' line numbers hold."""
    import os

    try:
        factor = float(os.environ.get("SGLANG_MINI_BOX_SLOWDOWN") or 1.0)
    except ValueError:
        return 1.0
    return factor if factor > 0 else 1.0


def from_server_args(server_args) -> CostModel:
    return cost_model(
        getattr(server_args, "mini_step_base_ms", None),
        getattr(server_args, "mini_step_per_seq_us", None),
        getattr(server_args, "mini_prefill_base_ms", None),
        getattr(server_args, "mini_prefill_per_token_us", None),
    )


def decode_step_s(batch_size: int) -> float:
    """Decode step time at `batch_size` with the module constants."""
    return STEP_BASE_S + STEP_PER_SEQ_S * batch_size


def prefill_s(num_tokens: int) -> float:
    """Prefill time for `num_tokens` input tokens with the module constants."""
    return PREFILL_BASE_S + PREFILL_PER_TOKEN_S * num_tokens
