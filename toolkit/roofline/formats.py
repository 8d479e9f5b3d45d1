"""Weight formats: bytes per parameter, the components a spec can name, and the spec parser."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from toolkit.errors import BadInput

# Bytes per parameter, scales included.
#  nvfp4: E2M1 (0.5 B) + one FP8 E4M3 scale per 16 values (1/16 B) + one FP32 per tensor (~0).
#  mxfp4: E2M1 + one E8M0 scale per 32 values.
#  fp8:   E4M3 + one FP32 scale per 128x128 block (DeepSeek-style block quantisation).
BYTES_PER_PARAM: dict[str, float] = {
    "nvfp4": 0.5 + 1 / 16,
    "mxfp4": 0.5 + 1 / 32,
    "fp8": 1.0 + 4 / (128 * 128),
    "bf16": 2.0,
    "fp16": 2.0,
    "fp32": 4.0,
}
FORMAT_NOTES: dict[str, str] = {
    "nvfp4": "E2M1 + FP8 scale per 16 + FP32 per tensor",
    "mxfp4": "E2M1 + E8M0 scale per 32",
    "fp8": "E4M3 + FP32 scale per 128x128 block",
    "bf16": "",
    "fp16": "",
    "fp32": "",
}
KV_BYTES: dict[str, float] = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp32": 4.0}

# Weight components a format spec can name. "all" sets every component, "rest" every component the
# spec does not name explicitly; explicit names always win over all/rest, whatever the order.
COMPONENTS: tuple[str, ...] = (
    "attention",
    "indexer",
    "dense_mlp",
    "experts",
    "shared_experts",
    "router",
    "embed",
    "lm_head",
)
COMPONENT_ALIASES: dict[str, str] = {
    "attn": "attention",
    "mla": "attention",
    "dsa_indexer": "indexer",
    "mlp": "dense_mlp",
    "dense": "dense_mlp",
    "routed_experts": "experts",
    "routed": "experts",
    "moe": "experts",
    "shared": "shared_experts",
    "shared_expert": "shared_experts",
    "gate": "router",
    "embeddings": "embed",
    "embed_tokens": "embed",
    "embedding": "embed",
    "head": "lm_head",
}
DEFAULT_FORMAT = "bf16"
DEFAULT_WEIGHTS = "experts=nvfp4,rest=bf16"

# The weight assumption that reproduces the seed's 309 tok/s (see module docstring and tests).
SEED_GLM5_WEIGHTS = "all=nvfp4"
# What the real GLM-5-NVFP4 checkpoint ships: routed experts NVFP4, attention and the rest BF16.
GLM5_CHECKPOINT_WEIGHTS = "experts=nvfp4,rest=bf16"


@dataclass(frozen=True)
class WeightFormats:
    """Weight format per component, from a spec such as "experts=nvfp4,rest=bf16"."""

    spec: str  # canonical, as given (joined)
    formats: tuple[tuple[str, str], ...]  # (component, format) for every component in COMPONENTS
    defaulted: tuple[str, ...] = ()  # components no rule covered (they got DEFAULT_FORMAT)

    def of(self, component: str) -> str:
        return dict(self.formats)[component]

    def bytes_per_param(self, component: str) -> float:
        return BYTES_PER_PARAM[self.of(component)]


def parse_weights(spec: str | Iterable[str] | WeightFormats | None) -> WeightFormats:
    """ "experts=nvfp4,rest=bf16", "all=nvfp4,lm_head=bf16", or several such strings (joined in order,
    a later rule for the same component wins). Explicit component names win over all/rest."""
    if isinstance(spec, WeightFormats):
        return spec
    if spec is None:
        spec = DEFAULT_WEIGHTS
    parts = [spec] if isinstance(spec, str) else list(spec)
    items = [item.strip() for part in parts for item in part.split(",") if item.strip()]
    if not items:
        raise BadInput("empty --weights spec", hint=f"e.g. {DEFAULT_WEIGHTS!r} or 'all=nvfp4,lm_head=bf16'")
    explicit: dict[str, str] = {}
    blanket: dict[str, str] = {}  # "all" / "rest"
    for item in items:
        key, sep, fmt = item.partition("=")
        key, fmt = key.strip().lower().replace("-", "_"), fmt.strip().lower()
        if not sep or not key or not fmt:
            raise BadInput(
                f"bad --weights item {item!r}: expected COMPONENT=FORMAT",
                hint=f"e.g. {DEFAULT_WEIGHTS!r}; components: all, rest, {', '.join(COMPONENTS)}",
            )
        if fmt not in BYTES_PER_PARAM:
            raise BadInput(
                f"unknown weight format {fmt!r} in {item!r}", hint=f"use one of {', '.join(BYTES_PER_PARAM)}"
            )
        if key in ("all", "rest"):
            blanket[key] = fmt
            continue
        key = COMPONENT_ALIASES.get(key, key)
        if key not in COMPONENTS:
            raise BadInput(
                f"unknown weight component {key!r} in {item!r}",
                hint=f"use all, rest or one of {', '.join(COMPONENTS)}",
            )
        explicit[key] = fmt
    formats, defaulted = [], []
    for comp in COMPONENTS:
        if comp in explicit:
            fmt = explicit[comp]
        elif "rest" in blanket:
            fmt = blanket["rest"]
        elif "all" in blanket:
            fmt = blanket["all"]
        else:
            fmt = DEFAULT_FORMAT
            defaulted.append(comp)
        formats.append((comp, fmt))
    return WeightFormats(spec=",".join(items), formats=tuple(formats), defaulted=tuple(defaulted))
