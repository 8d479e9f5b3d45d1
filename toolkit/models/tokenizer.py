"""A byte-level BPE tokenizer trained here, from patchbench's own shipped prompts: nothing downloaded.

Byte-level, so every string encodes; the special tokens come first (ids 0, 1, 2)."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

SPECIAL = ("<|pad|>", "<|bos|>", "<|eos|>")
PAD_ID, BOS_ID, EOS_ID = 0, 1, 2
CHAT_TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}assistant: {% endif %}")


def corpus() -> list[str]:
    """The training text: the shipped prompt sets, in file order."""
    texts = []
    root = resources.files("toolkit.data") / "prompts"
    for entry in sorted(root.iterdir(), key=lambda p: p.name):
        if entry.name.endswith(".jsonl"):
            for line in entry.read_text().splitlines():
                if line.strip():
                    texts.append(json.loads(line)["prompt"])
    return texts


def train(out_dir: Path, vocab_size: int) -> None:
    """Write tokenizer.json, tokenizer_config.json and special_tokens_map.json into out_dir."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(corpus(), trainer=trainer)
    tok.save(str(out_dir / "tokenizer.json"))
    pad, bos, eos = SPECIAL
    (out_dir / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": bos, "eos_token": eos,
        "pad_token": pad, "model_max_length": 4096, "add_bos_token": False,
        "chat_template": CHAT_TEMPLATE}, indent=1, sort_keys=True) + "\n")
    (out_dir / "special_tokens_map.json").write_text(json.dumps(
        {"bos_token": bos, "eos_token": eos, "pad_token": pad}, indent=1, sort_keys=True) + "\n")
