"""A tracked series' change points as rows (pure): each change point (Otava's, or an end of a stretch:
toolkit/history/change_verdict.py) with its neighbouring measured points, direction, size and
significance, and the bisect verdict stored for it; the marks the history plot draws from them; and
the line that states one (a stretch's start says where it ends: "regression at X, fixed at Y"). Shared by `patchbench history` and
the published site (toolkit/report/site_history.py)."""

from __future__ import annotations

from typing import Sequence

from toolkit.history.autobisect import key_of
from toolkit.history.otava import ChangePoint
from toolkit.history.series import History
from toolkit.results.metrics import MetricSpec


def rows(hist: History, cps: Sequence[ChangePoint], spec: MetricSpec, verdicts: dict,
         bisected_now: Sequence[str] = ()) -> list[dict]:
    """One dict per change point (indices into `hist.measured`); `verdicts`: the stored bisects
    (toolkit.history.autobisect.load_state(...)["bisects"])."""
    measured = hist.measured
    hib = spec.info.higher_is_better
    out = []
    for c in cps:
        before, after = measured[c.index - 1], measured[c.index]
        direction = c.direction(hib)
        key = key_of(before, after, str(spec), direction)
        out.append({"index": c.index, "before": before.label, "after": after.label, "after_id": after.id,
                    "direction": direction, "change_pct": c.forward_change_percent, "magnitude": c.magnitude,
                    "pvalue": c.pvalue, "otava_pvalue": c.otava_pvalue, "splits": c.splits,
                    "mean_before": c.mean_before, "mean_after": c.mean_after, "bisect": verdicts.get(key),
                    "bisected_now": key in bisected_now, "stretch": _stretch(measured, c)})
    return out


def _stretch(measured: Sequence, c: ChangePoint) -> dict | None:
    """An end of a stretch: the stretch's points, this end's role, and both ends' labels."""
    if c.stretch is None:
        return None
    start, end = c.stretch
    return {"first": measured[start].label, "last": measured[end - 1].label, "points": end - start,
            "end": "start" if c.index == start else "end", "start_after": measured[start].label,
            "end_after": measured[end].label if end < len(measured) else None}


def marks(hist: History, change_rows: Sequence[dict]) -> list[dict]:
    """What `toolkit.report.history_plot.history_figure` draws: the change's position among all
    entries (measured or not), its direction, size and the commit its bisect named."""
    pos = {e.id: i for i, e in enumerate(hist.entries)}
    return [{"index": pos[r["after_id"]], "direction": r["direction"], "change_pct": r["change_pct"],
             "culprit": _culprit_mark(r["bisect"] or {})} for r in change_rows]


def _culprit_mark(b: dict) -> str | None:
    """The commit a bisect named, marked "(weak)" when that step alone was not a significant change."""
    if not b.get("culprit"):
        return None
    return b["culprit"] + (" (weak)" if b.get("culprit_kind") == "commit" and b.get("confirmed") is False else "")


def line(r: dict) -> str:
    text = (f"change point {r['before']} -> {r['after']}: {r['change_pct']:+.1f}% ({r['direction']}), "
            f"p={r['pvalue']:.2g}" + (f" (Otava's {r['otava_pvalue']:.2g}; {r['splits']} places it could split)"
                                      if r.get("otava_pvalue") is not None else ""))
    s = r.get("stretch")
    if s:
        came, went = ("regression", "fixed") if r["direction"] == "worse" else ("gain", "lost")
        if s["end"] == "start":
            text += (f" ({s['points']} points {s['first']} .. {s['last']} against the rest; {r['splits']} places a "
                     f"stretch could lie): {came} at {s['start_after']}, {went} at {s['end_after']}")
        else:
            text += f" (the end of the stretch {s['first']} .. {s['last']})"
    b = r["bisect"]
    if b:
        text += f"; bisect: {b.get('culprit') or 'no single commit'} ({b.get('message', '')})"
        if b.get("left_out"):  # probes whose stored runs (the track's) its looks did not read: launched again
            text += f"; left out: {'; '.join(b['left_out'].values())}"
    return text
