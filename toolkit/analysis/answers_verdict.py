"""The quality verdict: did a candidate's answers change beyond the reference's own run-to-run
variation? (pure: answers in, verdicts out; the store is read by toolkit.analysis.quality_runs).

Per quality point, over the n prompts of the output check (toolkit.run.quality):

- the **floor**: prompt p *varies* when the reference's own launches (at least two) did not all give
  the same answer to it (sglang is not batch-invariant unless asked, so this is not always 0);
- the candidate *departs* on p when one of its launches gave an answer none of the reference's
  launches gave;
- **paired exact test** over prompts (McNemar's, exact: a one-sided binomial test with p = 1/2 on
  the discordant prompts, `scipy.stats.binomtest`): b = prompts where the candidate departs and the
  reference does not vary, c = the reverse. "answers changed (b of n prompts beyond the reference's
  own variation)" when P(X >= b | b + c, 1/2) < alpha, else "same answers".

Only launches that were asked the same (the candidate's newest prompt set and max_tokens) compare;
the reference's others are named, never counted as departures.

"broken output" (some candidate answer degenerate, toolkit.run.answers) comes first, whatever the
test; "not informative" when the answers do not depend on the computation (the miniature without its
torch step), never "same answers"; "too few launches" when the reference has fewer than two.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Sequence

from toolkit.run.answers import Answer

SAME = "same answers"
CHANGED = "answers changed"
BROKEN = "broken output"
NOT_INFORMATIVE = "not informative"
TOO_FEW = "too few launches"
FAILED = "check failed"
DEFAULT_ALPHA = 0.05


@dataclass(frozen=True)
class Launch:
    """One launch's answers at one point: per prompt, token ids (and why it is degenerate, or None)."""

    run_id: str
    ids: tuple[tuple[int, ...], ...]
    degenerate: tuple[str | None, ...] = ()
    informative: bool = True
    why: str | None = None
    key: tuple = ()  # what was asked (prompt set digest, max_tokens): only launches of one key compare


@dataclass(frozen=True)
class QualityVerdict:
    point: int
    verdict: str
    text: str  # the verdict with its figures, e.g. "answers changed (12 of 64 prompts beyond ...)"
    n: int = 0  # prompts
    departs: int = 0  # b: the candidate departs, the reference does not vary
    varies: int = 0  # prompts on which the reference's launches differ (the floor)
    reverse: int = 0  # c: the reference varies, the candidate does not depart
    p_value: float = 1.0
    agreement: float = float("nan")  # candidate's newest launch vs the reference's newest
    divergent: tuple[int, ...] = ()  # prompt indices where the candidate departs, in order

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d["divergent"] = list(self.divergent)
        return d


def _departs(answers: Sequence[Answer], refs: set) -> bool:
    return any(tuple(a) not in refs for a in answers)


def judge(point: int, reference: Sequence[Launch], candidate: Sequence[Launch], *,
          alpha: float = DEFAULT_ALPHA) -> QualityVerdict:
    """The verdict at one point (see the module docstring)."""
    from scipy.stats import binomtest

    if not candidate:
        return QualityVerdict(point, FAILED, "no answers stored for the candidate")
    asked = candidate[-1].key  # answers to other prompts or another max_tokens never compare
    candidate = [launch for launch in candidate if launch.key == asked]
    other = sum(launch.key != asked for launch in reference)
    reference = [launch for launch in reference if launch.key == asked]
    bad = Counter(f for launch in candidate for f in launch.degenerate if f)
    n = len(candidate[-1].ids)
    if bad:
        worst = max(sum(1 for f in launch.degenerate if f) for launch in candidate)
        reasons = ", ".join(f"{k}" for k, _ in bad.most_common())
        return QualityVerdict(point, BROKEN, f"{BROKEN} ({worst} of {n} answers degenerate: {reasons})", n=n)
    uninformative = next((launch for launch in (*reference, *candidate) if not launch.informative), None)
    if uninformative is not None:
        return QualityVerdict(point, NOT_INFORMATIVE, f"{NOT_INFORMATIVE}: {uninformative.why}", n=n)
    if len(reference) < 2:
        return QualityVerdict(point, TOO_FEW, f"{TOO_FEW}: the reference's own variation needs 2 launches "
                              f"with answers, it has {len(reference)}"
                              + (f" ({other} more answered other prompts or another max_tokens: run it with "
                                 "the candidate's [quality])" if other else ""), n=n)
    if any(len(launch.ids) != n for launch in (*reference, *candidate)):
        return QualityVerdict(point, FAILED, "the launches answered different prompt sets", n=n)
    varies = departs = reverse = 0
    divergent = []
    for p in range(n):
        refs = {tuple(launch.ids[p]) for launch in reference}
        v = len(refs) > 1
        d = _departs([launch.ids[p] for launch in candidate], refs)
        varies += v
        if d:
            divergent.append(p)
        departs += d and not v
        reverse += v and not d
    pval = binomtest(departs, departs + reverse, 0.5, alternative="greater").pvalue if departs + reverse else 1.0
    agree = sum(candidate[-1].ids[p] == reference[-1].ids[p] for p in range(n)) / n if n else float("nan")
    if pval < alpha:
        return QualityVerdict(point, CHANGED, f"{CHANGED} ({departs} of {n} prompts beyond the reference's own "
                              f"variation of {varies}; p={pval:.2g})", n, departs, varies, reverse, pval, agree,
                              tuple(divergent))
    return QualityVerdict(point, SAME, f"{SAME} ({departs} of {n} prompts departed, reference varied on {varies}; "
                          f"p={pval:.2g})", n, departs, varies, reverse, pval, agree, tuple(divergent))


def combined(speed: str, quality: QualityVerdict | None) -> str:
    """The speed verdict with the quality verdict beside it: a gain with changed or broken answers
    never reads as a plain win ("faster, answers changed")."""
    if quality is None:
        return speed
    return f"{speed}, {quality.verdict}"


def is_plain_win(speed: str, quality: QualityVerdict | None) -> bool:
    return speed == "faster" and (quality is None or quality.verdict == SAME)


def legend(alpha: float = DEFAULT_ALPHA) -> str:
    """The quality verdict's rule in one line (printed under tables beside the speed legend)."""
    return (f"answers: exact McNemar test over prompts (one-sided binomial on the discordant prompts, p < {alpha:g}): "
            "'answers changed' when the candidate departs from every reference answer on more prompts than the "
            "reference's own launches differ on, else 'same answers'; 'broken output' when any answer is "
            "degenerate (empty, one token repeated, another prompt's answer, non-finite logprobs): such a run is "
            "stored invalid whatever its speed; 'not informative' when the text does not depend on the computation")
