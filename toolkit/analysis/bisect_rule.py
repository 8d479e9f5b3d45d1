"""The rule a bisect step decides with: the sequential design its probes' runs record, and the legend that
states it with its error rate, both from the same parameters (`toolkit.analysis.bisect` applies it)."""

from __future__ import annotations


def step_design(*, threshold_pct: float, initial_repeats: int = 2, max_repeats: int = 8, alpha: float = 0.05):
    """The sequential design a step of a sequential bisect computes with (`sequential=True`): the
    anytime-valid mixture confidence sequence at `alpha` (its interval depends on nothing else), one value
    a side a look from `initial_repeats` up to `max_repeats`, the threshold as its indifference zone
    (capped below 1, as a Design's must be). The probes' runs record it (`extra["sequential"]`), as `run`'s
    launches record theirs, so compare and the report judge a pair of probes by the rule that launched them."""
    from toolkit.analysis import sequential as seq

    lo = max(2, int(initial_repeats))
    return seq.Design(alpha=alpha, method=seq.MIXTURE, min_effect=max(0.0, min(threshold_pct / 100.0, 0.99)),
                      min_repeats=lo, max_repeats=max(lo, int(max_repeats)))


def legend(*, threshold_pct: float, direction: str = "worse", reference: str = "neighbour", sequential: bool = True,
           alpha: float = 0.05, max_repeats: int = 8) -> str:
    """The rule `bisect_stack` decides with, and its error rate, in one line (the values given to it)."""
    c = f"{100 * (1 - alpha):g}%"
    against = "the nearest item before it found good" if reference == "neighbour" else "the base"
    if direction != "worse" and reference == "neighbour":
        against = "the nearest item before it found 'before the gain'"
    bad, good = ("bad", "good") if direction == "worse" else ("'with the gain'", "'before the gain'")
    culprit = "a culprit" if direction == "worse" else "the gain"
    if sequential:
        how = (f"the anytime-valid {c} confidence sequence (two-sample t mixture) of the ratio of geometric means, "
               f"one more value a side a look, the two launched together (r p p r, then alternating)")
        rate = (f"a step decided (not 'uncertain') calls an item that does not move the metric {bad} with "
                f"probability <= {alpha / 2:g} however many looks it took")
        conviction = "the same sequence, topped up one value a side, excludes 1"
    else:
        how = (f"the {c} t interval (delta method, Welch) of the ratio of means, re-read after each top-up, the two "
               f"launched together (r p p r, then alternating)")
        rate = (f"a step decided (not 'uncertain') calls an item that does not move the metric {bad} with "
                f"probability <= {alpha / 2:g} at its first look only (the re-looks after top-ups are not covered)")
        conviction = f"the fixed-sample comparison at {c} is significant"
    return (f"bisect step: each probe against {against} by {how}; {bad} when it lies wholly beyond "
            f"{threshold_pct:g}% {direction}, {good} when wholly short of it, else more values up to {max_repeats} "
            f"each (then the side of the closer measured neighbour or the point estimate: 'uncertain'); {rate}; "
            f"{culprit} is confirmed when, between it and the item before it, {conviction}")
