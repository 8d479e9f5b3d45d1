"""Tiny models written reproducibly: a config.json, seeded random weights (safetensors) and a
locally trained tokenizer, for real sglang to serve on a CPU.

- `tiny-llama`: a dense 2-layer Llama (`LlamaForCausalLM`).
- `tiny-glm4-moe`: a 2-layer GLM-4-MoE (`Glm4MoeForCausalLM`), routed as GLM-5 and DeepSeek-V3
  route: sigmoid scores, an `e_score_correction_bias`, grouped top-k (`n_group` > 1 so the group
  selection acts), a shared expert and a routed scaling factor. In sglang 0.5.23 this takes
  `select_experts` -> biased grouped top-k, the path `patches/sglang/oea-topk.patch` changes.
  (DeepSeek-V3 itself needs MLA attention, which the CPU's torch_native backend does not serve
  for a random checkpoint as simply; GLM-4-MoE keeps ordinary GQA attention with the same router.)

A model's directory is `$PATCHBENCH_HOME/models/<name>-<key>`, `key` the digest of its spec, the
writer's version and the library versions that make its bytes; `manifest.json` records every
file's sha256. Written into a temporary directory under a file lock and published by rename
(toolkit.build_once), so concurrent callers wait and reuse and a killed write leaves nothing a later
caller trusts.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from toolkit.build_once import build_once
from toolkit.digest import sha256_file
from toolkit.errors import BadInput
from toolkit.models import tokenizer
from toolkit.workspace import default_home

WRITER_VERSION = 3
SCHEME = "tiny:"  # a recipe's server.model = "tiny:<name>"
# The config's vocab: sglang's static-batch benchmark (0.5.23 benchmark/one_batch.py) feeds random
# ids below 10,000, so the embedding holds more rows than that. The tokenizer is trained towards
# TOKENIZER_VOCAB (the shipped prompts give ~1,000 tokens); lm_head's rows past the tokenizer are
# zero, so greedy decoding picks a token the tokenizer can write (the largest of ~1,000 random
# logits is far above 0), as a trained model never predicts ids it never saw.
VOCAB = 10240
TOKENIZER_VOCAB = 2048
INIT_STD = 0.02
# lm_head = random - SELF_PENALTY * embed_tokens: a random 2-layer model's next token follows mostly
# from the current one, and the tokens that predict themselves make greedy answers end in one
# token repeated (which the answers check rightly calls degenerate). The penalty lowers a token's
# own logit by ~SELF_PENALTY * hidden * INIT_STD (1.3 here) against a spread of ~0.25 among the others.
SELF_PENALTY = 0.5

_COMMON = {
    "vocab_size": VOCAB, "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "hidden_act": "silu",
    "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "bos_token_id": tokenizer.BOS_ID,
    "eos_token_id": tokenizer.EOS_ID, "pad_token_id": tokenizer.PAD_ID, "attention_bias": False,
}
SPECS: dict[str, dict] = {
    "tiny-llama": {**_COMMON, "architectures": ["LlamaForCausalLM"], "model_type": "llama"},
    "tiny-glm4-moe": {
        **_COMMON, "architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe",
        "attention_bias": True, "partial_rotary_factor": 0.5, "use_qk_norm": False,
        "n_routed_experts": 16, "num_experts_per_tok": 4, "n_shared_experts": 1,
        "moe_intermediate_size": 64, "n_group": 4, "topk_group": 2, "norm_topk_prob": True,
        "routed_scaling_factor": 2.5, "first_k_dense_replace": 0, "num_nextn_predict_layers": 0,
    },
}
SEED = 0


def names() -> list[str]:
    return sorted(SPECS)


def spec(name: str) -> dict:
    if name not in SPECS:
        raise BadInput(f"no tiny model `{name}`; known: {', '.join(names())}")
    return SPECS[name]


def key(name: str) -> str:
    import safetensors
    import tokenizers

    inputs = {"spec": spec(name), "seed": SEED, "writer": WRITER_VERSION, "init_std": INIT_STD, "self_penalty": SELF_PENALTY,
              "tokenizer_vocab": TOKENIZER_VOCAB,
              "numpy": np.__version__, "safetensors": safetensors.__version__,
              "tokenizers": tokenizers.__version__, "corpus": tokenizer.corpus()}
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]


def model_dir(name: str, home: Path | None = None) -> Path:
    return (home or default_home()) / "models" / f"{name}-{key(name)}"


def weights(cfg: dict, seed: int = SEED, tokens: int | None = None) -> dict[str, np.ndarray]:
    """The checkpoint's tensors by Hugging Face name, float32, drawn in name order from one seed;
    lm_head rows from `tokens` (the tokenizer's size) on are zero."""
    h, v, layers = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    d, nq, nkv = cfg["head_dim"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (v, h),
                                          "model.norm.weight": (h,), "lm_head.weight": (v, h)}
    moe = "n_routed_experts" in cfg
    for i in range(layers):
        p = f"model.layers.{i}."
        shapes |= {p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
                   p + "self_attn.q_proj.weight": (nq * d, h), p + "self_attn.k_proj.weight": (nkv * d, h),
                   p + "self_attn.v_proj.weight": (nkv * d, h), p + "self_attn.o_proj.weight": (h, nq * d)}
        if cfg["attention_bias"]:
            shapes |= {p + "self_attn.q_proj.bias": (nq * d,), p + "self_attn.k_proj.bias": (nkv * d,),
                       p + "self_attn.v_proj.bias": (nkv * d,)}
        if moe and i >= cfg["first_k_dense_replace"]:
            e, m = cfg["n_routed_experts"], cfg["moe_intermediate_size"]
            shapes |= {p + "mlp.gate.weight": (e, h), p + "mlp.gate.e_score_correction_bias": (e,)}
            mlps = [f"mlp.experts.{j}." for j in range(e)]
            mlps += ["mlp.shared_experts."] if cfg["n_shared_experts"] else []
            width = {x: m * (cfg["n_shared_experts"] if "shared" in x else 1) for x in mlps}
        else:
            mlps, width = ["mlp."], {"mlp.": cfg["intermediate_size"]}
        for x in mlps:
            shapes |= {p + x + "gate_proj.weight": (width[x], h), p + x + "up_proj.weight": (width[x], h),
                       p + x + "down_proj.weight": (h, width[x])}
    rng = np.random.default_rng(seed)
    out = {}
    for name in sorted(shapes):
        shape = shapes[name]
        if name.endswith("norm.weight"):
            out[name] = np.ones(shape, np.float32)
        elif name.endswith("e_score_correction_bias"):
            out[name] = rng.normal(0.0, 0.1, shape).astype(np.float32)  # the bias must matter
        elif name.endswith(".bias"):
            out[name] = np.zeros(shape, np.float32)
        else:
            out[name] = rng.normal(0.0, INIT_STD, shape).astype(np.float32)
    out["lm_head.weight"] = out["lm_head.weight"] - SELF_PENALTY * out["model.embed_tokens.weight"]
    if tokens is not None:
        out["lm_head.weight"][tokens:] = 0.0
    return out


def write(name: str, dest: Path) -> None:
    """Write the model's files into `dest` (an empty directory)."""
    from safetensors.numpy import save_file

    cfg = spec(name)
    (dest / "config.json").write_text(json.dumps(cfg, indent=1, sort_keys=True) + "\n")
    tokenizer.train(dest, TOKENIZER_VOCAB)
    from tokenizers import Tokenizer

    tokens = Tokenizer.from_file(str(dest / "tokenizer.json")).get_vocab_size()
    save_file(weights(cfg, tokens=tokens), str(dest / "model.safetensors"), metadata={"format": "pt"})
    (dest / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": cfg["bos_token_id"], "eos_token_id": cfg["eos_token_id"],
         "do_sample": False}, indent=1, sort_keys=True) + "\n")
    files = {p.name: sha256_file(p) for p in sorted(dest.iterdir()) if p.is_file()}
    (dest / "manifest.json").write_text(json.dumps(
        {"name": name, "spec": cfg, "files": files},
        indent=1, sort_keys=True) + "\n")


def ensure(name: str, home: Path | None = None) -> Path:
    """The model's directory, written once for concurrent callers (toolkit.build_once)."""
    final = model_dir(name, home)
    if (final / "manifest.json").is_file():
        return final
    return build_once(final, lambda tmp: write(name, tmp), complete=lambda d: (d / "manifest.json").is_file())


def resolve(model: str | None, home: Path | None = None) -> str | None:
    """A recipe's `server.model`: `tiny:<name>` becomes the written model's directory."""
    if model and model.startswith(SCHEME):
        return str(ensure(model[len(SCHEME):], home))
    return model


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m toolkit.models.tiny",
                                 description="write a tiny model (cached) and print its directory")
    ap.add_argument("name", choices=names())
    args = ap.parse_args(argv)
    print(ensure(args.name))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
