"""`patchbench track`'s loop: measure the recipe, its patch stack re-applied, at each upstream point not
measured yet. Effects: builds envs, launches servers, writes runs into the results store.

Every outcome is a run in the store carrying `extra.track` = {recipe, source, stack, point (id, order,
kind, date, tag), outcome}: `measured` runs are the pipeline's own (ok, or failed/invalid with their
reason); a point whose patch stack does not apply (`does-not-apply`) or whose env does not build
(`build-failed`) is recorded as a failed run without samples, so the history shows it and the next
`track` does not try again while nothing it was built from changed: a `build-failed` record holds the
digest of the recipe's [build] table it failed with, and an edit of [build] (arch, packages, overrides,
env, ...) builds the point again (`TrackResult.again` says so; records made before 2026-12-06 hold no
digest and still count). A point counts as done when it has an ok run of the recipe's current
definition (toolkit/history/definition.py) or one of those records, for the same stack (the digest of
the patch files): a killed or failed point is measured again next time (one left short of the runs its
track asked, `extra.track.repeats`, gets the ones it lacks), a changed stack measures every
point again, and so does an edit of the recipe's server settings, model, [target] or [benchmark]
(`TrackResult.again` names those points and what changed).

With `repeats` > 1 the points are measured in passes, every point once per pass, alternately oldest
first and newest first: a slow drift of the machine (load, temperature) then adds the same to every
point's mean instead of reading as a change in upstream history.

One `track` at a time per workspace (a FileLock under PATCHBENCH_HOME): it is meant for cron or a
timer, where a slow run must not overlap the next one. With `--executor slurm` the points not done are
measured as Slurm jobs (toolkit/executors/slurm_track.py) under the same lock and bookkeeping.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from filelock import FileLock, Timeout
from rich.console import Console
from rich.markup import escape

from toolkit.analysis.sequential_design import launched_under
from toolkit.errors import PatchbenchError
from toolkit.history import definition
from toolkit.history.points import Point
from toolkit.recipe.load import Recipe
from toolkit.results.store import RunRow, Store

MEASURED, NO_APPLY, BUILD_FAILED = "measured", "does-not-apply", "build-failed"
RECORDS = (NO_APPLY, BUILD_FAILED)  # outcomes stored without a run of the pipeline


class TrackBusy(PatchbenchError):
    """Another `track` holds this workspace's lock."""


def stack_digest(recipe: Recipe) -> str:
    """What the tracked variants re-apply: the patch files of every source, by content."""
    h = hashlib.sha256()
    for src in sorted(recipe.patches):
        for p in recipe.patches[src]:
            h.update(f"{src}\0{Path(p).name}\0".encode())
            h.update(Path(p).read_bytes())
    return h.hexdigest()[:16]


def point_of(run: RunRow) -> dict:
    return (run.extra.get("track") or {}).get("point") or {}


def tracked(store: Store, recipe: str, source: str, stack: str | None = None) -> list[RunRow]:
    """The runs `track` stored for this recipe and source (and stack, when given)."""
    out = []
    for r in store.tracked_runs(recipe):
        t = r.extra.get("track") or {}
        if t.get("source") == source and (stack is None or t.get("stack") == stack):
            out.append(r)
    return out


def ok_counts(runs: Iterable[RunRow], now: dict | None = None) -> tuple[dict[str, int], dict[str, int]]:
    """Per point id: its ok runs (of the definition `now`, when given), and the runs a point a track
    launched was asked for (`extra.track.repeats`, the largest of its runs; 1 for runs that record none)."""
    have: dict[str, int] = {}
    asked: dict[str, int] = {}
    for r in runs:
        if r.status == "ok" and (now is None or not definition.changes(r, now)):
            pid = point_of(r).get("id")
            have[pid] = have.get(pid, 0) + 1
            asked[pid] = max(asked.get(pid, 1), int((r.extra.get("track") or {}).get("repeats") or 1))
    return have, asked


def done_points(runs: Iterable[RunRow], now: dict | None = None, build: str | None = None) -> set[str]:
    """Point ids with as many ok runs (of the definition `now`, when given) as the track that launched
    them asked for (a track killed between its passes left points short: they are not done), or a
    does-not-apply record, or a build-failed one of the [build] digest `build` (when given; a record
    without a digest counts)."""
    runs = list(runs)
    have, asked = ok_counts(runs, now)
    return ({pid for pid, n in have.items() if n >= asked[pid]}
            | {point_of(r).get("id") for r in runs if (r.extra.get("track") or {}).get("outcome") in RECORDS
               and not rebuilt(r, build)})


def build_digest(recipe: Recipe) -> str:
    """The digest of the recipe's [build] table (what an env is built from; `jobs` left out)."""
    import dataclasses
    import json

    table = {k: v for k, v in dataclasses.asdict(recipe.build).items() if k != "jobs"}
    return hashlib.sha256(json.dumps(table, sort_keys=True, default=str).encode()).hexdigest()[:16]


def rebuilt(record: RunRow, build: str | None) -> bool:
    """Whether a build-failed `record` is of another [build] than `build` (the point builds again)."""
    info = record.extra.get("track") or {}
    return (build is not None and info.get("outcome") == BUILD_FAILED and info.get("build") is not None
            and info["build"] != build)


def older_points(runs: Iterable[RunRow], now: dict) -> dict[str, list[str]]:
    """Point id -> what changed, for points whose ok runs are all of another definition than `now`."""
    out: dict[str, list[str]] = {}
    done = done_points(runs, now) | set(ok_counts(runs, now)[0])  # short of runs is not "older"
    for r in runs:
        pid = point_of(r).get("id")
        if r.status == "ok" and pid not in done:
            out[pid] = definition.changes(r, now)
    return out


@dataclass
class TrackResult:
    measured: list[str] = field(default_factory=list)  # point labels measured now
    already: list[str] = field(default_factory=list)
    recorded: dict = field(default_factory=dict)  # label -> (outcome, reason): did not apply / build
    failed: dict = field(default_factory=dict)  # label -> reason: runs that did not end ok
    again: dict = field(default_factory=dict)  # label -> what changed: measured before, of another definition
    run_ids: list[str] = field(default_factory=list)
    ok: set = field(default_factory=set)  # labels with an ok run now
    ok_runs: list = field(default_factory=list)  # (run id, point id) of the ok runs now, in launch order
    steps: list = field(default_factory=list)  # `--settle`: the flagged steps' sequential verdicts

    def to_dict(self) -> dict:
        return {"measured": self.measured, "already_measured": self.already,
                "not_measured": {k: {"outcome": o, "reason": r} for k, (o, r) in self.recorded.items()},
                "failed": self.failed, "run_ids": self.run_ids, "measured_again": self.again, "steps": self.steps}


BUSY_WAIT_S = 3.0  # how long a track waits for the workspace before it says another one is running


def workspace_lock(home: Path) -> FileLock:
    home.mkdir(parents=True, exist_ok=True)
    return FileLock(str(home / "track.lock"), thread_local=False)


def track(recipe: Recipe, source: str, points: list[Point], variant: Callable[[Point], Recipe], *,
          home: Path, store: Store, console: Console, repeats: int = 1, group_id: str = "",
          limit: int | None = None, elsewhere: Callable | None = None, settle=None) -> TrackResult:
    """Measure each point of `points` not done yet (see the module doc); `limit`: at most that many
    new points this time. `elsewhere(todo, stack, res, left)`: measures the points not done elsewhere (Slurm
    jobs, toolkit/executors/slurm_track.py; `left`: point id -> the runs it lacks), their runs in `store` and
    `res` filled when it returns.
    `settle`: a sequential design: the steps among the points measured now that look like a change
    launch until settled (toolkit/history/settle.py). Raises TrackBusy when another track holds the workspace."""
    lock = workspace_lock(home)
    try:
        # a short wait, not none: a killed track's processes release the lock as they exit, which on
        # a loaded box can lag the parent's exit (seen in CI: refused right after a SIGKILL + wait)
        lock.acquire(timeout=BUSY_WAIT_S)
    except Timeout:
        raise TrackBusy(f"another `patchbench track` is running in {home} (lock {lock.lock_file})",
                        hint="it ends by itself; a timer simply tries again next time") from None
    try:
        return _track(recipe, source, points, variant, home=home, store=store, console=console,
                      repeats=repeats, group_id=group_id, limit=limit, elsewhere=elsewhere, settle=settle)
    finally:
        lock.release()


def _track(recipe, source, points, variant, *, home, store, console, repeats, group_id, limit,
           elsewhere=None, settle=None) -> TrackResult:
    from toolkit.run import reaper

    for line in reaper.reap(home, store):  # what a killed track left running
        console.print(f"[yellow]reaped[/]: {line}")
    stack = stack_digest(recipe)
    runs, now = tracked(store, recipe.name, source, stack), definition.current(recipe)
    build = build_digest(recipe)
    done, older = done_points(runs, now, build), older_points(runs, now)
    for r in runs:  # a point that failed to build, with the [build] edited since: built again
        pid = point_of(r).get("id")
        if rebuilt(r, build) and pid not in done:
            older.setdefault(pid, ["[build] edited since it failed to build"])
    have, _ = ok_counts(runs, now)
    res = TrackResult()
    todo = [p for p in points if p.id not in done]
    # a point a killed track left short of its runs gets the ones it lacks (at least one)
    left = {p.id: max(1, repeats - have.get(p.id, 0)) for p in todo}
    res.already = [p.label for p in points if p.id in done]
    if limit is not None:
        todo = todo[:limit]
    res.again = {p.label: older[p.id] for p in todo if p.id in older}
    if elsewhere is not None:
        elsewhere(todo, stack, res, {p.id: left[p.id] for p in todo})  # each point the runs it lacks
        res.measured = [pt.label for pt in todo if pt.label in res.ok]
        return res
    ready = []
    for n, pt in enumerate(todo, 1):
        announce(console, n, len(todo), source, pt)
        prepared = prepare_point(recipe, source, stack, pt, variant, res, home=home, store=store, console=console,
                                 group_id=group_id, repeats=repeats)
        if prepared is None:
            continue
        # --settle: every launch of a point, the first too, is part of the sequential procedure (a killed
        # track's steps are then taken up again by the next one)
        prepared = launched_under(prepared, settle)
        ready.append((pt, prepared))
        if repeats == 1:  # measured as soon as built: a long first track stores as it goes
            measure_once(pt, prepared, 0, res, home=home, store=store, console=console, group_id=group_id)
    if repeats > 1:  # passes over every point: a slow drift of the machine does not read as a change
        for r in range(repeats):
            for pt, prepared in (ready if r % 2 == 0 else ready[::-1]):
                if r < left[pt.id]:
                    measure_once(pt, prepared, r, res, home=home, store=store, console=console, group_id=group_id)
    if settle is not None:
        from toolkit.history.settle import settle_steps

        def prepare_again(pt: Point):
            return launched_under(prepare_point(recipe, source, stack, pt, variant, res, home=home, store=store,
                                                console=console, group_id=group_id, repeats=repeats), settle)

        res.steps = settle_steps(recipe, settle_entries(points, ready, runs, now, res), res, settle,
                                 measure_once=measure_once, prepare=prepare_again, store=store, home=home,
                                 console=console, group_id=group_id)
    res.measured = [pt.label for pt in todo if pt.label in res.ok]
    return res


def settle_entries(points: list[Point], ready: list, stored: list[RunRow], now: dict, res: TrackResult) -> list:
    """(point, prepared or None, ok run ids oldest first) for every point in upstream order with an ok
    run of the definition `now`: stored before this track, or measured now (`ready`, `res`)."""
    prepared = {pt.id: p for pt, p in ready}
    ids: dict[str, list[str]] = {}
    for r in sorted(stored, key=lambda r: r.started_at or ""):
        if r.status == "ok" and not definition.changes(r, now):
            ids.setdefault(point_of(r).get("id"), []).append(r.run_id)
    for rid, pid in res.ok_runs:  # this track's, in launch order
        ids.setdefault(pid, []).append(rid)
    return [(pt, prepared.get(pt.id), ids[pt.id]) for pt in points if ids.get(pt.id)]


def announce(console: Console, n: int, total: int, source: str, pt: Point) -> None:
    console.print(f"[bold]track[/] {n}/{total}: {source} {pt.kind} {pt.label}" + (f" ({pt.date})" if pt.date else ""))


def prepare_point(recipe: Recipe, source: str, stack: str, pt: Point, variant: Callable[[Point], Recipe],
                  res: TrackResult, *, home: Path, store: Store, console: Console, group_id: str, repeats: int = 1):
    """Apply and build the recipe at `pt`; the prepared variant (its runs marked `extra.track`, with the
    `repeats` the point was asked for), or None when the stack does not apply or the env does not build
    (then recorded in `store` and `res`)."""
    from toolkit.run.pipeline import prepare

    info = {"recipe": recipe.name, "source": source, "stack": stack, "point": pt.to_dict(), "repeats": repeats}
    try:
        prepared = prepare(variant(pt), home, label=f"{recipe.name}@{pt.label}", console=console)
    except PatchbenchError as exc:
        outcome = NO_APPLY if exc.step == "apply" and "does not apply" in str(exc) else BUILD_FAILED
        console.print(f"[yellow]{pt.label}: {outcome}[/]: {escape(str(exc))}")
        built = {"build": build_digest(recipe)} if outcome == BUILD_FAILED else {}
        store.record_run({"recipe": f"{recipe.name}@{pt.label}", "status": "failed", "error": str(exc)[:2000],
                          "group_id": group_id, "extra": {"track": {**info, "outcome": outcome, **built}}})
        res.recorded[pt.label] = (outcome, str(exc))
        return None
    prepared.extra["track"] = {**info, "outcome": MEASURED}
    return prepared


def measure_once(pt: Point, prepared, repeat: int, res: TrackResult, *, home, store, console, group_id) -> None:
    """One run of a prepared point, stored; `res` notes it (ok, or failed with its reason)."""
    from toolkit.run.pipeline import run_once

    run_id = run_once(prepared, home=home, store=store, repeat=repeat, group_id=group_id, console=console)
    res.run_ids.append(run_id)
    run = store.get_run(run_id)
    if run.status == "ok":
        res.ok.add(pt.label)
        res.ok_runs.append((run_id, pt.id))
    else:
        res.failed[pt.label] = f"run {run_id[:8]} {run.status}: {run.error}"
