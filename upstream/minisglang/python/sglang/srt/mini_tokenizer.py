"""The miniature's deterministic fake tokenizer and "model output".

Tokenization: one token per whitespace-separated word of the text (`str.split()`), so a prompt of
n words is exactly n prompt tokens. `input_ids` (a list of ints) count one token per id.

Generation: token i of a request is the word `VOCAB[(seed + 7919 * i) % len(VOCAB)]`, where `seed`
is the CRC-32 of the prompt (its text, or its ids), and its text piece is " " + word. So the text of
n generated tokens always holds exactly n words, and the same prompt always yields the same text.

With the torch step on (`--mini-torch-step`), token i is instead what the step computed (the greedy
lm_head index, `computed_id` / `computed_piece`): the text then depends on the computation.

End of sequence: without `ignore_eos`, a request stops after `eos_position(seed)` tokens
(1 + seed % 97) when that comes before `max_new_tokens` (finish_reason "stop"). With `ignore_eos`
it always generates exactly `max_new_tokens`.
"""

from __future__ import annotations

import zlib
from typing import Sequence, Union

_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "ch", "sh")
_VOWELS = ("a", "e", "i", "o", "u", "ai", "ou", "ea")
_CODAS = ("", "n", "r", "s")
VOCAB: tuple = tuple(o + v + c for o in _ONSETS for v in _VOWELS for c in _CODAS)  # 512 words
VOCAB_SIZE = 32000
EOS_TOKEN_ID = 2


def encode(text: str) -> list:
    """Token ids of `text`: one per whitespace-separated word."""
    return [zlib.crc32(w.encode()) % VOCAB_SIZE for w in text.split()]


def count_tokens(prompt: Union[str, Sequence[int]]) -> int:
    if isinstance(prompt, str):
        return len(prompt.split())
    return len(prompt)


def prompt_seed(prompt: Union[str, Sequence[int]]) -> int:
    if isinstance(prompt, str):
        return zlib.crc32(prompt.encode())
    return zlib.crc32(",".join(str(int(t)) for t in prompt).encode())


def token_word(seed: int, i: int) -> str:
    return VOCAB[(seed + 7919 * i) % len(VOCAB)]


def token_id(seed: int, i: int) -> int:
    """The id of generated token i: a hash of (seed, i), so different prompts' answers differ in ids
    even where their words coincide (the words repeat every 512 seeds)."""
    return 3 + zlib.crc32(f"{seed},{i}".encode()) % (VOCAB_SIZE - 3)


def token_piece(seed: int, i: int) -> str:
    """The detokenized text of generated token i."""
    return " " + token_word(seed, i)


def computed_id(index: int) -> int:
    """The token id of lm_head index `index` (the torch step's greedy choice)."""
    return 3 + index


def computed_piece(index: int) -> str:
    """The text of lm_head index `index`: a vocabulary word (several indices share a word)."""
    return " " + VOCAB[index % len(VOCAB)]


def eos_position(seed: int) -> int:
    """Number of tokens after which the "model" emits EOS (when ignore_eos is false)."""
    return 1 + seed % 97
