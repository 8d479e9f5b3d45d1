"""The gate verdict (pure): sglang's own evaluation of a candidate against thresholds and against
the reference's per-question results (toolkit.run.gate runs the evaluation in a launch).

- `min_accuracy`: the one-sided 95% Wilson lower bound of the candidate's accuracy (k correct of
  n questions) must reach it;
- paired, where both runs have per-question correctness: `worse` = questions the reference got right
  and the candidate wrong, `better` the reverse. The candidate is *worse than the reference* when
  McNemar's exact test says so (one-sided binomial on the worse + better discordant questions,
  p < alpha). The paired difference d = (better - worse) / n (candidate minus reference) has a
  one-sided 95% lower bound d_low = (m / n) * (1 - 2 * u), m = worse + better, u the Clopper-Pearson
  95% upper bound of worse / m (0 when m = 0: identical results bound d at 0 at every accuracy).
- `max_drop`: the gate fails when the candidate is worse than the reference *and* d_low < -max_drop
  (the drop may exceed the tolerance); a significant drop shown to be within max_drop passes. Without
  `max_drop`, worse than the reference fails.

Why both conditions: d_low alone (pass only when the drop is shown to be under max_drop) fails a
candidate identical in distribution to the reference whenever questions flip between launches
(200 questions, 5 each way: d_low is about -0.03), so its false-fail rate under no change would be
set by the eval's own noise, not by alpha. With McNemar in front, a candidate with no change fails at
most alpha of the time whatever the noise, and a real drop of 5 points on 200 questions (10 more
wrong) fails (power measured in benchmarks/verdict_calibration.py). Without per-question results
only `min_accuracy` applies (a point accuracy cannot be paired).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import PurePath

PASSED = "gate passed"
FAILED = "gate failed"
NOT_RUN = "gate did not run"
NOT_JUDGED = "gate not judged"  # ran, but nothing to judge it by: no reference to pair with, no min_accuracy
DEFAULT_ALPHA = 0.05
CONFIDENCE = 0.95


@dataclass(frozen=True)
class GateVerdict:
    verdict: str
    text: str
    accuracy: float | None = None
    lower_bound: float | None = None  # Wilson lower bound of the candidate's accuracy
    p_value: float | None = None  # McNemar, one-sided (the candidate worse)
    drop_bound: float | None = None  # d_low: lower bound of candidate minus reference, per question
    rule: str = ""  # the legend of the parameters this verdict was computed with

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def wilson_lower(k: int, n: int, confidence: float = CONFIDENCE) -> float:
    """One-sided Wilson score lower bound of a proportion k/n."""
    from scipy.stats import norm

    if n <= 0:
        return 0.0
    z = float(norm.ppf(confidence))
    p = k / n
    centre = p + z * z / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, (centre - spread) / (1 + z * z / n))


def paired_lower(worse: int, better: int, n: int, confidence: float = CONFIDENCE) -> float:
    """One-sided lower bound of (better - worse) / n from the discordant questions (module docstring)."""
    from scipy.stats import beta

    m = worse + better
    if m == 0 or n <= 0:
        return 0.0
    upper = 1.0 if worse == m else float(beta.ppf(confidence, worse + 1, m - worse))
    return m / n * (1 - 2 * upper)


def mcnemar_worse(worse: int, better: int) -> float:
    """One-sided exact McNemar p-value that the candidate is worse."""
    from scipy.stats import binomtest

    return float(binomtest(worse, worse + better, 0.5, alternative="greater").pvalue) if worse + better else 1.0


def judge(candidate: dict | None, reference: dict | None, *, min_accuracy: float | None = None,
          max_drop: float | None = None, alpha: float = DEFAULT_ALPHA) -> GateVerdict:
    """`candidate`/`reference`: a run's extra["quality"]["eval"] (accuracy, questions, correct)."""
    rule = legend(min_accuracy=min_accuracy, max_drop=max_drop, alpha=alpha)
    if not candidate:
        return GateVerdict(NOT_RUN, NOT_RUN, rule=rule)
    if candidate.get("status") != "ok":
        return GateVerdict(NOT_RUN, f"{NOT_RUN}: {candidate.get('reason', 'no result')}", rule=rule)
    correct = candidate.get("correct")
    n = len(correct) if correct else int(candidate.get("questions") or 0)
    acc = float(candidate["accuracy"])
    k = sum(correct) if correct else round(acc * n)
    lb = wilson_lower(k, n)
    problems = []
    if min_accuracy is not None and lb < min_accuracy:
        problems.append(f"lower bound {lb:.3f} < min_accuracy {min_accuracy:g}")
    ref_ok = reference and reference.get("status") == "ok"
    p = d_low = None
    rc = reference.get("correct") if ref_ok else None
    paired = ""
    unpaired = unpaired_reason(candidate, reference)
    if unpaired is None:
        worse = sum(1 for a, b in zip(rc, correct) if a and not b)
        better = sum(1 for a, b in zip(rc, correct) if b and not a)
        p, d_low = mcnemar_worse(worse, better), paired_lower(worse, better, n)
        paired = (f"against the reference {worse} questions worse, {better} better (McNemar p={p:.2g}; "
                  f"difference >= {d_low:+.3f} at 95%)")
        if p < alpha and (max_drop is None or d_low < -max_drop):
            problems.append(f"worse than the reference: {paired}"
                            + (f" and the drop may exceed max_drop {max_drop:g}" if max_drop is not None else ""))
            paired = ""
    else:
        paired = f"not compared with the reference: {unpaired}" + (" (max_drop not applied)" if max_drop is not None else "")
    head = f"{candidate.get('name', 'eval')} accuracy {acc:.3f} of {n} (95% lower bound {lb:.3f})"
    tail = "".join(f"; {x}" for x in (*problems, paired) if x)
    if problems:
        return GateVerdict(FAILED, f"{FAILED}: {head}{tail}", acc, lb, p, d_low, rule)
    if p is None and min_accuracy is None:  # nothing was tested: not a pass
        return GateVerdict(NOT_JUDGED, f"{NOT_JUDGED}: {head}{tail}", acc, lb, p, d_low, rule)
    return GateVerdict(PASSED, f"{PASSED}: {head}{tail}", acc, lb, p, d_low, rule)


def unpaired_reason(candidate: dict, reference: dict | None) -> str | None:
    """Why the candidate's per-question results cannot be paired with the reference's (None: they can):
    the paired test needs the same evaluation (name, harness, dataset) over the same questions."""
    if not reference:
        return "the reference has no evaluation"
    if reference.get("status") != "ok":
        return f"the reference's evaluation failed ({reference.get('reason', 'no result')})"
    correct, rc = candidate.get("correct"), reference.get("correct")
    if not correct or not rc:
        return "no per-question results on " + ("either side" if not correct and not rc else
                                               "the candidate's side" if not correct else "the reference's side")
    for key in ("name", "harness", "dataset"):  # the dataset by file name: hosts keep it in different places
        mine, theirs = candidate.get(key), reference.get(key)
        if key == "dataset" and mine and theirs:
            mine, theirs = PurePath(mine).name, PurePath(theirs).name
        if mine != theirs:
            return f"another evaluation ({key} {theirs!r} against {mine!r})"
    if len(rc) != len(correct):
        return f"{len(rc)} questions against {len(correct)}"
    return None


def legend(*, min_accuracy: float | None = None, max_drop: float | None = None, alpha: float = DEFAULT_ALPHA) -> str:
    """The gate's rule in one line, from the parameters `judge` uses."""
    parts = []
    if min_accuracy is not None:
        parts.append(f"fails when the {CONFIDENCE:.0%} Wilson lower bound of its accuracy is under {min_accuracy:g}")
    drop = (f" and the {CONFIDENCE:.0%} lower bound of the per-question difference (from the discordant questions) "
            f"is under -{max_drop:g}" if max_drop is not None else "")
    parts.append(f"fails when McNemar's exact test says it is worse than the reference (p < {alpha:g}){drop}")
    return ("gate: " + "; ".join(parts) + f" (a candidate with no change fails the paired test at most {alpha:g} "
            "of the time); the paired test needs the reference's evaluation of the same questions (name, harness, "
            "dataset): without it the gate says so, and with no min_accuracy either it is 'not judged', not passed")
