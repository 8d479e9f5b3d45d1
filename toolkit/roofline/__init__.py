"""Decode roofline: the fastest a decode step could possibly be, with every assumption spelled out.

Pure model. The only I/O is reading the shipped data files (``toolkit/data/gpus.toml`` and
``toolkit/data/models/*.json``) or a user's ``config.json``, through the loaders in ``configs``.

Per GPU, per decode step at batch b (DOMAIN.md, "The decode roofline")::

    component time = max(bytes_read / mem_bw, flops / peak_flops)      # per component, see below
    step time      = sum(component times) + n_collectives * latency + bytes_sent / link_bw   # see comm
    tok/s          = b / step time

Components: ``attention`` (projection weights), ``indexer`` (DSA indexer weights, GLM-5 /
DeepSeek-V3.2), ``dense_mlp``, ``experts`` (routed; the expected distinct experts a layer loads at
batch b is ``E * (1 - (1 - k/E)**b)``), ``shared_experts``, ``router``, ``embed``, ``lm_head`` and
``kv_cache`` (KV bytes plus the attention score/context FLOPs).

The max is taken **per component** (each kernel is either memory- or compute-bound and they run one
after another), not per layer: sum-of-max is >= max-of-sum, so this is the slightly more
conservative of the two. Communication is never overlapped with compute.

Reproducing the seed (GLM-5-NVFP4, 8x RTX PRO 6000, TP8, b=1: 156 all-reduces, ~3.3 MB, 1.56 ms,
~309 tok/s) needs :data:`SEED_GLM5_WEIGHTS` (every weight NVFP4, attention included), even sharding,
a negligible KV cache (context ~0) and the all-reduce transfer term: see :func:`seed_glm5_inputs`.

The package, one concept per module (everything public is re-exported here):
``configs`` (GPU table, model configs, HF config.json -> ModelShape: the only I/O), ``comm`` (the
communication term: all-reduces, attention-DP gather/scatter, all-to-all dispatch/combine), ``formats``
(bytes per parameter, the weight-spec parser), ``inputs`` (RooflineInputs), ``model`` (the pure
model and its result types) and ``assumptions`` (the sentences printed beside the numbers).
"""

from __future__ import annotations

from toolkit.roofline.assumptions import assumptions
from toolkit.roofline.comm import DCP_COMMS, DISPATCH_BYTES, comm_cost
from toolkit.roofline.configs import (
    DATA_DIR, GPUS_FILE, MODELS_DIR, GpuSpec, ModelShape, expected_distinct_experts, experts_on_busiest_gpu, get_gpu,
    known_models, load_gpus, load_model_config, model_shape,
)
from toolkit.roofline.formats import (
    BYTES_PER_PARAM, COMPONENT_ALIASES, COMPONENTS, DEFAULT_FORMAT, DEFAULT_WEIGHTS, FORMAT_NOTES,
    GLM5_CHECKPOINT_WEIGHTS, KV_BYTES, SEED_GLM5_WEIGHTS, WeightFormats, parse_weights,
)
from toolkit.roofline.inputs import ACT_BYTES, SHARDINGS, RooflineInputs
from toolkit.roofline.model import (
    SEED_ASSUMPTION, AllReduceCost, BatchResult, ComponentCost, RooflineResult, make_inputs, roofline,
    seed_glm5, seed_glm5_inputs, theoretical_tok_s, validate,
)


__all__ = [
    "ACT_BYTES",
    "BYTES_PER_PARAM",
    "COMPONENTS",
    "COMPONENT_ALIASES",
    "DATA_DIR",
    "DCP_COMMS",
    "DEFAULT_FORMAT",
    "DEFAULT_WEIGHTS",
    "DISPATCH_BYTES",
    "FORMAT_NOTES",
    "GLM5_CHECKPOINT_WEIGHTS",
    "GPUS_FILE",
    "KV_BYTES",
    "MODELS_DIR",
    "SEED_ASSUMPTION",
    "SEED_GLM5_WEIGHTS",
    "SHARDINGS",
    "AllReduceCost",
    "BatchResult",
    "ComponentCost",
    "GpuSpec",
    "ModelShape",
    "RooflineInputs",
    "RooflineResult",
    "WeightFormats",
    "assumptions",
    "comm_cost",
    "expected_distinct_experts",
    "experts_on_busiest_gpu",
    "get_gpu",
    "known_models",
    "load_gpus",
    "load_model_config",
    "make_inputs",
    "model_shape",
    "parse_weights",
    "roofline",
    "seed_glm5",
    "seed_glm5_inputs",
    "theoretical_tok_s",
    "validate",
]
