"""Flags a server accepts and reports, on a path that does not read them (pure).

`/server_info` echoes a flag as set whether or not the code the model runs reads it, so a recipe can
pass every check and measure the baseline twice (the brief's "EP8" script that never passed
`--ep-size 8`, one level down). Each rule here was read against one sglang release's source and names
it; the static check prints its line as a warning (stored with the run) for that release only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

DEEPSEEK_FAMILY = ("DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM",
                   "GlmMoeDsaForCausalLM", "Glm4MoeForCausalLM")


def _on(value) -> bool:
    return str(value).strip().lower() in ("true", "1", "yes")


@dataclass(frozen=True)
class Rule:
    release: str  # the sglang version the rule was read against
    applies: Callable[[Mapping, str], bool]  # (resolved fields, model architecture) -> inert here
    text: str


RULES = (
    Rule("0.5.23",
         lambda f, arch: _on(f.get("enable_single_batch_overlap")) and str(f.get("moe_a2a_backend", "none")) == "none"
         and arch in DEEPSEEK_FAMILY,
         "--enable-single-batch-overlap with moe_a2a_backend none: sglang 0.5.23 overlaps SBO's combine only in "
         "its all-to-all MoE path (models/deepseek_v2.py forward_deepep); a decode step captured in a CUDA graph "
         "takes forward_normal_dual_stream, which puts the shared expert on a second stream with or without the "
         "flag, so it acts only on eager forwards (prefills, decode batches above the graphs' max_bs): a decode "
         "difference from the baseline is not SBO's"),
)


def inert_flags(fields: Mapping, version: str | None, architecture: str | None) -> list[str]:
    """The warnings of the rules read against `version` that hold for these resolved fields."""
    return [f"sglang {r.release}: {r.text}" for r in RULES
            if version == r.release and r.applies(fields, architecture or "")]
