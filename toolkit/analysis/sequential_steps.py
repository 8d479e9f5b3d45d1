"""attribute's and sweep's steps measured until settled: the sequential rule of `run` over variants.

`settle_pairs(measure, labels, pairs, design, higher_is_better)` gets `min_repeats` values of every
label (`measure(label, k)`: k more values, or None / [] when it cannot give them), then after each
round judges every pair (A, B) by `toolkit.analysis.sequential.verdict` and asks one more value of
each side of an unsettled pair (the side that is not ahead: the verdicts look at equal-sized
prefixes), until every pair is settled, futile or at `max_repeats`, or a side cannot give more.
A label shared by two pairs (attribute's prefix k is B of step k and A of step k + 1) is launched
once per round. Values come oldest first from `measure` (stored runs before new ones: a killed
attribute resumes from the store and decides as it did). `stored` (label -> how many of its first
values were stored before the loop launched anything, or a callable giving it once the label has
been measured; those are asked for at once, they cost no launch): a look pools the spread of the
stored values it does not use, for a pair with one side stored (`seq.verdict(stored=...)`,
toolkit.analysis.noise_prior.fresh_pair). `together` ((A, B) -> a keep-mask over each side's values:
which were launched in a campaign of both sides, toolkit.analysis.campaigns): a pair's looks read only
those; the others (a side's stored values from another campaign) are not judged against values launched
since, lend their spread as a prior where the design pools, and the side launches again until the pair
has its values together. `wanted` is the scheduling rule, shared with `run`'s
rounds (toolkit.analysis.sequential_runs). Effects: only through `measure`.
"""

from __future__ import annotations

from typing import Callable, Sequence

from toolkit.analysis import sequential as seq

Measure = Callable[[str, int], "list[float] | None"]


def settle_pairs(measure: Measure, labels: Sequence[str], pairs: Sequence[tuple[str, str]], design: seq.Design,
                 higher_is_better: bool | None, stored=None,
                 together=None) -> tuple[dict[str, list[float] | None], dict[tuple[str, str], seq.Sequential]]:
    """(values per label (None: it gave none), the verdict of every pair whose sides both have values)."""
    values: dict[str, list[float] | None] = {}
    for label in labels:
        got = measure(label, design.min_repeats)
        values[label] = list(got) if got else None
    counts = {label: min(int((stored(label) if callable(stored) else stored.get(label, 0)) or 0) if stored else 0,
                         design.max_repeats + seq.STORED_CAP) for label in labels}
    for label in labels:  # the stored values are free: hand them out now, so a look can pool those it does not use
        if values[label] and counts[label] > len(values[label]):
            got = measure(label, counts[label] - len(values[label]))
            values[label].extend(got or [])
        counts[label] = min(counts[label], len(values[label] or []))
    dry: set[str] = set()  # labels that could not give another value
    while True:
        verdicts = judge(values, pairs, design, higher_is_better, counts, together)
        want: set[str] = set()
        for (a, b), v in verdicts.items():
            if seq.more_needed(v):
                ka, kb = (kept for kept, _ in sides(values, a, b, together))
                want |= wanted([(a, b)], {a: len(ka), b: len(kb)}, dry)
        todo = [x for x in labels if x in want]
        if not todo:
            return values, verdicts
        for label in todo:
            got = measure(label, 1)
            if got:
                values[label].extend(got)
            else:
                dry.add(label)


def wanted(open_pairs: Sequence[tuple[str, str]], sizes: dict[str, int], dry: set[str]) -> set[str]:
    """The labels to launch next: for each pair still open, the side(s) not ahead of the other (the
    verdicts look at equal-sized prefixes), unless one of those cannot launch (`dry`), which leaves
    that pair as it is. The one scheduling rule of `run` (sequential_runs) and of the steps."""
    out: set[str] = set()
    for a, b in open_pairs:
        na, nb = sizes.get(a, 0), sizes.get(b, 0)
        sides = {x for x, n in ((a, na), (b, nb)) if n <= min(na, nb)}
        if not sides & dry:
            out |= sides
    return out


def sides(values: dict, a: str, b: str, together=None) -> tuple[tuple[list, list], tuple[list, list]]:
    """((A's values launched together with B, A's others), (B's, B's others)): `together(a, b)`'s masks."""
    va, vb = list(values.get(a) or []), list(values.get(b) or [])
    if together is None or not va or not vb:
        return (va, []), (vb, [])
    ma, mb = together(a, b)
    if len(ma) != len(va) or len(mb) != len(vb):  # values that cannot be told apart: all of them, as before
        return (va, []), (vb, [])
    return tuple(([x for x, k in zip(v, m) if k], [x for x, k in zip(v, m) if not k])
                 for v, m in ((va, ma), (vb, mb)))


def judge(values: dict, pairs: Sequence[tuple[str, str]], design: seq.Design,
          higher_is_better: bool | None, stored: dict | None = None,
          together=None) -> dict[tuple[str, str], seq.Sequential]:
    from toolkit.analysis import noise_prior
    from toolkit.analysis.noise_prior import fresh_pair

    stored = stored or {}
    out = {}
    for a, b in pairs:
        if not (values.get(a) and values.get(b) and min(*values[a], *values[b]) > 0):
            continue
        (ka, da), (kb, db) = sides(values, a, b, together)
        # the stored leading values still in the looks (all of them when nothing was left out)
        sa = stored.get(a, 0) if not da else 0
        sb = stored.get(b, 0) if not db else 0
        prior = noise_prior.from_history({a: da, b: db}) if (da or db) and design.pool_stored else None
        out[(a, b)] = seq.verdict(ka, kb, higher_is_better=higher_is_better, design=design,
                                  stored=fresh_pair(sa, sb), prior=prior)
    return out
