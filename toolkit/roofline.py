"""Decode roofline: the fastest a decode step could possibly be, with every assumption spelled out.

Pure model. The only I/O is reading the shipped data files (``toolkit/data/gpus.toml`` and
``toolkit/data/models/*.json``) or a user's ``config.json`` through the small loaders at the top.

Per GPU, per decode step at batch b (DOMAIN.md, "The decode roofline")::

    component time = max(bytes_read / mem_bw, flops / peak_flops)      # per component, see below
    step time      = sum(component times) + n_allreduce * (latency + ring_bytes / link_bw)
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
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from toolkit.errors import BadInput

DATA_DIR = Path(__file__).resolve().parent / "data"
MODELS_DIR = DATA_DIR / "models"
GPUS_FILE = DATA_DIR / "gpus.toml"

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

SHARDINGS = ("even", "sglang")
ACT_BYTES = 2  # all-reduce payload: bf16 activations


# --------------------------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuSpec:
    """One row of toolkit/data/gpus.toml."""

    key: str
    name: str
    arch: str
    memory_gb: float
    mem_bw_gbps: float
    peak_tflops: tuple[tuple[str, float], ...]  # dense, per dtype
    interconnect: str
    link_bw_gbps: float
    allreduce_latency_us: float
    source: str
    notes: str = ""
    aliases: tuple[str, ...] = ()

    def peak(self, dtype: str) -> float | None:
        """Dense peak in FLOP/s for `dtype`, or None when the GPU has no tensor cores for it."""
        for name, tflops in self.peak_tflops:
            if name == dtype:
                return tflops * 1e12
        return None


@dataclass(frozen=True)
class ModelShape:
    """The parameter counts and dimensions a decode step depends on, from a HF config.json.

    Parameter counts are per layer unless named otherwise. Attention weights are split into the part
    sglang shards over TP (`attn_sharded`) and the part it replicates on every rank
    (`attn_replicated`: MLA q_a/kv_a down-projections; for GQA, `attn_kv` is K/V, replicated only
    when there are fewer KV heads than TP ranks).
    """

    name: str
    kind: str  # "mla_moe", "mla_dense", "gqa_moe", "gqa_dense"
    hidden: int
    layers: int
    vocab: int
    heads: int
    tie_embeddings: bool
    attn_sharded: int
    attn_replicated: int
    attn_kv: int  # GQA K/V projections (0 for MLA)
    kv_heads: int  # GQA KV heads (0 for MLA)
    head_dim: int  # GQA head dim; for MLA the value head dim
    kv_elems_per_token: int  # per layer, whole model (MLA: latent + rope; GQA: 2*kv_heads*head_dim)
    attn_score_dim: int  # per head: q.k dimension at decode (MLA absorbed: kv_lora + rope)
    attn_value_dim: int  # per head: dimension of the context product (MLA absorbed: kv_lora)
    indexer_params: int  # DSA indexer weights per layer (0 without DSA)
    index_heads: int
    index_head_dim: int
    index_topk: int  # 0 without DSA
    dense_layers: int
    dense_mlp_params: int  # per dense layer
    moe_layers: int
    n_experts: int
    top_k: int
    expert_params: int  # one routed expert
    shared_params: int  # all shared experts of one MoE layer
    router_params: int  # per MoE layer
    source: str = ""

    @property
    def is_moe(self) -> bool:
        return self.moe_layers > 0 and self.n_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kind.startswith("mla")

    def active_params(self, batch: int = 1) -> float:
        """Weights one decode step touches at `batch` (embedding table excluded: b rows only)."""
        attn = self.layers * (self.attn_sharded + self.attn_replicated + self.attn_kv + self.indexer_params)
        moe = self.moe_layers * (
            expected_distinct_experts(self.n_experts, self.top_k, batch) * self.expert_params
            + self.shared_params
            + self.router_params
        )
        return attn + self.dense_layers * self.dense_mlp_params + moe + self.vocab * self.hidden

    def total_params(self) -> int:
        attn = self.layers * (self.attn_sharded + self.attn_replicated + self.attn_kv + self.indexer_params)
        moe = self.moe_layers * (self.n_experts * self.expert_params + self.shared_params + self.router_params)
        emb = self.vocab * self.hidden * (1 if self.tie_embeddings else 2)
        return attn + self.dense_layers * self.dense_mlp_params + moe + emb


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


# --------------------------------------------------------------------------------------------
# Outputs
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ComponentCost:
    name: str
    fmt: str  # weight format, or the KV dtype for kv_cache
    bytes: float  # read per GPU per step
    flops: float  # per GPU per step
    peak_dtype: str  # which peak the compute time used
    mem_s: float
    compute_s: float

    @property
    def time_s(self) -> float:
        return max(self.mem_s, self.compute_s)

    @property
    def bound(self) -> str:
        return "compute" if self.compute_s > self.mem_s else "memory"


@dataclass(frozen=True)
class AllReduceCost:
    count: int  # per step
    message_bytes: float  # one all-reduce's payload (hidden * 2 B * b)
    ring_factor: float  # 2(N-1)/N
    bytes_per_gpu: float  # whole step: count * message * ring_factor
    latency_s: float  # whole step: count * per-all-reduce latency
    transfer_s: float  # whole step: bytes_per_gpu / link_bw

    @property
    def time_s(self) -> float:
        return self.latency_s + self.transfer_s


@dataclass(frozen=True)
class BatchResult:
    batch: int
    distinct_experts: float  # per MoE layer, whole model (0 for dense models)
    components: tuple[ComponentCost, ...]
    allreduce: AllReduceCost

    def component(self, name: str) -> ComponentCost:
        for c in self.components:
            if c.name == name:
                return c
        raise KeyError(name)

    @property
    def weight_bytes(self) -> float:
        return sum(c.bytes for c in self.components if c.name != "kv_cache")

    @property
    def kv_bytes(self) -> float:
        return sum(c.bytes for c in self.components if c.name == "kv_cache")

    @property
    def bytes_total(self) -> float:
        return self.weight_bytes + self.kv_bytes

    @property
    def mem_s(self) -> float:
        return sum(c.mem_s for c in self.components)

    @property
    def compute_s(self) -> float:
        return sum(c.compute_s for c in self.components)

    @property
    def gpu_s(self) -> float:
        """Sum over components of max(memory, compute)."""
        return sum(c.time_s for c in self.components)

    @property
    def step_s(self) -> float:
        return self.gpu_s + self.allreduce.time_s

    @property
    def tok_s(self) -> float:
        return self.batch / self.step_s

    @property
    def bound(self) -> str:
        parts = {"memory": 0.0, "compute": 0.0, "all-reduce": self.allreduce.time_s}
        for c in self.components:
            parts[c.bound] += c.time_s
        return max(parts, key=parts.get)

    def to_dict(self) -> dict:
        return {
            "batch": self.batch,
            "distinct_experts": self.distinct_experts,
            "components": [{**asdict(c), "time_s": c.time_s, "bound": c.bound} for c in self.components],
            "allreduce": {**asdict(self.allreduce), "time_s": self.allreduce.time_s},
            "weight_bytes": self.weight_bytes,
            "kv_bytes": self.kv_bytes,
            "mem_s": self.mem_s,
            "compute_s": self.compute_s,
            "step_s": self.step_s,
            "tok_s": self.tok_s,
            "bound": self.bound,
        }


@dataclass(frozen=True)
class RooflineResult:
    inputs: RooflineInputs
    rows: tuple[BatchResult, ...]
    assumptions: tuple[str, ...] = field(default=())

    def row(self, batch: int) -> BatchResult:
        for r in self.rows:
            if r.batch == batch:
                return r
        raise KeyError(batch)

    def to_dict(self) -> dict:
        i = self.inputs
        return {
            "model": i.model.name,
            "gpu": i.gpu.key,
            "gpu_name": i.gpu.name,
            "tp": i.tp,
            "ep": i.ep,
            "context": i.context,
            "kv_dtype": i.kv_dtype,
            "weights": dict(i.weights.formats),
            "weights_spec": i.weights.spec,
            "sharding": i.sharding,
            "allreduce_latency_us": _latency_us(i),
            "rows": [r.to_dict() for r in self.rows],
            "assumptions": list(self.assumptions),
        }


# --------------------------------------------------------------------------------------------
# Loaders (the only I/O)
# --------------------------------------------------------------------------------------------


def known_models() -> list[str]:
    return sorted(p.stem for p in MODELS_DIR.glob("*.json"))


def load_model_config(model: str | Path) -> tuple[str, dict]:
    """NAME (toolkit/data/models/NAME.json), a config.json path, or a directory holding one."""
    text = str(model)
    candidate = MODELS_DIR / f"{text}.json"
    path = candidate if candidate.is_file() else Path(text).expanduser()
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise BadInput(
            f"unknown model {text!r}",
            hint=f"use one of {', '.join(known_models())} or a path to a config.json",
        )
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise BadInput(f"cannot read model config {path}: {exc}", hint="give a Hugging Face config.json") from None
    if not isinstance(config, dict):
        raise BadInput(f"model config {path} is not a JSON object", hint="give a Hugging Face config.json")
    name = path.stem if path.parent == MODELS_DIR else (path.parent.name if path.name == "config.json" else path.stem)
    return name, config


def load_gpus(path: Path = GPUS_FILE) -> dict[str, GpuSpec]:
    with open(path, "rb") as fh:
        table = tomllib.load(fh)
    gpus = {}
    for key, row in table.items():
        gpus[key] = GpuSpec(
            key=key,
            name=row["name"],
            arch=row.get("arch", ""),
            memory_gb=float(row["memory_gb"]),
            mem_bw_gbps=float(row["mem_bw_gbps"]),
            peak_tflops=tuple((k, float(v)) for k, v in row.get("peak_tflops", {}).items()),
            interconnect=row.get("interconnect", ""),
            link_bw_gbps=float(row["link_bw_gbps"]),
            allreduce_latency_us=float(row["allreduce_latency_us"]),
            source=row["source"],
            notes=row.get("notes", ""),
            aliases=tuple(row.get("aliases", ())),
        )
    return gpus


def _norm(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum())


def get_gpu(name: str | GpuSpec) -> GpuSpec:
    if isinstance(name, GpuSpec):
        return name
    gpus = load_gpus()
    want = _norm(name)
    for gpu in gpus.values():
        if want in {_norm(gpu.key), _norm(gpu.name), *(_norm(a) for a in gpu.aliases)}:
            return gpu
    raise BadInput(f"unknown GPU {name!r}", hint=f"use one of {', '.join(gpus)} (toolkit/data/gpus.toml)")


# --------------------------------------------------------------------------------------------
# Pure model
# --------------------------------------------------------------------------------------------


def expected_distinct_experts(n_experts: int, top_k: int, batch: int) -> float:
    """Expected distinct experts one MoE layer loads at batch b: E * (1 - (1 - k/E)^b).

    Each token picks k of E experts; treating each expert as chosen by a token with probability k/E,
    independently across tokens (uniform routing), an expert is untouched with probability
    (1 - k/E)^b. b=1 gives exactly k; large b tends to E.
    """
    if n_experts <= 0 or top_k <= 0 or batch <= 0:
        return 0.0
    if top_k >= n_experts:
        return float(n_experts)
    return n_experts * (1.0 - (1.0 - top_k / n_experts) ** batch)


def _get(cfg: Mapping, key: str, default=None, *, required: bool = False):
    value = cfg.get(key)
    if value is None:
        if required:
            raise BadInput(f"model config has no {key!r}", hint="give a Hugging Face config.json of a decoder LM")
        return default
    return value


def model_shape(config: Mapping, name: str = "") -> ModelShape:
    """Parameter counts of a Hugging Face config: MoE+MLA (DeepSeek-V3, GLM-5), MoE+GQA
    (Qwen3-MoE, Qwen2-MoE, Mixtral) or dense Llama-style. Norms and biases are ignored; MTP
    (next-n prediction) layers are not part of a plain decode step and are ignored."""
    cfg = config
    if "hidden_size" not in cfg and isinstance(cfg.get("text_config"), Mapping):
        cfg = cfg["text_config"]
    hidden = int(_get(cfg, "hidden_size", required=True))
    layers = int(_get(cfg, "num_hidden_layers", required=True))
    vocab = int(_get(cfg, "vocab_size", required=True))
    heads = int(_get(cfg, "num_attention_heads", required=True))
    tie = bool(cfg.get("tie_word_embeddings", False))

    kv_lora = cfg.get("kv_lora_rank")
    indexer_params = index_heads = index_head_dim = index_topk = 0
    if kv_lora:  # MLA
        kv_lora = int(kv_lora)
        q_lora = cfg.get("q_lora_rank")
        rope = int(_get(cfg, "qk_rope_head_dim", required=True))
        nope = int(_get(cfg, "qk_nope_head_dim", required=True))
        v_dim = int(_get(cfg, "v_head_dim", required=True))
        qk = nope + rope
        if q_lora:
            q_a, q_b = hidden * int(q_lora), int(q_lora) * heads * qk
        else:  # q_proj is column-parallel (sharded)
            q_a, q_b = 0, hidden * heads * qk
        kv_a = hidden * (kv_lora + rope)
        kv_b = kv_lora * heads * (nope + v_dim)
        o = heads * v_dim * hidden
        attn_sharded, attn_replicated, attn_kv, kv_heads = q_b + kv_b + o, q_a + kv_a, 0, 0
        head_dim = v_dim
        kv_elems = kv_lora + rope
        score_dim, value_dim = kv_lora + rope, kv_lora  # absorbed MLA at decode
        if cfg.get("index_n_heads"):  # DSA indexer (DeepSeek-V3.2, GLM-5)
            index_heads = int(cfg["index_n_heads"])
            index_head_dim = int(_get(cfg, "index_head_dim", required=True))
            index_topk = int(_get(cfg, "index_topk", required=True))
            q_in = int(q_lora) if q_lora else hidden
            indexer_params = q_in * index_heads * index_head_dim + hidden * index_head_dim + hidden * index_heads
    else:  # GQA / MHA
        head_dim = int(cfg.get("head_dim") or hidden // heads)
        kv_heads = int(cfg.get("num_key_value_heads") or heads)
        attn_sharded = 2 * hidden * heads * head_dim  # q_proj + o_proj
        attn_replicated = 0
        attn_kv = 2 * hidden * kv_heads * head_dim
        kv_elems = 2 * kv_heads * head_dim
        score_dim = value_dim = head_dim

    n_experts = int(cfg.get("n_routed_experts") or cfg.get("num_experts") or cfg.get("num_local_experts") or 0)
    top_k = int(cfg.get("num_experts_per_tok") or 0) if n_experts else 0
    inter = int(cfg.get("intermediate_size") or 0)
    moe_inter = int(cfg.get("moe_intermediate_size") or inter)
    if n_experts and not top_k:
        raise BadInput("MoE model config has no 'num_experts_per_tok'", hint="give the model's own config.json")
    if n_experts:
        if "first_k_dense_replace" in cfg or "n_routed_experts" in cfg:  # DeepSeek / GLM
            first = int(cfg.get("first_k_dense_replace") or 0)
            freq = int(cfg.get("moe_layer_freq") or 1)
            is_moe = [i >= first and i % freq == 0 for i in range(layers)]
        else:  # Qwen2/3-MoE, Mixtral
            step = int(cfg.get("decoder_sparse_step") or 1)
            only_mlp = set(cfg.get("mlp_only_layers") or ())
            is_moe = [i not in only_mlp and (i + 1) % step == 0 for i in range(layers)]
    else:
        is_moe = [False] * layers
    moe_layers = sum(is_moe)
    dense_layers = layers - moe_layers
    if dense_layers and not inter:
        raise BadInput("model config has no 'intermediate_size'", hint="give the model's own config.json")
    expert_params = 3 * hidden * moe_inter if n_experts else 0
    if cfg.get("n_shared_experts"):
        shared = 3 * hidden * moe_inter * int(cfg["n_shared_experts"])
    elif cfg.get("shared_expert_intermediate_size"):
        shared = 3 * hidden * int(cfg["shared_expert_intermediate_size"])
    else:
        shared = 0
    router = n_experts * hidden if n_experts else 0
    kind = ("mla" if kv_lora else "gqa") + ("_moe" if moe_layers else "_dense")
    return ModelShape(
        name=name or str(cfg.get("model_type", "model")),
        kind=kind,
        hidden=hidden,
        layers=layers,
        vocab=vocab,
        heads=heads,
        tie_embeddings=tie,
        attn_sharded=attn_sharded,
        attn_replicated=attn_replicated,
        attn_kv=attn_kv,
        kv_heads=kv_heads,
        head_dim=head_dim,
        kv_elems_per_token=kv_elems,
        attn_score_dim=score_dim,
        attn_value_dim=value_dim,
        indexer_params=indexer_params,
        index_heads=index_heads,
        index_head_dim=index_head_dim,
        index_topk=index_topk,
        dense_layers=dense_layers,
        dense_mlp_params=3 * hidden * inter if dense_layers else 0,
        moe_layers=moe_layers,
        n_experts=n_experts,
        top_k=top_k,
        expert_params=expert_params,
        shared_params=shared,
        router_params=router,
        source=str(config.get("_source", "")),
    )


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


def _latency_us(inputs: RooflineInputs) -> float:
    if inputs.allreduce_latency_us is not None:
        return float(inputs.allreduce_latency_us)
    return inputs.gpu.allreduce_latency_us


def _compute_dtype(fmt: str, gpu: GpuSpec) -> str:
    """Which tensor-core peak a GEMM with `fmt` weights runs at."""
    if fmt in ("nvfp4", "mxfp4"):
        return "fp4" if gpu.peak("fp4") else "bf16"
    if fmt == "fp8":
        return "fp8" if gpu.peak("fp8") else "bf16"
    return "bf16"


def validate(inputs: RooflineInputs) -> None:
    if inputs.tp < 1 or inputs.ep < 1:
        raise BadInput(f"TP and EP must be >= 1 (got tp={inputs.tp}, ep={inputs.ep})", hint="e.g. --tp 8 --ep 1")
    if inputs.tp % inputs.ep:
        raise BadInput(
            f"EP={inputs.ep} must divide TP={inputs.tp}",
            hint="sglang runs expert parallelism inside the TP group: use --ep 1 or --ep equal to --tp",
        )
    if inputs.ep > 1 and not inputs.model.is_moe:
        raise BadInput(f"EP={inputs.ep} on a dense model", hint="use --ep 1 for dense models")
    if inputs.model.is_moe and inputs.model.n_experts % inputs.ep:
        raise BadInput(
            f"EP={inputs.ep} does not divide {inputs.model.n_experts} experts", hint="pick an EP that divides it"
        )
    if not inputs.batches or any(b < 1 for b in inputs.batches):
        raise BadInput(f"batch sizes must be >= 1 (got {list(inputs.batches)})", hint="e.g. --batch 1,2,4,8")
    if inputs.context < 0:
        raise BadInput(f"context must be >= 0 (got {inputs.context})", hint="e.g. --context 1024")
    if inputs.kv_dtype not in KV_BYTES:
        raise BadInput(f"unknown KV dtype {inputs.kv_dtype!r}", hint=f"use one of {', '.join(KV_BYTES)}")
    if inputs.sharding not in SHARDINGS:
        raise BadInput(f"unknown sharding {inputs.sharding!r}", hint=f"use one of {', '.join(SHARDINGS)}")
    if _latency_us(inputs) < 0:
        raise BadInput("all-reduce latency must be >= 0", hint="e.g. --allreduce-latency-us 10")


def _batch(inputs: RooflineInputs, b: int) -> BatchResult:
    m, g, w, tp = inputs.model, inputs.gpu, inputs.weights, inputs.tp
    sglang = inputs.sharding == "sglang"
    bw = g.mem_bw_gbps * 1e9
    out: list[ComponentCost] = []

    def add(name: str, params: float, flops: float, fmt: str | None = None, extra_bytes: float = 0.0) -> None:
        fmt = fmt or w.of(name)
        nbytes = params * BYTES_PER_PARAM[fmt] + extra_bytes
        dtype = _compute_dtype(fmt, g)
        peak = g.peak(dtype) or g.peak("bf16")
        out.append(ComponentCost(name, fmt, nbytes, flops, dtype, nbytes / bw, flops / peak if peak else 0.0))

    # Attention projections. "even": all / TP. "sglang": MLA q_a/kv_a replicated; GQA K/V split by
    # KV head with at least one head per rank (QKVParallelLinear replicates when kv_heads < TP).
    if sglang:
        kv_share = max(m.kv_heads / tp, 1.0) / m.kv_heads if m.kv_heads else 0.0
        attn = m.layers * (m.attn_sharded / tp + m.attn_replicated + m.attn_kv * kv_share)
    else:
        attn = m.layers * (m.attn_sharded + m.attn_replicated + m.attn_kv) / tp
    add("attention", attn, 2 * b * attn)
    if m.indexer_params:
        idx = m.layers * m.indexer_params * (1 if sglang else 1 / tp)
        add("indexer", idx, 2 * b * idx)
    if m.dense_layers:
        dense = m.dense_layers * m.dense_mlp_params / tp
        add("dense_mlp", dense, 2 * b * dense)
    distinct = 0.0
    if m.is_moe:
        distinct = expected_distinct_experts(m.n_experts, m.top_k, b)
        # Each GPU holds E/EP experts, each sliced over TP/EP: on average distinct/EP experts of
        # size expert/(TP/EP) per rank = distinct * expert / TP, whatever EP is.
        routed = m.moe_layers * distinct * m.expert_params / tp
        add("experts", routed, 2 * b * m.top_k * m.moe_layers * m.expert_params / tp)
        if m.shared_params:
            shared = m.moe_layers * m.shared_params / tp
            add("shared_experts", shared, 2 * b * shared)
        router = m.moe_layers * m.router_params * (1 if sglang else 1 / tp)
        add("router", router, 2 * b * router)
    add("embed", b * m.hidden / tp, 0.0)  # lookup of b rows
    head = m.vocab * m.hidden / tp
    add("lm_head", head, 2 * b * head)

    # KV cache: bytes read and the attention score/context FLOPs.
    kvb = KV_BYTES[inputs.kv_dtype]
    ctx = inputs.context
    if m.is_mla:
        attn_tokens = min(ctx, m.index_topk) if m.index_topk else ctx
        kv_bytes = b * m.layers * attn_tokens * m.kv_elems_per_token * kvb  # latent replicated per rank
        if m.index_topk:
            kv_bytes += b * m.layers * ctx * (m.index_head_dim + 4)  # fp8 index keys + fp32 scale
            idx_flops = 2 * b * m.layers * ctx * m.index_heads * m.index_head_dim * (1 if sglang else 1 / tp)
        else:
            idx_flops = 0.0
        core = 2 * b * m.layers * (m.heads / tp) * attn_tokens * (m.attn_score_dim + m.attn_value_dim)
        kv_flops = core + idx_flops
    else:
        heads_per_gpu = max(m.kv_heads / tp, 1.0)
        kv_bytes = b * m.layers * ctx * 2 * heads_per_gpu * m.head_dim * kvb
        kv_flops = 2 * b * m.layers * (m.heads / tp) * ctx * (m.attn_score_dim + m.attn_value_dim)
    peak = g.peak("bf16")
    out.append(ComponentCost("kv_cache", inputs.kv_dtype, kv_bytes, kv_flops, "bf16", kv_bytes / bw, kv_flops / peak))

    # All-reduce: one after attention and one after the MLP/MoE in every layer (TP > 1).
    count = 2 * m.layers if tp > 1 else 0
    message = m.hidden * ACT_BYTES * b
    ring = 2 * (tp - 1) / tp
    ar_bytes = count * message * ring
    ar = AllReduceCost(
        count=count,
        message_bytes=float(message),
        ring_factor=ring,
        bytes_per_gpu=ar_bytes,
        latency_s=count * _latency_us(inputs) * 1e-6,
        transfer_s=ar_bytes / (g.link_bw_gbps * 1e9) if count else 0.0,
    )
    return BatchResult(batch=b, distinct_experts=distinct, components=tuple(out), allreduce=ar)


def _fmt_gb(x: float) -> str:
    return f"{x / 1e9:.3g} GB"


def assumptions(inputs: RooflineInputs) -> tuple[str, ...]:
    """Every assumption behind the numbers, as sentences to print next to them."""
    m, g, w, tp, ep = inputs.model, inputs.gpu, inputs.weights, inputs.tp, inputs.ep
    present = ["attention"] + (["indexer"] if m.indexer_params else []) + (["dense_mlp"] if m.dense_layers else [])
    if m.is_moe:
        present += ["experts"] + (["shared_experts"] if m.shared_params else []) + ["router"]
    present += ["embed", "lm_head"]
    by_fmt: dict[str, list[str]] = {}
    for comp in present:
        by_fmt.setdefault(w.of(comp), []).append(comp)
    fmt_text = "; ".join(
        f"{fmt} = {BYTES_PER_PARAM[fmt]:.6g} B/param{' (' + FORMAT_NOTES[fmt] + ')' if FORMAT_NOTES[fmt] else ''}: "
        + ", ".join(comps)
        for fmt, comps in by_fmt.items()
    )
    out = [
        (
            f"Model {m.name}: {m.kind}, {m.layers} layers ({m.dense_layers} dense, {m.moe_layers} MoE), "
            f"hidden {m.hidden}, {m.total_params() / 1e9:.1f}B params, {m.active_params(1) / 1e9:.2f}B read per "
            "token at b=1 (embedding table excluded); norms, biases and MTP/next-n layers ignored."
        )
    ]
    out.append(
        f"Weights ({w.spec}): {fmt_text}."
        + (
            f" Not named in the spec, so {DEFAULT_FORMAT}: {', '.join(c for c in w.defaulted if c in present)}."
            if any(c in present for c in w.defaulted)
            else ""
        )
    )
    if m.is_moe:
        out.append(
            f"Routed experts: a layer reads the expected distinct experts E*(1-(1-k/E)^b) with E={m.n_experts}, "
            f"k={m.top_k} (uniform, independent routing; b=1 gives k, large b tends to E); attention, "
            + ("dense MLP, " if m.dense_layers else "")
            + ("shared experts, " if m.shared_params else "")
            + "router and lm_head are read in full every step."
        )
    else:
        out.append("Every weight is read once per step (dense model).")
    out.append("Embedding: a lookup reads b rows, not the table; lm_head reads its whole V x hidden matrix.")
    if tp == 1:
        out.append("TP=1: one GPU holds every weight.")
    else:
        rep = []
        if m.attn_replicated:
            rep.append("MLA q_a/kv_a projections")
        if m.indexer_params:
            rep.append("DSA indexer")
        if m.router_params:
            rep.append("router")
        if m.kv_heads and m.kv_heads < tp:
            rep.append(f"K/V projections ({m.kv_heads} KV heads < TP={tp}: one head per rank)")
        if inputs.sharding == "even":
            out.append(
                f"Sharding 'even': every weight byte is split evenly over TP={tp} GPUs (ideal)."
                + (
                    f" sglang really replicates the {', '.join(rep)} on every rank: sharding 'sglang' counts that."
                    if rep
                    else ""
                )
            )
        else:
            out.append(
                f"Sharding 'sglang': replicated on every TP rank as sglang does: {', '.join(rep) or 'nothing'}; "
                f"everything else split over TP={tp}."
            )
    if ep > 1:
        out.append(
            f"EP={ep} inside TP={tp}: each GPU holds E/EP={m.n_experts // ep} experts, each sliced over TP/EP={tp // ep}; "
            "routed-expert bytes and FLOPs are the average over ranks (in reality the most-loaded rank sets the pace; "
            "imbalance not modelled), so EP changes no number here."
        )
    kvb = KV_BYTES[inputs.kv_dtype]
    if m.is_mla:
        kv = (
            f"KV cache: context {inputs.context} tokens per sequence, {inputs.kv_dtype} ({kvb:g} B/elem, scales ignored); "
            f"MLA latent {m.kv_elems_per_token} elems/token/layer (kv_lora_rank + qk_rope_head_dim), replicated on every TP rank"
        )
        if m.index_topk:
            kv += (
                f"; DSA: attention reads min(context, index_topk={m.index_topk}) tokens, the indexer reads all "
                f"context tokens' fp8 keys ({m.index_head_dim} B + 4 B scale)"
            )
        out.append(kv + ". Attention core runs absorbed MLA (score dim kv_lora+rope, value dim kv_lora).")
    else:
        out.append(
            f"KV cache: context {inputs.context} tokens per sequence, {inputs.kv_dtype} ({kvb:g} B/elem); "
            f"{m.kv_heads} KV heads x head_dim {m.head_dim} x 2 (K,V) per token per layer, KV heads split over TP "
            "(at least one per GPU)."
        )
    if inputs.context == 0:
        out.append("Context 0: KV cache reads and attention-core FLOPs are left out (the single-token limit).")
    out.append(
        f"Memory: {g.name} at {g.mem_bw_gbps:g} GB/s fully achieved (no L2 reuse, no kernel launch gaps); "
        "activations are not counted."
    )
    peaks = ", ".join(f"{k} {v:g}" for k, v in g.peak_tflops)
    out.append(
        f"Compute: 2 FLOPs per weight per token (routed experts: k per token); dense peak TFLOPS {peaks} ({g.key}); "
        "NVFP4/MXFP4 weights run at the fp4 peak where the GPU has FP4 tensor cores, else bf16; FP8 at fp8; "
        "BF16 and the attention core at bf16."
    )
    out.append(
        "Per-component roofline: each component (attention, experts, lm_head, KV cache, ...) takes "
        "max(bytes / mem_bw, FLOPs / peak); step time = sum of components + all-reduce time; "
        "no overlap of communication with compute."
    )
    if tp > 1:
        lat = _latency_us(inputs)
        src = "overridden" if inputs.allreduce_latency_us is not None else f"{g.interconnect} table value"
        out.append(
            f"All-reduce: 2 per layer (after attention and after MLP/MoE) = {2 * m.layers} per step; message = hidden "
            f"{m.hidden} x {ACT_BYTES} B (bf16) x b; ring traffic per GPU = 2(N-1)/N = {2 * (tp - 1) / tp:.3g} x message; "
            f"each costs {lat:g} us latency ({src}) + traffic / {g.link_bw_gbps:g} GB/s link; the embedding all-reduce "
            "and the logits all-gather are not counted."
        )
    else:
        out.append("TP=1: no all-reduce.")
    out.append(
        "tok/s = b / step time: decode only, one token per sequence per step; no scheduler, sampling or "
        "speculative-decoding effects."
    )
    out.append(f"GPU numbers: {g.source}." + (f" {g.notes}" if g.notes else ""))
    return tuple(out)


def roofline(inputs: RooflineInputs) -> RooflineResult:
    """The roofline at every batch size in `inputs.batches`."""
    validate(inputs)
    rows = tuple(_batch(inputs, b) for b in inputs.batches)
    return RooflineResult(inputs=inputs, rows=rows, assumptions=assumptions(inputs))


def make_inputs(
    model: str | Path | Mapping | ModelShape,
    gpu: str | GpuSpec,
    *,
    tp: int = 1,
    ep: int = 1,
    batches: Iterable[int] = (1,),
    context: int = 0,
    weights: str | Iterable[str] | WeightFormats | None = None,
    kv_dtype: str = "bf16",
    allreduce_latency_us: float | None = None,
    sharding: str = "even",
) -> RooflineInputs:
    """Build inputs from names: a model NAME/path/config dict, a GPU name, a weight spec."""
    if isinstance(model, ModelShape):
        shape = model
    elif isinstance(model, Mapping):
        shape = model_shape(model)
    else:
        name, cfg = load_model_config(model)
        shape = model_shape(cfg, name)
    return RooflineInputs(
        model=shape,
        gpu=get_gpu(gpu),
        weights=parse_weights(weights),
        tp=int(tp),
        ep=int(ep),
        batches=tuple(int(b) for b in batches),
        context=int(context),
        kv_dtype=kv_dtype,
        allreduce_latency_us=allreduce_latency_us,
        sharding=sharding,
    )


def theoretical_tok_s(
    model: str | dict,
    gpu: str,
    tp: int,
    ep: int,
    batch: int,
    context: int,
    weights: str,
) -> float:
    """Theoretical decode tok/s (even sharding, bf16 KV cache, the table's all-reduce latency):
    the denominator of efficiency = measured / theoretical."""
    inputs = make_inputs(model, gpu, tp=tp, ep=ep, batches=(batch,), context=context, weights=weights)
    return roofline(inputs).rows[0].tok_s


SEED_ASSUMPTION = (
    "Seed reproduction (GLM-5-NVFP4 on 8x RTX PRO 6000, TP8, b=1 -> ~309 tok/s): every weight NVFP4 "
    "(0.5625 B/param) including attention, DSA indexer, dense MLP, shared expert, router and lm_head; only the "
    "weights a step touches (8 routed + 1 shared expert per MoE layer); every byte split evenly over the 8 GPUs; "
    "KV cache negligible (context 0); 1,792 GB/s fully achieved; 156 all-reduces x (10 us + 21.5 kB ring "
    "traffic / 64 GB/s). The real checkpoint keeps attention and the rest in BF16 (experts=nvfp4,rest=bf16)."
)


def seed_glm5(weights: str = SEED_GLM5_WEIGHTS, **overrides) -> RooflineResult:
    """The seed's scenario (see seed_glm5_inputs) with SEED_ASSUMPTION leading the assumptions."""
    result = roofline(seed_glm5_inputs(weights, **overrides))
    return replace(result, assumptions=(SEED_ASSUMPTION, *result.assumptions))


def seed_glm5_inputs(weights: str = SEED_GLM5_WEIGHTS, **overrides) -> RooflineInputs:
    """The seed's setup: GLM-5 on 8x RTX PRO 6000, TP8, b=1, KV negligible (context 0), 10 us per
    all-reduce, every weight byte split evenly. With SEED_GLM5_WEIGHTS this gives ~309 tok/s."""
    kw = {"tp": 8, "ep": 1, "batches": (1,), "context": 0, "weights": weights, "sharding": "even"}
    kw.update(overrides)
    return make_inputs("glm-5", "rtx-pro-6000", **kw)


__all__ = [
    "BYTES_PER_PARAM",
    "COMPONENTS",
    "DEFAULT_WEIGHTS",
    "GLM5_CHECKPOINT_WEIGHTS",
    "SEED_ASSUMPTION",
    "SEED_GLM5_WEIGHTS",
    "AllReduceCost",
    "BatchResult",
    "ComponentCost",
    "GpuSpec",
    "ModelShape",
    "RooflineInputs",
    "RooflineResult",
    "WeightFormats",
    "assumptions",
    "expected_distinct_experts",
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
]
