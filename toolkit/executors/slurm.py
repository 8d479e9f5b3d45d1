"""Sweeps on a Slurm cluster through submitit: one job per sweep (the recipes of one comparison with
their repeats interleaved, so an A/B comparison never spans two machines), several sweeps in parallel
on as many nodes. The submitting side records each job (toolkit/results/jobs.py), shows each job's state
with its log path as it changes, and imports a job's runs into the store as soon as it is over.

Job folders live under `HOME/slurm/<job id>/`: HOME must be on a filesystem the nodes see (the
usual shared home); nothing there is SQLite. The node's PATCHBENCH_HOME is `node_home` (node-local).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from toolkit.results import jobs
from toolkit.errors import BadInput, PatchbenchError
from toolkit.executors.config import ClusterConfig, for_recipes
from toolkit.executors.job import SweepJob, direct_store, run_sweep_job
from toolkit.results.store import Store


def _executor(home: Path, cfg: ClusterConfig, name: str):
    try:
        import submitit
    except ImportError:
        raise PatchbenchError("--executor slurm needs submitit (pip install submitit)") from None
    import shutil

    if not shutil.which("sbatch"):
        raise BadInput("--executor slurm: no `sbatch` on PATH (run from a Slurm login node)")
    ex = submitit.SlurmExecutor(folder=str(home / "slurm" / "%j"), python=sys.executable)
    params = cfg.sbatch_parameters()
    extra = params.pop("additional_parameters", {})
    try:
        ex.update_parameters(job_name=name, nodes=1, ntasks_per_node=1, additional_parameters=extra, **params)
    except ValueError as exc:  # submitit refuses unknown sbatch options
        raise BadInput(f"slurm options: {exc}".splitlines()[0]) from None
    return ex


def submit(fn, payload, *, names: list[str], home: Path, cfg: ClusterConfig, command: str,
           console: Console) -> jobs.JobRecord:
    """Submit `fn(payload)` as one single-node job; record it in the jobs table."""
    ex = _executor(home, cfg, f"patchbench-{command}")
    try:
        job = ex.submit(fn, payload)
    except Exception as exc:  # sbatch's refusal (bad partition, account, ...): one line
        msg = str(exc).strip().splitlines()
        raise PatchbenchError(f"sbatch refused the job: {msg[-1] if msg else exc}") from None
    rec = jobs.save(home, jobs.JobRecord(job_id=str(job.job_id), recipes=names, command=command,
                                         folder=str(job.paths.folder), log=str(job.paths.stdout)))
    asked = " ".join(f"{k}={v}" for k, v in cfg.sbatch_parameters().items()) or "cluster defaults"
    console.print(escape(f"slurm job {rec.job_id}: submitted {command} {' '.join(names)} ({asked}; settings: "
                         f"{cfg.source}) [log: {rec.log}]"))
    return rec


def wait(recs: list[jobs.JobRecord], *, home: Path, store: Store, cfg: ClusterConfig,
         console: Console) -> list[jobs.JobRecord]:
    """Watch the jobs until every one is over, printing each change of state with the job's log
    and importing each job's runs as it ends. Ctrl-C stops the watching, not the jobs."""
    ids = [r.job_id for r in recs]
    current = {r.job_id: r for r in recs}
    try:
        while True:
            for _, new in jobs.refresh(home, store, ids):
                current[new.job_id] = new
                _progress(new, console)
            if all(current[i].imported for i in ids):
                return [current[i] for i in ids]
            time.sleep(cfg.poll_s)
    except KeyboardInterrupt:
        console.print("stopped watching; the jobs go on: `patchbench results --jobs` shows them and "
                      "imports the runs of those that are over")
        raise


def _progress(rec: jobs.JobRecord, console: Console) -> None:
    where = f" on {rec.node}" if rec.node else ""
    line = f"slurm job {rec.job_id} ({' '.join(rec.recipes)}): {rec.state}{where} [log: {rec.log}]"
    if rec.imported:
        line += f"; {'stored by the job' if rec.stored_by_job else 'imported'}: {rec.imported_runs} run(s)"
        if rec.interrupted_runs:
            line += f", {rec.interrupted_runs} interrupted"
    console.print(escape(line))


def run_on_slurm(recipes, *, home: Path, store: Store, cfg: ClusterConfig, repeats: int | None, until: str,
                 frozen: bool, console: Console, strict: bool = False) -> dict:
    """`patchbench run --executor slurm`: the sweep as one job; returns what run_sweep returns, with
    `jobs` (the final job records) added. The runs are in `store` when this returns."""
    cfg = for_recipes(cfg, recipes)
    sweep = SweepJob(recipes=list(recipes), repeats=repeats, until=until, frozen=frozen, node_home=cfg.node_home,
                     strict=strict, store_url=direct_store(store))
    rec = submit(run_sweep_job, sweep, names=[r.name for r in recipes], home=home, cfg=cfg, command="run",
                 console=console)
    return collect(wait([rec], home=home, store=store, cfg=cfg, console=console), store=store, console=console)


def collect(recs: list[jobs.JobRecord], *, store: Store, console: Console) -> dict:
    """What the ended jobs `recs` brought, shaped as run_sweep's result (+ `jobs`, their ids): the runs
    imported from them, the recipes that failed (each failure printed here, as the node printed it in
    the job's log) or were refused as bad input, read from each job's done.json; a job that ended
    without one fails each of its recipes with its final state and log."""
    runs, failed, bad_input, summary, same = [], [], [], {}, {}
    for rec in recs:
        done = Path(rec.folder) / jobs.DONE_NAME
        summary = read_json(done)
        failed += [tuple(f) for f in summary.get("failed", [])]
        bad_input += list(summary.get("bad_input", []))
        same.update(summary.get("same_server") or {})  # a sweep's variants that were another one's server
        for name, why in summary.get("failed", []):
            console.print(f"[red]error[/] (slurm job {rec.job_id}): {escape(why)}")
        runs += [(r.recipe, r.run_id) for r in store.runs(run_ids=jobs.run_ids(rec))]
        if not done.is_file():
            failed += [(n, f"slurm job {rec.job_id} ended {rec.state} [log: {rec.log}]") for n in rec.recipes]
    return {"group_id": summary.get("group_id"), "runs": runs, "failed": failed, "bad_input": bad_input,
            "jobs": [r.job_id for r in recs], "same_server": same}


def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def show_jobs(home: Path, store: Store, console: Console) -> int:
    """`patchbench results --jobs`: ask the scheduler about unfinished jobs, import those that are
    over, and print the jobs table (queued, running, done) with each job's log."""
    from rich.table import Table

    for _, new in jobs.refresh(home, store):
        _progress(new, console)
    recs = jobs.load_all(home)
    if not recs:
        console.print(f"no Slurm jobs recorded in {jobs.jobs_dir(home)}")
        return 0
    table = Table(title="slurm jobs", title_justify="left")
    for col in ("job", "command", "recipes", "state", "node", "submitted", "runs imported", "interrupted", "log"):
        table.add_column(col, overflow="fold")
    for r in recs:
        style = "green" if r.state == "COMPLETED" else ("yellow" if not r.over else "red")
        table.add_row(r.job_id, r.command, " ".join(r.recipes), f"[{style}]{escape(r.state)}[/]", r.node or "",
                      r.submitted_at, str(r.imported_runs) if r.imported else "-",
                      str(r.interrupted_runs) if r.imported else "-", escape(r.log))
    console.print(table)
    return 0
