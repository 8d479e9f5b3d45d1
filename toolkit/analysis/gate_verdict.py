"""The gate tier's verdict (pure): sglang's own evaluation of a candidate against thresholds and
against the reference's per-question results.

- `min_accuracy`: the one-sided 95% Wilson lower bound of the candidate's accuracy (k correct of
  n questions) must reach it;
- `max_drop`: that lower bound must reach the reference's accuracy minus `max_drop`;
- where both runs have per-question correctness, McNemar's exact test (one-sided binomial on the
  questions one got right and the other wrong): "worse than the reference" when p < alpha.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

PASSED = "gate passed"
FAILED = "gate failed"
NOT_RUN = "gate did not run"


@dataclass(frozen=True)
class GateVerdict:
    verdict: str
    text: str
    accuracy: float | None = None
    lower_bound: float | None = None
    p_value: float | None = None

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def wilson_lower(k: int, n: int, confidence: float = 0.95) -> float:
    """One-sided Wilson score lower bound of a proportion k/n."""
    from scipy.stats import norm

    if n <= 0:
        return 0.0
    z = float(norm.ppf(confidence))
    p = k / n
    centre = p + z * z / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, (centre - spread) / (1 + z * z / n))


def judge(candidate: dict | None, reference: dict | None, *, min_accuracy: float | None = None,
          max_drop: float | None = None, alpha: float = 0.05) -> GateVerdict:
    """`candidate`/`reference`: a run's extra["quality"]["eval"] (accuracy, questions, correct)."""
    from scipy.stats import binomtest

    if not candidate:
        return GateVerdict(NOT_RUN, NOT_RUN)
    if candidate.get("status") != "ok":
        return GateVerdict(NOT_RUN, f"{NOT_RUN}: {candidate.get('reason', 'no result')}")
    correct = candidate.get("correct")
    n = len(correct) if correct else int(candidate.get("questions") or 0)
    acc = float(candidate["accuracy"])
    k = sum(correct) if correct else round(acc * n)
    lb = wilson_lower(k, n)
    problems = []
    if min_accuracy is not None and lb < min_accuracy:
        problems.append(f"lower bound {lb:.3f} < min_accuracy {min_accuracy:g}")
    ref_ok = reference and reference.get("status") == "ok"
    if max_drop is not None and ref_ok and lb < float(reference["accuracy"]) - max_drop:
        problems.append(f"lower bound {lb:.3f} < reference {float(reference['accuracy']):.3f} - max_drop {max_drop:g}")
    p = None
    rc = reference.get("correct") if ref_ok else None
    if correct and rc and len(rc) == len(correct):
        worse = sum(1 for a, b in zip(rc, correct) if a and not b)
        better = sum(1 for a, b in zip(rc, correct) if b and not a)
        p = binomtest(worse, worse + better, 0.5, alternative="greater").pvalue if worse + better else 1.0
        if p < alpha:
            problems.append(f"worse than the reference on {worse} vs {better} questions (McNemar p={p:.2g})")
    head = f"{candidate.get('name', 'eval')} accuracy {acc:.3f} of {n} (95% lower bound {lb:.3f})"
    if problems:
        return GateVerdict(FAILED, f"{FAILED}: {head}; " + "; ".join(problems), acc, lb, p)
    return GateVerdict(PASSED, f"{PASSED}: {head}" + (f"; McNemar p={p:.2g}" if p is not None else ""), acc, lb, p)
