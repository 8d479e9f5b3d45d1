"""What runs on a Slurm node: one sweep (the recipes of one comparison, repeats interleaved).

With a SQLite store on the submitting side, the sweep writes its runs to a store of its own on the
node's local disk (SQLite is never written over a network filesystem); with a PostgreSQL store
(`store_url`), into that database directly, as they happen. Either way, after every begin and finish
of a run, the job's own runs are exported as JSON into the job's folder (shared with the submitting
side) by an atomic rename. The submitting side imports that file once the job is over (runs it
already has are skipped: a direct job's import only adds the records of recipes it never began);
a run still `running` there was cut short by the job's end and is finished `interrupted`.
A SIGTERM (scancel) or the time-limit signal stops the sweep where it is: the server of the run in
progress is torn down on the way out, the run is left `running` in the export.
"""

from __future__ import annotations

import contextlib

import json
import os
import signal
import socket
from dataclasses import dataclass
from pathlib import Path

from toolkit.results.exchange import export
from toolkit.results.jobs import DONE_NAME, EXPORT_NAME
from toolkit.results.store import Store


class JobStopped(BaseException):
    """The scheduler asked the job to stop (scancel, time limit); not an error of the run."""


class JobStore(Store):
    """A per-job store that exports itself to `export` after every write that opens or closes a
    run, and stamps each run with the Slurm job that ran it."""

    def __init__(self, path: Path | str, *, export: Path, slurm: dict) -> None:
        super().__init__(path)
        self.export_path = export
        self.slurm = slurm
        self.mine: list[str] = []  # the runs this job recorded: all its export holds

    def export(self) -> None:
        export(self, "json", self.export_path, run_ids=self.mine)

    def _stamped(self, fields_: dict) -> dict:
        """`fields_` with the job's stamp added to the extra and log_paths it carries."""
        out = dict(fields_)
        if "extra" in out:
            out["extra"] = {**(out["extra"] or {}), "slurm": dict(self.slurm)}
        if "log_paths" in out:
            out["log_paths"] = {**(out["log_paths"] or {}), "slurm_job": self.slurm["log"]}
        return out

    def begin_run(self, **fields_) -> str:
        run_id = super().begin_run(**self._stamped({"extra": None, "log_paths": None, **fields_}))
        self.mine.append(run_id)
        self.export()
        return run_id

    def record_run(self, fields_: dict, samples=(), artifacts=()) -> str:
        """A whole run recorded at once (a tracked point whose stack does not apply): stamped too."""
        run_id = super().record_run(self._stamped({"extra": None, "log_paths": None, **fields_}), samples, artifacts)
        self.mine.append(run_id)
        self.export()
        return run_id

    def add_artifacts(self, artifacts) -> None:
        """A finished run's kept files ([store] artifacts): in the export too, imported with the run."""
        super().add_artifacts(artifacts)
        self.export()

    def finish_run(self, run_id: str, status: str, *args, **kw) -> None:
        # the pipeline's final extra/log_paths replace the begun ones: keep the job's stamp in them
        kw = self._stamped({k: v for k, v in kw.items() if v is not None or k not in ("extra", "log_paths")})
        super().finish_run(run_id, status, *args, **kw)
        self.export()


@dataclass(frozen=True)
class SweepJob:
    """What the submitting side hands to the node (pickled by submitit)."""

    recipes: list  # toolkit.recipe.load.Recipe values
    repeats: int | None
    until: str
    frozen: bool
    node_home: str
    strict: bool = False  # `--strict-check`: an unresolved static check refuses the recipe (exit 2)
    store_url: str | None = None  # the submitting side's PostgreSQL store: the node writes into it
    keep_going: bool = False  # a sweep's variants: one that fails to prepare leaves the others launched
    same_server: bool = False  # a sweep's chunk: a variant whose launch is an earlier one's server is not benchmarked


def _stop(signum, frame):
    raise JobStopped(signal.Signals(signum).name)


@dataclass(frozen=True)
class VariantJob:
    """One probe of a bisect / one variant of an attribution: `repeats` new values of a variant."""

    recipe: object  # toolkit.recipe.load.Recipe
    spec: object  # toolkit.analysis.variants.MetricSpec
    label: str
    overrides: dict
    repeats: int
    group_id: str
    node_home: str
    missing_evidence: bool = False  # the meter's rule (toolkit.analysis.variants.VariantMeter.rule)
    store_url: str | None = None  # as SweepJob's
    design: object | None = None  # toolkit.analysis.sequential.Design the runs are launched under (recorded)
    # a bisect's key (toolkit.analysis.search_campaign): the node hands out only stored runs of this search's
    # sweep (`group_id`), names the others (`reused`) and tags its runs with it
    search: str = ""
    handed: tuple = ()  # run ids the submitting meter has handed out already: never a value twice (top-ups)


def direct_store(store: Store) -> str | None:
    """The location a node writes into directly: the store itself when it is PostgreSQL (a URL),
    else None (SQLite: a per-job store on the node, imported when the job is over)."""
    return str(store.location) if store.engine_name == "postgresql" else None


def node_context(node_home: str, store_url: str | None = None):
    """The job's side of things: (job id, job folder, node home, its JobStore, a console).
    `store_url`: the PostgreSQL store to write into directly (else a per-job SQLite store).
    Installs the stop signals (SIGTERM from scancel, USR2 before the time limit)."""
    import submitit
    from rich.console import Console

    env = submitit.JobEnvironment()
    folder = Path(env.paths.folder)
    slurm = {"job_id": env.job_id, "node": socket.gethostname(), "log": str(env.paths.stdout),
             "folder": str(folder)}
    home = Path(os.path.expandvars(node_home)).expanduser()
    home.mkdir(parents=True, exist_ok=True)
    os.environ["PATCHBENCH_HOME"] = str(home)
    store = JobStore(store_url or home / "node-jobs" / env.job_id / "results.sqlite", export=folder / EXPORT_NAME,
                     slurm=slurm)
    from toolkit.results.engine import load_store_config

    kept = load_store_config(home).artifacts  # the node's user config (often the shared home's)
    store.artifacts_dir = Path(kept).expanduser() if kept else None
    store.export()  # an empty export: the job started
    for sig in (signal.SIGTERM, signal.SIGUSR2):
        signal.signal(sig, _stop)
    console = Console(stderr=True, highlight=False, soft_wrap=True)
    console.print(f"slurm job {env.job_id} on {slurm['node']}: node home {home}; results into {store.path}",
                  markup=False)
    return env.job_id, folder, home, store, console


def write_done(folder: Path, summary: dict) -> dict:
    tmp = folder / f".{DONE_NAME}.tmp"
    tmp.write_text(json.dumps(summary, indent=2, default=str))
    os.replace(tmp, folder / DONE_NAME)
    return summary


@contextlib.contextmanager
def node_work(job_id: str, store, console):
    """The body of a node's job: a stop (scancel, time limit) leaves the runs in progress
    interrupted and exits 143; whatever happens the node's store is exported and closed."""
    try:
        yield
    except JobStopped as exc:
        console.print(f"slurm job {job_id}: stopped by {exc} (runs in progress are left interrupted)", markup=False)
        raise SystemExit(143) from None
    finally:
        store.export()
        store.close()


def run_variant_job(job: VariantJob) -> dict:
    """On the node: measure one variant (prepare it, then `repeats` runs); values in done.json."""
    from toolkit.analysis.variants import VariantMeter

    job_id, folder, home, store, console = node_context(job.node_home, job.store_url)
    # joined: the campaign is the submitting side's sweep (`group_id`), never another one the node finds
    meter = VariantMeter(job.recipe, home, store, job.spec, console, group_id=job.group_id,
                         missing_evidence=job.missing_evidence, design=job.design, search=job.search, joined=True,
                         handed=frozenset(job.handed))
    with node_work(job_id, store, console):
        values = meter.measure(job.label, job.overrides, job.repeats)
    return write_done(folder, {"job_id": job_id, "label": job.label, "values": values, "builds": meter.builds,
                                "runs": meter.runs, "run_ids": meter._ids(job.label) if values else [],
                                "reused": list(meter.reused.get(job.label, ()))})


def run_sweep_job(job: SweepJob) -> dict:
    """The function submitit runs on the node. Returns the sweep's summary (also in done.json)."""
    from toolkit.errors import BadInput, PatchbenchError
    from toolkit.run.pipeline import run_sweep
    from toolkit.run.same_server import Guard

    job_id, folder, node_home, store, console = node_context(job.node_home, job.store_url)
    with node_work(job_id, store, console):
        try:
            result = run_sweep(job.recipes, home=node_home, store=store, repeats=job.repeats, until=job.until,
                               frozen=job.frozen, console=console, strict=job.strict,
                               keep_going=job.keep_going,
                               same_server=Guard([r.name for r in job.recipes]) if job.same_server else None)
        except PatchbenchError as exc:  # refused before any launch (bad recipe, no GPU): say so, exit 0
            console.print(f"error: {exc}", markup=False)
            result = {"group_id": None, "runs": [], "failed": [(r.name, str(exc)) for r in job.recipes],
                      "bad_input": [r.name for r in job.recipes] if isinstance(exc, BadInput) else []}
    return write_done(folder, {"job_id": job_id, "node": socket.gethostname(), "group_id": result["group_id"],
                                "runs": result["runs"], "failed": result["failed"],
                                "bad_input": result.get("bad_input", []), "same_server": result.get("same_server", {})})
