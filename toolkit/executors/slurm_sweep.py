"""`patchbench sweep --executor slurm`: a sweep's recipes spread over several Slurm jobs.

The recipes of one measuring round are dealt round-robin into at most `jobs` chunks; the default
configuration (the first recipe) goes with every chunk, so each job's verdicts compare runs on one
machine. Each chunk is one interleaved `run_sweep` job (toolkit/executors/job.py); the jobs run in
parallel, are watched together and their runs imported into the store, their failures collected
(toolkit/executors/slurm.py `collect`, as for `run --executor slurm`). Each job launches a variant
that is an earlier one's server (toolkit.run.same_server) once and names it in its done.json; two such
variants dealt to different chunks are each measured (each chunk knows its own launches only).
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from toolkit.executors.config import ClusterConfig, for_recipes
from toolkit.executors.job import SweepJob, direct_store, run_sweep_job
from toolkit.executors.slurm import collect, submit, wait
from toolkit.results.store import Store


def chunks(recipes: list, n: int) -> list[list]:
    """At most `n` chunks, round-robin, each led by recipes[0] when there is more than one chunk."""
    if len(recipes) <= 1 or n <= 1:
        return [list(recipes)] if recipes else []
    head, rest = recipes[0], recipes[1:]
    groups = [rest[i::n] for i in range(min(n, len(rest)))]
    return [[head, *g] for g in groups]


def slurm_runner(cfg: ClusterConfig, *, home: Path, store: Store, jobs: int, frozen: bool, console: Console):
    """A `run_sweep`-shaped callable that measures its recipes as parallel Slurm jobs."""

    def run(recipes: list) -> dict:
        recs = []
        for chunk in chunks(list(recipes), jobs):
            c = for_recipes(cfg, chunk)
            job = SweepJob(recipes=chunk, repeats=None, until="store", frozen=frozen, node_home=c.node_home,
                           store_url=direct_store(store), keep_going=True, same_server=True)
            recs.append(submit(run_sweep_job, job, names=[r.name for r in chunk], home=home, cfg=c,
                               command="sweep", console=console))
        return collect(wait(recs, home=home, store=store, cfg=cfg, console=console), store=store, console=console)

    return run
