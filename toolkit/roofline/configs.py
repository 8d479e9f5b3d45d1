"""Model configs and GPUs: the shipped data files, a user's HF config.json, and the shape they give.

The only I/O of the roofline: reading ``toolkit/data/gpus.toml`` and ``toolkit/data/models/*.json``
(or a user's ``config.json``). Everything here returns plain values.
"""

from __future__ import annotations

import json
import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from toolkit.errors import BadInput
from toolkit.resources import DATA_DIR

DATA_DIR = DATA_DIR
MODELS_DIR = DATA_DIR / "models"
GPUS_FILE = DATA_DIR / "gpus.toml"


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
    # MLA per layer: q_b_proj (q_proj without q_lora) + kv_b's w_kc, the head-split weights sglang's
    # dcp_replicate_q_proj gathers whole over the DCP group (0 for GQA)
    attn_q_replicable: int = 0

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


def experts_on_busiest_gpu(distinct: float, ep: int) -> float:
    """Whole experts the busiest EP rank reads per MoE layer when `distinct` are active.

    EP 1: every GPU reads a 1/tp slice of every active expert (`distinct` experts' worth, sliced).
    EP > 1: a rank holds E/ep whole experts, so the busiest reads at least ceil(distinct / ep) of
    them even with perfectly balanced routing (the bound: real routing loads it more), e.g. top-2
    over EP8 leaves 6 ranks idle and 2 reading one whole expert each.
    """
    if ep <= 1 or distinct <= 0:
        return distinct
    return float(math.ceil(distinct / ep - 1e-9))


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
    (next-n prediction) layers are not part of a plain decode step and are ignored. A field that
    is not a number is BadInput naming it."""
    try:
        return _model_shape(config, name)
    except (TypeError, ValueError) as exc:
        raise BadInput(f"model config {name or ''}: a size field is not a number ({exc})".replace(" :", ":"),
                       hint="give a Hugging Face config.json of a decoder LM") from None


def _model_shape(config: Mapping, name: str = "") -> ModelShape:
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
        q_replicable = q_b + kv_lora * heads * nope  # q_b_proj / q_proj + w_kc
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
        q_replicable = 0

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
        attn_q_replicable=q_replicable,
    )
