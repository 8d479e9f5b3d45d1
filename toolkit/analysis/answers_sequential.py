"""The answers verdict looked at launch by launch: a candidate's answers are asked in another launch
only while this verdict is unsettled (pure: answers in, verdicts out; which launch asks is decided by
toolkit.analysis.answers_rule).

Look k (k = 1 .. max_looks) is the exact exchangeability test of toolkit.analysis.answers_verdict on
the reference's launches against the candidate's first k launches (oldest first, one prompt set).

    answers changed   p_k < alpha / max_looks at some look (the first such look is the verdict)
    same answers      p_k >= futility at a look from min_looks on, or no look below alpha / max_looks
                      by max_looks
    answers not settled   neither yet (the launches stopped first: speed settled, say)

**Method**: a Bonferroni split of alpha over the planned looks (alpha spending with equal shares).
Each p_k is an exact p-value under no change whatever k is, so by the union bound P(some look of
1 .. max_looks gives p_k < alpha / max_looks) <= alpha: the false "answers changed" rate stays at or
below alpha however the looks stop (after 1 look or 4, on the data or on speed), as long as no more
than max_looks are looked at (later launches' answers are never judged). The futility stop ("same
answers" at p_k >= futility) can only end a look sequence without a "changed", so it cannot raise
that rate; it costs power only where a change is so small that one look shows nothing (measured:
benchmarks/verdict_calibration.py). Why not a boundary from the normal approximation (Pocock,
O'Brien-Fleming) or a calibrated constant level as the speed rule uses: the statistic is discrete and
its null law depends on how many prompts are unstable and how (not pivotal), so no level can be
calibrated once for every case; the union bound needs no model of the looks' dependence, and the
looks are strongly dependent (the first launch is in every one), so it is conservative, not loose:
1.5-2.5% measured for alpha 0.05 over 4 looks.

"same answers" is not an equivalence claim: it says no look found a change at its share of alpha;
the power table says what a look sequence finds. "broken output", "not informative", "check failed"
and "too few launches" come from the whole answers as in answers_verdict.judge (a broken launch is
broken whatever look it came at).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

from toolkit.analysis import answers_verdict as av

UNSETTLED = "answers not settled"
DEFAULT_MIN_LOOKS = 1
DEFAULT_MAX_LOOKS = 4
DEFAULT_FUTILITY = 0.2


@dataclass(frozen=True)
class Design:
    """The settings the sequential answers verdict computes with (and its legend prints)."""

    alpha: float = av.DEFAULT_ALPHA
    min_looks: int = DEFAULT_MIN_LOOKS
    max_looks: int = DEFAULT_MAX_LOOKS
    futility: float = DEFAULT_FUTILITY

    def __post_init__(self):
        if not 0.0 < self.alpha < 1.0:
            raise ValueError(f"alpha must be in (0, 1), not {self.alpha}")
        if self.min_looks < 1 or self.max_looks < self.min_looks:
            raise ValueError(f"need 1 <= min_looks <= max_looks, not {self.min_looks}, {self.max_looks}")
        if not 0.0 < self.futility <= 1.0:
            raise ValueError(f"futility must be in (0, 1], not {self.futility}")

    @property
    def look_alpha(self) -> float:
        """Each look's share of alpha (Bonferroni over the planned looks)."""
        return self.alpha / self.max_looks

    def to_dict(self) -> dict:
        return {"alpha": self.alpha, "min_looks": self.min_looks, "max_looks": self.max_looks,
                "futility": self.futility}

    @classmethod
    def from_dict(cls, d: dict) -> "Design":
        return cls(**{k: d[k] for k in ("alpha", "min_looks", "max_looks", "futility") if k in d})


def _same_key(candidate: Sequence[av.Launch]) -> list[av.Launch]:
    asked = candidate[-1].key
    return [launch for launch in candidate if launch.key == asked]


def judge(point: int, reference: Sequence[av.Launch], candidate: Sequence[av.Launch],
          design: Design = Design()) -> av.QualityVerdict:
    """The sequential verdict at one point from the candidate's launches so far (oldest first)."""
    whole = av.judge(point, reference, candidate, alpha=design.look_alpha)
    own = {launch.run_id for launch in reference}
    looks = [launch for launch in _same_key(candidate) if launch.run_id not in own] if candidate else []
    if whole.verdict not in (av.SAME, av.CHANGED) or not looks:  # broken, not informative, failed, too few, a floor
        return replace(whole, looks=min(len(looks), design.max_looks), rule=legend(design))
    last = whole
    for k in range(1, min(len(looks), design.max_looks) + 1):
        v = av.judge(point, reference, looks[:k], alpha=design.look_alpha)
        last = v
        why = None
        if v.verdict == av.CHANGED:
            why = f"p={v.p_value:.2g} < {design.look_alpha:.3g}"
        elif k >= design.min_looks and v.p_value >= design.futility:
            why = f"p={v.p_value:.2g} >= {design.futility:g}"
        elif k == design.max_looks:
            why = f"no look below {design.look_alpha:.3g}"
        if why:
            return replace(v, text=f"{v.verdict} at look {k} of at most {design.max_looks} ({why}; {_figures(v)})",
                           looks=k, settled=True, rule=legend(design))
    k = min(len(looks), design.max_looks)
    return replace(last, verdict=UNSETTLED, looks=k, settled=False, rule=legend(design),
                   text=f"{UNSETTLED} after {k} look{'s' if k != 1 else ''} of at most {design.max_looks} "
                        f"(p={last.p_value:.2g}: changed needs < {design.look_alpha:.3g}, same >= {design.futility:g}; "
                        f"{_figures(last)})")


def _figures(v: av.QualityVerdict) -> str:
    return (f"{v.departs} of {v.n} prompts departed, reference varied on {v.varies}; {v.differing} launch pairs "
            f"differ where no change gives {v.expected:.1f}")


def more_needed(v: av.QualityVerdict, design: Design = Design()) -> bool:
    """Whether another launch of the candidate should ask its answers at this point: under min_looks,
    or unsettled below max_looks (a reference with too few launches: up to min_looks only, the
    verdict waits for the reference's own launches, not the candidate's)."""
    if v.verdict == av.TOO_FEW:
        return v.looks < design.min_looks
    return not v.settled and v.looks < design.max_looks


def legend(design: Design = Design()) -> str:
    """The sequential answers verdict's rule in one line, from the parameters it computes with."""
    return (f"answers, looked at launch by launch: the exact exchangeability test (as the fixed verdict) on the "
            f"reference against the candidate's first k launches, k = 1 .. {design.max_looks}; 'answers changed' at "
            f"the first look with p < {design.look_alpha:.3g} (alpha {design.alpha:g} split over {design.max_looks} "
            f"looks: a false 'changed' <= {design.alpha:g} however the looks stop); 'same answers' at a look from "
            f"{design.min_looks} on with p >= {design.futility:g}, or after {design.max_looks} looks; else "
            f"'{UNSETTLED}'; the candidate's answers are asked in another launch only while not settled")
