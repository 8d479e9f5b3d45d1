"""`track --settle`: a step between neighbouring points that looks like a change gets launches until
its sequential verdict is settled.

`track` measures one run per point (a cron job pays one launch a point). What a sequential design
means for it: a step (point i - 1 -> point i, upstream order, among the points with an ok run of the
recipe's current definition, measured by an earlier track or this one) is looked at when one of its
points was measured now, or both were launched under a sequential design before (every launch of a
`--settle` track records it: a killed one is taken up by the next, its stored runs handed out first);
it is *flagged* when its single runs differ by at least `min_effect` (the recipe's `[benchmark]
min_effect`) on the headline metric at the benchmark's first point: the shift a change point is
made of. A flagged step launches both of its points in rounds (toolkit.analysis.sequential_steps,
min_repeats .. max_repeats each) until `toolkit.analysis.sequential` settles it (faster, slower, or
equal within min_effect: a one-run fluke is then shown to be no change) or it is futile; a step that
does not look like a change costs nothing more. A point shared by two flagged steps is launched once
per round. A step judges only the launches of its two points made together (toolkit.analysis.campaigns:
in a track that launched both, or in this one): a point's stored runs from an earlier track (another
day, another load on the box) are left out of its looks and named in the step, and the point launches
again here. The verdicts are per step, each false with probability <= alpha (not corrected jointly
over the steps). Effects: launches through `measure_once`, store writes.
"""

from __future__ import annotations

import math

from toolkit.analysis import sequential as seq
from toolkit.analysis.sequential_steps import settle_pairs
from toolkit.results import metrics as registry


def headline(recipe) -> tuple[str, int]:
    """The headline metric and first point of the tracked recipe's benchmark."""
    b = recipe.benchmark
    if b.driver == "one-batch":
        return "decode_tok_s", list(b.batch_sizes)[0]
    return "output_tok_s", list(b.concurrency)[0]


def flagged(values: dict[str, list[float]], order: list[str], min_effect: float) -> list[tuple[str, str]]:
    """Neighbouring (before, after) labels whose first values differ by at least min_effect."""
    out = []
    for a, b in zip(order, order[1:]):
        va, vb = values.get(a), values.get(b)
        if va and vb and va[0] > 0 and vb[0] > 0 and abs(math.log(vb[0] / va[0])) >= math.log1p(min_effect):
            out.append((a, b))
    return out


def settle_steps(recipe, entries, res, design: seq.Design, *, measure_once, prepare, store, **kw) -> list[dict]:
    """The verdicts of the flagged steps among `entries` ([(point, prepared or None, stored ok run ids
    oldest first)], upstream order: every point with an ok run of the recipe's current definition,
    measured in an earlier track or now), after launching them until settled; each: before, after,
    the verdict's keys and text. A step is looked at when one of its points was measured now, or
    both were launched under a sequential design before (a `--settle` track that was killed, or
    whose step was not settled by then): its stored runs are handed out first, so a settled step
    costs nothing and an unsettled one goes on where it stopped. `prepare(point)` builds a point
    measured before when its step needs a launch (None: it cannot be launched)."""
    from toolkit.analysis import campaigns
    from toolkit.analysis.selection import values_at

    if len(entries) < 2:
        return []
    metric, point = headline(recipe)
    hib = registry.higher_is_better(metric)
    by_label = {pt.label: [pt, prepared] for pt, prepared, _ in entries}
    runs: dict[str, list[str]] = {pt.label: list(ids) for pt, _, ids in entries}
    fresh = {pt.label for pt, _, _ in entries if pt.label in res.ok}

    def values_of(label: str) -> list[float]:
        ids = runs[label]
        return values_at(store.samples(ids, metric=metric), metric, point, ids) if ids else []

    marked = {r.run_id for r in store.runs(run_ids=[rid for ids in runs.values() for rid in ids])
              if "sequential" in (r.extra or {})}  # launched under a sequential design (a --settle track)

    def settled_before(label: str) -> bool:
        return any(rid in marked for rid in runs[label])

    first = {label: values_of(label) for label in by_label}
    pairs = [(a, b) for a, b in flagged(first, [pt.label for pt, _, _ in entries], design.min_effect)
             if a in fresh or b in fresh or (settled_before(a) and settled_before(b))]
    if not pairs:
        return []
    handed = {label: 0 for label in by_label}

    def measure(label: str, k: int) -> list[float] | None:
        entry = by_label[label]
        while len(values_of(label)) < handed[label] + k:
            if entry[1] is None:
                entry[1] = prepare(entry[0])
                if entry[1] is None:
                    break
            before = len(res.run_ids)
            measure_once(entry[0], entry[1], len(runs[label]), res, store=store, **kw)
            rid = res.run_ids[-1] if len(res.run_ids) > before else None
            if rid is None or store.get_run(rid).status != "ok":
                break
            runs[label].append(rid)
        got = values_of(label)[handed[label]:handed[label] + k]
        handed[label] += len(got)
        return got or None

    def handed_rows(label: str) -> list:
        """The stored rows of the runs whose values were handed out for `label`, in order."""
        ids = [rid for rid in runs[label] if values_at(store.samples([rid], metric=metric), metric, point, [rid])]
        ids = ids[:handed[label]]
        rows = {r.run_id: r for r in store.runs(run_ids=ids)} if ids else {}
        return [rows[rid] for rid in ids if rid in rows]

    def split(a: str, b: str):
        return campaigns.split(handed_rows(a), handed_rows(b), here=kw.get("group_id") or None)

    def together(a: str, b: str):
        sp = split(a, b)
        return ([r.run_id in sp.a for r in handed_rows(a)], [r.run_id in sp.b for r in handed_rows(b)])

    def left_out(a: str, b: str) -> tuple[str, ...]:
        sp = split(a, b)
        rows = {r.run_id: r for r in handed_rows(a) + handed_rows(b)}
        return campaigns.left_out(a, b, sp, rows)

    labels = list(dict.fromkeys(x for pair in pairs for x in pair))
    _, verdicts = settle_pairs(measure, labels, pairs, design, hib, together=together)
    out = []
    for (a, b), v in verdicts.items():
        left = left_out(a, b)
        out.append({"before": a, "after": b, "metric": metric, "point": point, "verdict": v.verdict,
                    "settled": v.settled, "launches_each": v.n, "ratio": v.ratio, "low": v.low, "high": v.high,
                    "left_out": list(left), "text": v.text + campaigns.qualifier(left)})
    return out
