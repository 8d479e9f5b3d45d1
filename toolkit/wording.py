"""Small wording helpers for printed text (no I/O): counts with the right grammatical number."""

from __future__ import annotations

_IRREGULAR = {"patch": "patches", "match": "matches", "batch": "batches", "family": "families"}


def plural(n: int, word: str, many: str | None = None) -> str:
    """`1 patch`, `2 patches`, `0 runs`: the count and the noun in the right number."""
    return f"{n} {word if n == 1 else (many or _IRREGULAR.get(word) or word + 's')}"
