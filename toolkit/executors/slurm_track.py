"""`patchbench track --executor slurm`: each upstream point not tracked yet is one Slurm job, all of
them submitted at once (they run on as many nodes in parallel).

On the node a job does what the local loop does for one point (toolkit/history/track.py): the
recipe's variant at that point (made on the node, under its node home), apply and build it, then its
runs; a stack that does not apply or an env that does not build is recorded there as the local track
records it. The submitting side holds the workspace's track lock meanwhile, waits for the jobs,
imports their runs (each stamped `extra.slurm`) and reads the outcome of each point back from the
imported runs: a job that ended without its runs (cancelled, timed out) leaves its point failed, and
the next `track` measures it again.

With `--repeats N` a point's N runs are consecutive on its node (no passes over every point: the
points run on different nodes; pin the hardware with `--slurm-arg constraint=...`); a point a killed
track left short of its N runs gets the runs it lacks, as in the local loop.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from toolkit.executors.config import ClusterConfig, for_recipes
from toolkit.executors.job import direct_store, node_context, node_work, write_done
from toolkit.executors.slurm import submit, wait
from toolkit.history.track import RECORDS, TrackResult, announce
from toolkit.results import jobs
from toolkit.results.store import Store


@dataclass(frozen=True)
class TrackPointJob:
    """One tracked point, as the submitting side hands it to the node (pickled by submitit)."""

    recipe: object  # toolkit.recipe.load.Recipe: the tracked recipe (the variant is made on the node)
    source: str
    point: object  # toolkit.history.points.Point
    stack: str  # the stack digest the submitting side computed (the point's identity in the store)
    repeats: int  # the runs the track asks of a point (recorded with each run)
    group_id: str
    node_home: str
    store_url: str | None = None  # as SweepJob's (toolkit/executors/job.py)
    launches: int | None = None  # the runs this job launches (a point left short: the ones it lacks); None: repeats


def run_track_point_job(job: TrackPointJob) -> dict:
    """On the node: prepare the recipe at the point (recording a stack that does not apply or an env
    that does not build), then `launches` runs (default `repeats`). The point's outcome in done.json."""
    from toolkit.history.points import variant_for
    from toolkit.history.track import measure_once, prepare_point

    job_id, folder, home, store, console = node_context(job.node_home, job.store_url)
    res = TrackResult()
    pt = job.point
    console.print(f"track {job.source} {pt.kind} {pt.label}" + (f" ({pt.date})" if pt.date else ""), markup=False)
    with node_work(job_id, store, console):
        prepared = prepare_point(job.recipe, job.source, job.stack, pt,
                                 lambda p: variant_for(job.recipe, job.source, p, home), res, home=home,
                                 store=store, console=console, group_id=job.group_id,
                                 repeats=job.repeats)
        for r in range((job.repeats if job.launches is None else job.launches) if prepared is not None else 0):
            measure_once(pt, prepared, r, res, home=home, store=store, console=console, group_id=job.group_id)
    return write_done(folder, {"job_id": job_id, "node": socket.gethostname(), "point": pt.label,
                                "run_ids": res.run_ids, "ok": sorted(res.ok), "failed": res.failed,
                                "recorded": {k: list(v) for k, v in res.recorded.items()}})


def slurm_points(recipe, source: str, *, cfg: ClusterConfig, home: Path, store: Store, repeats: int,
                 group_id: str, console: Console):
    """The `elsewhere` of `toolkit.history.track.track`: every point to measure as its own job, all
    submitted at once; returns when every job is over and its runs are in `store`."""

    def measure(todo: list, stack: str, res: TrackResult, left: dict | None = None) -> None:
        """`left`: point id -> the runs it lacks (default: `repeats` each)."""
        c = for_recipes(cfg, [recipe])
        submitted = []
        try:
            for n, pt in enumerate(todo, 1):
                announce(console, n, len(todo), source, pt)
                job = TrackPointJob(recipe=recipe, source=source, point=pt, stack=stack, repeats=repeats,
                                    group_id=group_id, node_home=c.node_home, store_url=direct_store(store),
                                    launches=(left or {}).get(pt.id, repeats))
                submitted.append(submit(run_track_point_job, job, names=[f"{recipe.name}@{pt.label}"],
                                        home=home, cfg=c, command="track", console=console))
        finally:  # a refused submission still waits for, and imports, the jobs already submitted
            if submitted:
                recs = wait(submitted, home=home, store=store, cfg=cfg, console=console)
                for pt, rec in zip(todo, recs):
                    _collect(pt, rec, store, res)

    return measure


def _collect(pt, rec: jobs.JobRecord, store: Store, res: TrackResult) -> None:
    """The point's outcome from the runs its job left (now in the store), as the local loop notes it."""
    runs = store.runs(run_ids=jobs.run_ids(rec))
    for run in sorted(runs, key=lambda r: (r.repeat or 0, r.started_at or "")):
        outcome = (run.extra.get("track") or {}).get("outcome")
        if outcome in RECORDS:
            res.recorded[pt.label] = (outcome, run.error or "")
            continue
        res.run_ids.append(run.run_id)  # the runs of the pipeline, as the local loop lists them
        if run.status == "ok":
            res.ok.add(pt.label)
        else:
            res.failed[pt.label] = f"run {run.run_id[:8]} {run.status}: {run.error}"
    done = Path(rec.folder) / jobs.DONE_NAME
    if not done.is_file() and pt.label not in res.failed:
        res.failed[pt.label] = f"slurm job {rec.job_id} ended {rec.state} [log: {rec.log}]"
