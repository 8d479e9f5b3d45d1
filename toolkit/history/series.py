"""The tracked history of one recipe, source and metric, in upstream order: one entry per point `track`
visited, with the mean of the values of its runs that count (one value per run; verified benchmark runs
of one run identity, `toolkit.analysis.selection`) or the
reason it has none (the stack did not apply, the build or every run failed). Reads the store only.

Only runs of the recipe as its file says now count (`current`, toolkit/history/definition.py): an
edit of its server settings, model, [target] or [benchmark] would otherwise read as a change point
in upstream history. A point measured only with an older definition has the status `older-definition`
(what changed as its reason) until `track` measures it again. And only runs on one kind of machine
count (the GPU key of the newest counted run): a history mixing GPUs would show the hardware change
as a change point.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from toolkit.analysis.selection import Criteria, choose, values_at
from toolkit.errors import BadInput
from toolkit.history import definition
from toolkit.history.track import RECORDS, point_of, tracked
from toolkit.results.metrics import MetricSpec
from toolkit.results.store import Store


OLDER = "older-definition"


@dataclass
class Entry:
    id: str
    label: str
    kind: str
    order: int
    date: str | None
    tag: str | None
    values: list[float] = field(default_factory=list)
    run_ids: list[str] = field(default_factory=list)
    status: str = "measured"  # measured | older-definition | does-not-apply | build-failed | failed | imported
    reason: str | None = None
    older_runs: int = 0  # ok runs of this point of an older definition, left out

    @property
    def value(self) -> float | None:
        return sum(self.values) / len(self.values) if self.values else None

    def to_dict(self) -> dict:
        return {"id": self.id, "label": self.label, "kind": self.kind, "order": self.order, "date": self.date,
                "tag": self.tag, "value": self.value, "values": self.values, "n_runs": len(self.run_ids),
                "run_ids": self.run_ids, "status": self.status, "reason": self.reason,
                "older_definition_runs": self.older_runs}


@dataclass
class History:
    recipe: str
    source: str
    metric: str
    point: int
    gpu_key: str | None
    entries: list[Entry]
    other_gpus: int = 0  # ok runs left out: another GPU kind
    older: dict = field(default_factory=dict)  # what changed -> labels of the points with such runs

    @property
    def measured(self) -> list[Entry]:
        return [e for e in self.entries if e.value is not None]

    def older_lines(self) -> list[str]:
        """What the series left out for an older definition of the recipe, one line per change."""
        out = []
        for what, labels in self.older.items():
            waiting = [e.label for e in self.entries if e.label in labels and e.status == OLDER]
            line = (f"runs of an older definition of {self.recipe} left out at {len(labels)} point(s) "
                    f"({', '.join(labels)}): {what}")
            if waiting:
                line += (f"; {len(waiting)} point(s) not measured since ({', '.join(waiting)}): "
                         "`patchbench track` measures them again")
            out.append(line)
        return out


def _sort_key(e: Entry):
    if e.kind == "release":
        from packaging.version import Version

        return (0, Version(e.id), 0)
    return (1, e.order, 0)


def _bench_point(store: Store, run_ids: list[str], metric: str) -> int | None:
    points = sorted({s.point for s in store.samples(run_ids, metric=metric)})
    return points[0] if points else None


def _counted(store: Store, runs: list, metric: str, imported: bool = False) -> list[str]:
    """The runs of one point that count (toolkit.analysis.selection: verified benchmark runs with
    samples of `metric`, the newest run identity; imported ones with `imported`), oldest first."""
    import dataclasses

    if not runs:
        return []
    rows = [dataclasses.replace(r, recipe="point") for r in runs]
    try:
        sel = choose(rows, ["point"], Criteria(prefer_group=False, imported=imported), metrics=[metric],
                     measured=store.measured_metrics([r.run_id for r in rows]))
    except BadInput:  # MissingResults included: nothing counts at this point
        return []
    return sel.run_ids("point")


def load_history(store: Store, recipe: str, source: str, spec: MetricSpec, stack: str | None = None,
                 now: dict | None = None, imported: bool = False) -> History:
    """The series (BadInput when nothing was tracked, or the runs lack the metric or point). `now`:
    the recipe's current definition (`definition.current`); runs of another one are left out.
    `imported`: imported runs count too (a store filled from another's export)."""
    runs = tracked(store, recipe, source, stack)
    if not runs:
        raise BadInput(f"nothing tracked for recipe {recipe}, source {source}",
                       hint=f"patchbench track {recipe} --source {source} --releases (or --branch B --every N)")
    changed = {r.run_id: definition.changes(r, now) for r in runs if r.status == "ok" and now is not None}
    older: dict[str, list[str]] = defaultdict(list)
    ok = [r for r in runs if r.status == "ok" and not changed.get(r.run_id)]
    gpu = ok[-1].gpu_key if ok else None
    counted = [r for r in ok if r.gpu_key == gpu]
    ids = [r.run_id for r in counted]
    have = set().union(*store.measured_metrics(ids).values()) if ids else set()
    if ids and spec.metric not in have:
        raise BadInput(f"--metric {spec.metric}: the tracked runs of {recipe} have no such metric",
                       hint=f"they have: {', '.join(sorted(have))}")
    point = spec.point if spec.point is not None else _bench_point(store, ids, spec.metric)
    if ids and point is not None:
        known = sorted({s.point for s in store.samples(ids, metric=spec.metric)})
        if point not in known:
            raise BadInput(f"--metric {spec}: the tracked runs have {spec.metric} at {', '.join(map(str, known))} only")
    by_point: dict[str, list] = defaultdict(list)
    for r in runs:
        by_point[point_of(r).get("id")].append(r)
    entries = []
    for pid, rs in by_point.items():
        p = point_of(rs[-1])
        e = Entry(pid, p["id"] if p.get("kind") == "release" else pid[:12], p.get("kind", "commit"),
                  int(p.get("order", 0)), p.get("date"), p.get("tag"))
        left = [r for r in rs if changed.get(r.run_id)]
        rs = [r for r in rs if not changed.get(r.run_id)]
        e.older_runs = len(left)
        if left:
            older["; ".join(changed[left[-1].run_id])].append(e.label)
        good = _counted(store, [r for r in rs if r.gpu_key == gpu], spec.metric, imported)
        if good:
            e.values = values_at(store.samples(good, metric=spec.metric), spec.metric, point, good)
            e.run_ids = good
        if e.value is None and not rs:  # measured only before the recipe's edit
            e.status, e.reason = OLDER, "; ".join(changed[left[-1].run_id])
        elif e.value is None and not imported and any(r.status == "ok" and (r.extra or {}).get("imported") for r in rs):
            e.status, e.reason = "imported", "its ok runs were imported (measured elsewhere): --imported counts them"
        elif e.value is None:
            last = rs[-1]
            outcome = (last.extra.get("track") or {}).get("outcome")
            e.status = outcome if outcome in RECORDS else "failed"
            e.reason = last.error
        entries.append(e)
    entries.sort(key=_sort_key)
    order = {e.label: i for i, e in enumerate(entries)}
    return History(recipe, source, spec.metric, point if point is not None else 0, gpu, entries,
                   other_gpus=len(ok) - len(counted),
                   older={what: sorted(labels, key=order.get) for what, labels in older.items()})
