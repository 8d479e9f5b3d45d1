"""Pure comparisons of generated answers (token id lists), shared by the output check
(toolkit.run.quality) and the answers verdict (toolkit.analysis.answers_verdict).

Degenerate output (`degenerate`): empty; one token repeated to the end (the last max(4, n/2)
tokens of an output of 4 or more are one token); the same tokens as the answer to a different prompt
when that answer has at least SHARED_MIN_TOKENS tokens; a non-finite log-probability where they were
asked for.

The rule for another prompt's answer: a real model gives two prompts the same short answer ("4.",
"Paris", "Yes, it is.") as a matter of course, so sharing is evidence of broken output only when the
shared answer is long enough to be implausible as coincidence: 16 tokens (the check's default
max_tokens: two prompts that both run to the limit with one identical text are ignoring their input).
"""

from __future__ import annotations

import math
import statistics
from typing import Sequence

Answer = Sequence[int]
SHARED_MIN_TOKENS = 16  # an answer shared by two prompts is degenerate from this length on


def repeats_to_end(ids: Answer) -> bool:
    n = len(ids)
    if n < 4:
        return False
    tail = ids[n - max(4, n // 2):]
    return len(set(tail)) == 1


def degenerate(answers: Sequence[Answer], logprobs: Sequence[Sequence[float] | None] | None = None) -> list[str | None]:
    """Per answer, why it is degenerate ("empty", "one token repeated", "same as another prompt's"
    (SHARED_MIN_TOKENS or more tokens),
    "non-finite logprobs"), or None when it is not."""
    counts: dict[tuple, int] = {}
    for ids in answers:
        if len(ids) >= SHARED_MIN_TOKENS:
            counts[tuple(ids)] = counts.get(tuple(ids), 0) + 1
    out: list[str | None] = []
    for i, ids in enumerate(answers):
        lps = logprobs[i] if logprobs else None
        if not ids:
            out.append("empty")
        elif repeats_to_end(ids):
            out.append("one token repeated")
        elif counts.get(tuple(ids), 0) > 1:
            out.append("same as another prompt's")
        elif lps is not None and not all(isinstance(x, (int, float)) and math.isfinite(x) for x in lps):
            out.append("non-finite logprobs")
        else:
            out.append(None)
    return out


def sanity(answers: Sequence[Answer], logprobs=None) -> float:
    """Share of answers that are not degenerate."""
    flags = degenerate(answers, logprobs)
    return sum(f is None for f in flags) / len(flags) if flags else 0.0


def first_difference(a: Answer, b: Answer) -> int | None:
    """Index of the first token where `a` and `b` differ (a length difference counts), None if equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def agreement(a: Sequence[Answer], b: Sequence[Answer]) -> float:
    """Share of prompts whose answers are equal token for token."""
    return sum(list(x) == list(y) for x, y in zip(a, b)) / len(a) if a else 0.0


def median_first_divergence(a: Sequence[Answer], b: Sequence[Answer]) -> float:
    """Median over prompts of the first differing token index (an equal pair counts as its length)."""
    idx = [first_difference(x, y) for x, y in zip(a, b)]
    return float(statistics.median([len(x) if i is None else i for i, x in zip(idx, a)])) if a else 0.0
