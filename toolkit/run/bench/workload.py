"""What the serving client sends: its configuration, the deterministic prompts and the request
bodies (pure). See `toolkit.run.bench.serving` for the sweep that sends them.

Prompts are deterministic from `seed`, the point's concurrency and the request index (random, so
requests practically share no prefix and a radix cache cannot make later points look faster):
  * "input_ids": random token ids in [1000, vocab_size - 1000) (a quarter of the vocab as the
    margin when it holds under 3,000 tokens): exact length on any server; `vocab_size` is the
    model's own when its config.json says it is under the default (real sglang fails a request
    holding an id outside the embedding: `IndexError: index out of range`);
  * "text": random words, exactly `input_len` tokens for the miniature's whitespace tokenizer;
  * "auto" (default): "text" if /server_info says the server is the miniature, else "input_ids".
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Optional

from toolkit.errors import BadInput

DEFAULT_CONCURRENCY: tuple[int, ...] = tuple(2**i for i in range(11))  # 1, 2, 4, ..., 1024
ENDPOINTS = {"generate": "/generate", "completions": "/v1/completions"}
PROMPT_KINDS = ("auto", "text", "input_ids")
DEFAULT_VOCAB = 32000  # random input ids: drawn below it (or below a smaller model's vocab)
WARMUP_MAX_OUTPUT = 32



def default_num_prompts(concurrency: int) -> int:
    """Requests per point when ServingConfig.num_prompts is None: four waves, at least 8."""
    return max(4 * concurrency, 8)


@dataclass(frozen=True)
class ServingConfig:
    input_len: int = 1024
    output_len: int = 128
    concurrency: tuple[int, ...] = DEFAULT_CONCURRENCY
    num_prompts: Optional[int] = None  # per point; None -> default_num_prompts(concurrency)
    warmup: int = 2  # per point, excluded; run at min(warmup, concurrency) in flight
    seed: int = 1
    endpoint: str = "generate"  # "generate" (sglang native) | "completions" (OpenAI)
    timeout_s: float = 600.0  # per request
    prompt: str = "auto"  # "auto" | "text" | "input_ids"
    stream: bool = True
    model: Optional[str] = None  # "model" for /v1/completions; None -> the server's served name
    vocab_size: int = DEFAULT_VOCAB  # random input ids are drawn from [1000, vocab_size - 1000)
    send_rid: bool = False  # send "rid": "pb-<seed>-<concurrency>-<m|w><index>" (/generate only)
    flush_cache: bool = False  # POST /flush_cache before each point's warm-up (an empty prefix cache)
    warmup_fill: bool = False  # warm-up of max(warmup, c) requests at c in flight (the point's batch size)

    def __post_init__(self) -> None:
        if self.input_len < 1 or self.output_len < 1:
            raise BadInput("input_len and output_len must be >= 1")
        if not self.concurrency or any(int(c) < 1 for c in self.concurrency):
            raise BadInput(
                f"concurrency must be a non-empty list of ints >= 1: {self.concurrency!r}")
        object.__setattr__(self, "concurrency", tuple(int(c) for c in self.concurrency))
        if self.num_prompts is not None and self.num_prompts < 1:
            raise BadInput("num_prompts must be >= 1")
        if self.warmup < 0:
            raise BadInput("warmup must be >= 0")
        if self.endpoint not in ENDPOINTS:
            raise BadInput(f"endpoint must be one of {sorted(ENDPOINTS)}, not {self.endpoint!r}")
        if self.prompt not in PROMPT_KINDS:
            raise BadInput(f"prompt must be one of {PROMPT_KINDS}, not {self.prompt!r}")
        if self.vocab_size < 8:
            raise BadInput("vocab_size must be >= 8")

    def requests_at(self, concurrency: int) -> int:
        if self.num_prompts is not None:
            return self.num_prompts
        return default_num_prompts(concurrency)

    def to_dict(self) -> dict:
        return {
            "input_len": self.input_len, "output_len": self.output_len,
            "concurrency": list(self.concurrency), "num_prompts": self.num_prompts,
            "warmup": self.warmup, "seed": self.seed, "endpoint": self.endpoint,
            "timeout_s": self.timeout_s, "prompt": self.prompt, "stream": self.stream,
            "model": self.model, "vocab_size": self.vocab_size, "send_rid": self.send_rid,
            "flush_cache": self.flush_cache, "warmup_fill": self.warmup_fill,
        }

    def warmup_at(self, concurrency: int) -> int:
        """Warm-up requests before a point: `warmup`, or with warmup_fill enough to fill the point."""
        return max(self.warmup, concurrency) if self.warmup_fill and self.warmup else self.warmup


def id_range(vocab_size: int) -> tuple[int, int]:
    """[lo, hi) of the random input ids: clear of the special tokens at either end."""
    margin = 1000 if vocab_size >= 3000 else vocab_size // 4
    return margin, vocab_size - margin


def model_vocab(model: str | None, default: int = DEFAULT_VOCAB) -> int:
    """The vocab the random ids are drawn from: `default`, or the local model's `vocab_size`
    (config.json) where it is smaller (a larger vocab keeps the default, so the prompts stay
    those every earlier run was measured with)."""
    import json
    from pathlib import Path

    if not model:
        return default
    try:
        vocab = int(json.loads((Path(model).expanduser() / "config.json").read_text())["vocab_size"])
    except (OSError, ValueError, KeyError, TypeError):
        return default
    return min(default, vocab) if vocab >= 8 else default


_SYL = ("ka", "lo", "mi", "ne", "ru", "ta", "vo", "shi", "den", "pra", "gul", "fen", "tor", "bix")


def _rng(seed: int, concurrency: int, index: int, tag: str) -> random.Random:
    return random.Random(f"patchbench:{seed}:{concurrency}:{tag}:{index}")


def make_prompt(kind: str, cfg: ServingConfig, concurrency: int, index: int, tag: str = "m"):
    """The deterministic prompt of request `index` at a point: a str ("text") or list of ids."""
    rng = _rng(cfg.seed, concurrency, index, tag)
    if kind == "input_ids":
        lo, hi = id_range(cfg.vocab_size)
        return [rng.randrange(lo, hi) for _ in range(cfg.input_len)]
    if kind == "text":
        return " ".join(rng.choice(_SYL) + rng.choice(_SYL) + str(rng.randrange(100))
                        for _ in range(cfg.input_len))
    raise BadInput(f"prompt kind must be 'text' or 'input_ids', not {kind!r}")


def build_payload(cfg: ServingConfig, prompt, output_len: int, model: str,
                  rid: Optional[str] = None) -> bytes:
    """The JSON body for one request (sglang's /generate or OpenAI /v1/completions)."""
    if cfg.endpoint == "generate":
        body = {
            ("text" if isinstance(prompt, str) else "input_ids"): prompt,
            "sampling_params": {"max_new_tokens": output_len, "ignore_eos": True,
                                "temperature": 0.0},
            "stream": cfg.stream,
        }
        if rid is not None:
            body["rid"] = rid
    else:
        body = {"model": model, "prompt": prompt, "max_tokens": output_len,
                "temperature": 0.0, "ignore_eos": True, "stream": cfg.stream}
        if cfg.stream:
            body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
    return json.dumps(body, separators=(",", ":")).encode()
