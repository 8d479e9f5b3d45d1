"""The jobs table of the submitting side: one JSON file per Slurm job under `HOME/slurm/jobs/`,
its state as the scheduler reports it, and the import of its runs once it is over (exactly once).

A job's runs arrive as the JSON export its node wrote into the job's folder
(toolkit/executors/job.py), or, with a PostgreSQL store, are in the store already (the node wrote
them there; the export names them). Importing is idempotent twice over: the record says `imported`, and the
store skips run ids it already has; a lock file keeps two importers (a waiting `run` and a
`results --jobs`) from racing. A run still `running` in the export was cut short by the job's end:
it is stored `interrupted`, with the Slurm job id, the job's final state and the path of its log.
A job that ends before its first run began leaves one `interrupted` record per recipe.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

from filelock import FileLock

from toolkit.results.exchange import EXPORT_FORMAT, import_export

from toolkit.results.store import SCHEMA_VERSION, Store

# Slurm job states after which nothing more happens (squeue/sacct names).
TERMINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY",
            "BOOT_FAIL", "DEADLINE", "REVOKED", "SPECIAL_EXIT", "GONE")
EXPORT_NAME = "runs.json"
DONE_NAME = "done.json"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass(frozen=True)
class JobRecord:
    job_id: str
    recipes: list
    folder: str  # the job's folder (submitit's), shared with the node
    log: str  # the job's stdout/stderr log
    command: str = "run"
    state: str = "PENDING"
    node: str | None = None
    submitted_at: str = field(default_factory=_now)
    updated_at: str = field(default_factory=_now)
    imported: bool = False
    imported_runs: int = 0
    stored_by_job: bool = False  # the job wrote its runs into the shared store itself (nothing imported)
    interrupted_runs: int = 0

    @property
    def over(self) -> bool:
        return self.state.split()[0] in TERMINAL


def jobs_dir(home: Path) -> Path:
    return home / "slurm" / "jobs"


def save(home: Path, rec: JobRecord) -> JobRecord:
    d = jobs_dir(home)
    d.mkdir(parents=True, exist_ok=True)
    rec = replace(rec, updated_at=_now())
    tmp = d / f".{rec.job_id}.json.tmp{os.getpid()}"
    tmp.write_text(json.dumps(asdict(rec), indent=2))
    os.replace(tmp, d / f"{rec.job_id}.json")
    return rec


def load(home: Path, job_id: str) -> JobRecord:
    return JobRecord(**json.loads((jobs_dir(home) / f"{job_id}.json").read_text()))


def load_all(home: Path) -> list[JobRecord]:
    d = jobs_dir(home)
    recs = [JobRecord(**json.loads(p.read_text())) for p in d.glob("*.json")] if d.is_dir() else []
    return sorted(recs, key=lambda r: (r.submitted_at, int(r.job_id) if r.job_id.isdigit() else 0))


def _query(argv: list[str]) -> str | None:
    if not shutil.which(argv[0]):
        return None
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


def slurm_state(job_id: str, folder: Path) -> tuple[str, str | None]:
    """(state, node) from squeue (jobs it still lists, finished ones included), else sacct, else
    the job's folder: a done.json means COMPLETED; nothing means GONE (it ended without a word)."""
    out = _query(["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T|%N"])
    if out and out.strip():
        state, _, node = out.strip().splitlines()[0].partition("|")
        return state.strip(), node.strip() or None
    out = _query(["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State,NodeList"])
    if out and out.strip():
        state, _, node = out.strip().splitlines()[0].partition("|")
        return state.split()[0], node.strip() or None
    if (folder / DONE_NAME).is_file():
        return "COMPLETED", None
    return "GONE", None


def _read_export(folder: Path) -> list[dict]:
    try:
        doc = json.loads((folder / EXPORT_NAME).read_text())
    except (OSError, ValueError):
        return []
    return list(doc.get("runs", []))


def _interrupted(run: dict, rec: JobRecord) -> dict:
    why = f"interrupted: slurm job {rec.job_id} ended {rec.state} before the run finished; log: {rec.log}"
    extra = dict(run.get("extra") or {})
    extra.setdefault("slurm", {"job_id": rec.job_id, "log": rec.log, "folder": rec.folder})
    extra["slurm"]["final_state"] = rec.state
    return {**run, "status": "interrupted", "error": why, "finished_at": run.get("finished_at") or _now(),
            "extra": extra, "log_paths": {**(run.get("log_paths") or {}), "slurm_job": rec.log}}


def _placeholder(recipe, rec: JobRecord) -> dict:
    """The record of a sweep that died before its first run of `recipe` began."""
    return {"run_id": f"slurm-{rec.job_id}-{recipe}", "recipe": recipe, "status": "interrupted",
            "error": f"interrupted: slurm job {rec.job_id} ended {rec.state} before any run of {recipe} began; "
                     f"log: {rec.log}",
            "host": rec.node, "finished_at": _now(), "log_paths": {"slurm_job": rec.log},
            "extra": {"slurm": {"job_id": rec.job_id, "log": rec.log, "folder": rec.folder,
                                "final_state": rec.state}}, "samples": []}


def run_ids(rec: JobRecord) -> list[str]:
    """The ids of the runs a job left (its export, and the records of recipes it never began)."""
    runs = _read_export(Path(rec.folder))
    began = {r["recipe"] for r in runs}
    return [r["run_id"] for r in runs] + [f"slurm-{rec.job_id}-{n}" for n in rec.recipes if n not in began]


def merge(home: Path, store: Store, rec: JobRecord) -> JobRecord:
    """Import the runs of a job that is over into `store`, exactly once. Returns the new record."""
    with FileLock(str(jobs_dir(home) / f"{rec.job_id}.lock")):
        rec = load(home, rec.job_id)
        if rec.imported:
            return rec
        runs = _read_export(Path(rec.folder))
        out = [_interrupted(r, rec) if r.get("status") in ("running", "interrupted") else r for r in runs]
        began = {r["recipe"] for r in runs}
        done = (Path(rec.folder) / DONE_NAME).is_file()
        if not done:
            out += [_placeholder(name, rec) for name in rec.recipes if name not in began]
        doc = {"format": EXPORT_FORMAT, "schema_version": SCHEMA_VERSION, "runs": out}
        ids = [r["run_id"] for r in out]
        direct = {r.run_id for r in store.runs(run_ids=ids)}  # written by the node itself
        import_export(store, io.StringIO(json.dumps(doc, default=str)), measured_here=True)
        for r in out:  # a run the node wrote directly and the job's end cut short: the job's end says why
            if r["run_id"] in direct and r["status"] == "interrupted":
                stored = store.get_run(r["run_id"])
                if stored.status in ("running", "interrupted"):
                    extra = dict(stored.extra or {})
                    extra["slurm"] = {**(extra.get("slurm") or {}), **r["extra"]["slurm"]}
                    store.finish_run(r["run_id"], "interrupted", error=r["error"], extra=extra,
                                     log_paths={**(stored.log_paths or {}), "slurm_job": rec.log})
        rec = replace(rec, imported=True, imported_runs=len(store.runs(run_ids=ids)), stored_by_job=bool(direct),
                      interrupted_runs=sum(1 for r in out if r["status"] == "interrupted"))
        return save(home, rec)


def refresh(home: Path, store: Store, job_ids: list[str] | None = None) -> list[tuple[JobRecord, JobRecord]]:
    """Ask the scheduler about every job not imported yet (or only `job_ids`); import those that are
    over. Returns (before, after) for each job whose state changed or that was imported."""
    changed = []
    for rec in load_all(home):
        if rec.imported or (job_ids is not None and rec.job_id not in job_ids):
            continue
        state, node = slurm_state(rec.job_id, Path(rec.folder))
        new = rec
        if state != rec.state or (node and node != rec.node):
            new = save(home, replace(rec, state=state, node=node or rec.node))
        if new.over:
            new = merge(home, store, new)
        if new != rec:
            changed.append((rec, new))
    return changed
