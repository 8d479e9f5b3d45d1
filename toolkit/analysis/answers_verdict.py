"""The answers verdict: did a candidate's answers change beyond the launches' own run-to-run
variation? (pure: answers in, verdicts out; the store is read by toolkit.analysis.quality_runs).

The test. Under no change, every launch of one configuration is a draw from the same process, so at
each prompt the reference's R launches and the candidate's C launches are **exchangeable**: any C of
the R + C answers are as likely to be the candidate's as the ones that are. The statistic is the
number of (candidate launch, reference launch) pairs whose answers differ, summed over prompts; its
null distribution is exact: at each prompt, every way of choosing which C of its R + C answers are the
candidate's is equally likely (a stratified permutation test over launch labels, enumerated per
prompt and convolved over prompts, not sampled). "answers changed" when P(T >= observed) < alpha.

Why this test: it holds alpha for any number of candidate launches (1, 2, 4: attribute and bisect ask
in every launch) and any share of unstable prompts, because it only uses the symmetry that no change
implies; prompts on which every launch agrees carry no weight, and a prompt where the reference
varies counts against a change only as much as chance says. With C = 1, R = 2 it is a sharper
form of McNemar's pairing of (candidate vs launch 1) with (launch 2 vs launch 1): it also uses the
case where launch 1 is the odd one out. Measured (benchmarks/verdict_calibration.py): false alarms
at or below alpha for 1, 2, 4 candidate launches and 10-30 of 64 unstable prompts; power above 0.8
for 12 changed stable prompts of 64 with 30 unstable. It assumes prompts answer independently given
the configuration (as McNemar over prompts does).

Figures beside it: the candidate *departs* on p when one of its launches gave an answer none of the
reference's launches gave; p *varies* when the reference's own launches did not all agree (sglang is
not batch-invariant unless asked, so this floor is not always 0).

Only launches that were asked the same (the candidate's newest prompt set and max_tokens) compare;
the reference's others are named, never counted. "broken output" (some candidate answer degenerate,
toolkit.run.answers) comes first, whatever the test; "not informative" when the answers do not depend
on the computation (the miniature without its torch step), never "same answers"; "too few launches"
when the reference has fewer than two. `floor` is a configuration's own variation when it has only
two launches: judging them against themselves would be true by construction, so it says a self-check
needs a third.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from math import comb
from typing import Sequence

import numpy as np

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
    text: str  # the verdict with its figures, e.g. "answers changed (12 of 64 prompts departed, ...)"
    n: int = 0  # prompts
    departs: int = 0  # prompts where a candidate answer is none of the reference's
    varies: int = 0  # prompts on which the reference's launches differ (the floor)
    differing: int = 0  # the statistic: (candidate, reference) launch pairs whose answers differ
    expected: float = 0.0  # its mean under exchangeability
    p_value: float = 1.0
    agreement: float = float("nan")  # candidate's newest launch vs the reference's newest
    divergent: tuple[int, ...] = ()  # prompt indices where the candidate departs, in order
    looks: int = 0  # candidate launches judged (the sequential verdict, toolkit.analysis.answers_sequential)
    settled: bool = True  # False: the sequential verdict would look at another launch
    rule: str = ""  # the legend of the sequential verdict's parameters ("": the fixed verdict's, legend())

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d["divergent"] = list(self.divergent)
        return d


@lru_cache(maxsize=4096)
def _null(counts: tuple[int, ...], c: int) -> tuple[float, ...]:
    """P(differing pairs = t), t = 0..c*r, at one prompt whose R + C answers fall in classes of these
    sizes, when each choice of which c answers are the candidate's is equally likely."""
    r = sum(counts) - c
    dist = [0.0] * (c * r + 1)

    def walk(k: int, left: int, weight: int, same: int) -> None:
        if k == len(counts):
            if left == 0:
                dist[c * r - same] += weight
            return
        for ck in range(min(left, counts[k]) + 1):
            walk(k + 1, left - ck, weight * comb(counts[k], ck), same + ck * (counts[k] - ck))

    walk(0, c, 1, 0)
    total = comb(sum(counts), c)
    return tuple(w / total for w in dist)


def exchangeability_test(reference: Sequence[Sequence], candidate: Sequence[Sequence]) -> tuple[int, float, float]:
    """(differing pairs observed, their mean under no change, one-sided exact p) for per-prompt
    answers `reference[launch][prompt]`, `candidate[launch][prompt]` (see the module docstring)."""
    c, r = len(candidate), len(reference)
    observed, mean, dist = 0, 0.0, np.ones(1)
    for p in range(len(candidate[0])):
        ref: dict[tuple, int] = {}
        for launch in reference:
            ref[tuple(launch[p])] = ref.get(tuple(launch[p]), 0) + 1
        cand: dict[tuple, int] = {}
        for launch in candidate:
            cand[tuple(launch[p])] = cand.get(tuple(launch[p]), 0) + 1
        if len(ref) == 1 and cand.keys() == ref.keys():
            continue  # every launch agrees: no arrangement differs, no weight
        classes = {a: ref.get(a, 0) + cand.get(a, 0) for a in ref.keys() | cand.keys()}
        observed += c * r - sum(k * ref.get(a, 0) for a, k in cand.items())
        null = _null(tuple(sorted(classes.values())), c)
        mean += sum(t * w for t, w in enumerate(null))
        dist = np.convolve(dist, null)
    p_value = float(min(1.0, dist[observed:].sum())) if observed else 1.0
    return observed, mean, p_value


def _departs(answers: Sequence, refs: set) -> bool:
    return any(tuple(a) not in refs for a in answers)


def _precheck(point: int, launches: Sequence[Launch], judged: Sequence[Launch]) -> QualityVerdict | None:
    """broken output (in `judged`) or not informative (in any), else None."""
    n = len(judged[-1].ids)
    bad = Counter(f for launch in judged for f in launch.degenerate if f)
    if bad:
        worst = max(sum(1 for f in launch.degenerate if f) for launch in judged)
        reasons = ", ".join(f"{k}" for k, _ in bad.most_common())
        return QualityVerdict(point, BROKEN, f"{BROKEN} ({worst} of {n} answers degenerate: {reasons})", n=n)
    uninformative = next((launch for launch in launches if not launch.informative), None)
    if uninformative is not None:
        return QualityVerdict(point, NOT_INFORMATIVE, f"{NOT_INFORMATIVE}: {uninformative.why}", n=n)
    if any(len(launch.ids) != n for launch in launches):
        return QualityVerdict(point, FAILED, "the launches answered different prompt sets", n=n)
    return None


def judge(point: int, reference: Sequence[Launch], candidate: Sequence[Launch], *,
          alpha: float = DEFAULT_ALPHA) -> QualityVerdict:
    """The verdict at one point (see the module docstring); `reference` and `candidate` are
    different launches (a configuration against itself: `floor`, or split its launches)."""
    if not candidate:
        return QualityVerdict(point, FAILED, "no answers stored for the candidate")
    asked = candidate[-1].key  # answers to other prompts or another max_tokens never compare
    candidate = [launch for launch in candidate if launch.key == asked]
    other = sum(launch.key != asked for launch in reference)
    reference = [launch for launch in reference if launch.key == asked]
    own = {launch.run_id for launch in reference}
    if own and all(launch.run_id in own for launch in candidate):  # a launch against itself proves nothing
        return floor(point, reference)
    candidate = [launch for launch in candidate if launch.run_id not in own]
    n = len(candidate[-1].ids)
    early = _precheck(point, [*reference, *candidate], candidate)
    if early is not None and early.verdict != FAILED:
        return early
    if len(reference) < 2:
        return QualityVerdict(point, TOO_FEW, f"{TOO_FEW}: the reference's own variation needs 2 launches "
                              f"with answers, it has {len(reference)}"
                              + (f" ({other} more answered other prompts or another max_tokens: run it with "
                                 "the candidate's [quality])" if other else ""), n=n)
    if early is not None:
        return early
    varies = departs = 0
    divergent = []
    for p in range(n):
        refs = {tuple(launch.ids[p]) for launch in reference}
        varies += len(refs) > 1
        if _departs([launch.ids[p] for launch in candidate], refs):
            divergent.append(p)
            departs += 1
    observed, mean, pval = exchangeability_test([x.ids for x in reference], [x.ids for x in candidate])
    agree = sum(candidate[-1].ids[p] == reference[-1].ids[p] for p in range(n)) / n if n else float("nan")
    verdict = CHANGED if pval < alpha else SAME
    text = (f"{verdict} ({departs} of {n} prompts departed, reference varied on {varies}; {observed} "
            f"launch pairs differ where no change gives {mean:.1f}; p={pval:.2g})")
    return QualityVerdict(point, verdict, text, n, departs, varies, observed, mean, pval, agree, tuple(divergent))


def floor(point: int, launches: Sequence[Launch]) -> QualityVerdict:
    """A configuration against itself. With two launches: on how many prompts they differ (the floor
    a candidate is judged against), not a self-check (each launch against both would agree by
    construction): that needs a third launch, and the verdict says so. With three or more: the
    newest against the others."""
    launches = [x for x in launches if x.key == launches[-1].key]
    if len(launches) > 2:  # enough for a self-check: the newest against the others
        return judge(point, launches[:-1], launches[-1:])
    early = _precheck(point, launches, launches)
    if early is not None:
        return early
    n = len(launches[-1].ids)
    if len(launches) < 2:
        return QualityVerdict(point, TOO_FEW, f"{TOO_FEW}: its own variation needs 2 launches with answers, "
                              f"it has {len(launches)}", n=n)
    varies = sum(len({tuple(x.ids[p]) for x in launches}) > 1 for p in range(n))
    return QualityVerdict(point, TOO_FEW, f"{TOO_FEW} for a self-check (it needs a third): its own "
                          f"{len(launches)} launches differ on {varies} of {n} prompts (the floor a candidate "
                          "is judged against)", n=n, varies=varies)


def combined(speed: str, quality: QualityVerdict | None) -> str:
    """The speed verdict with the quality verdict beside it: a gain with changed or broken answers
    never reads as a plain win ("faster, answers changed")."""
    if quality is None:
        return speed
    return f"{speed}, {quality.verdict}"


def is_plain_win(speed: str, quality: QualityVerdict | None) -> bool:
    return speed == "faster" and (quality is None or quality.verdict == SAME)


def legend(alpha: float = DEFAULT_ALPHA) -> str:
    """The answers verdict's rule in one line (printed under tables beside the speed legend)."""
    from toolkit.run.answers import SHARED_MIN_TOKENS

    return (f"answers: exact exchangeability test over launches (under no change any of a prompt's answers is as "
            f"likely the candidate's; p < {alpha:g} on the count of candidate/reference launch pairs that differ, "
            "prompts summed): 'answers changed' when the candidate differs from the reference more than its own "
            "launches differ from each other, else 'same answers'; 'broken output' when any answer is degenerate "
            f"(empty, one token repeated, another prompt's answer of {SHARED_MIN_TOKENS}+ tokens, non-finite "
            "logprobs): such a run is stored invalid whatever its speed; 'not informative' when the text does not "
            "depend on the computation")
