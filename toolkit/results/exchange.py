"""Results in and out of the store: JSON/CSV export, re-import of an export, and the content hash
that makes every import idempotent.

An import records where its runs came from in `extra["imported"]` = {"from": path, "file_sha256":
sha256 of the file's bytes, "rows_sha256": sha256 of its parsed rows}. Importing a file whose bytes
or rows were imported before stores nothing and names the run it became (`AlreadyImported`);
a patchbench export is re-imported run by run (a run id already stored is skipped).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import os
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any

from toolkit.errors import BadInput, PatchbenchError
from toolkit.results.artifacts import Artifact
from toolkit.results.records import RUN_FIELDS, SAMPLE_FIELDS, SampleRow, _now, canonical_json
from toolkit.results.store import SCHEMA_VERSION, RunExists, Store

EXPORT_FORMAT = "patchbench-results"
EXPORT_FORMATS = ("json", "csv", "hud")
CSV_COLUMNS = ("run_id", "recipe", "status", "group_id", "run_repeat", "env_key", "bench_key",
               "gpu_key", "sglang_version", "flashinfer_version", "config_verified", "started_at",
               "finished_at", "metric", "value", "unit", "point", "point_kind", "repeat")


def content_hashes(path: Path, rows: list) -> dict:
    """{"file_sha256", "rows_sha256"} of an imported file and of its parsed rows (so the same rows
    re-serialised are recognised too)."""
    return {"file_sha256": hashlib.sha256(Path(path).read_bytes()).hexdigest(),
            "rows_sha256": hashlib.sha256(canonical_json(rows).encode()).hexdigest()}


def already_imported(store: Store, hashes: dict) -> list:
    """The runs stored from a file with the same bytes or rows (empty when none)."""
    return store.imported_runs(file_sha256=hashes["file_sha256"], rows_sha256=hashes["rows_sha256"])


def _export_text(store: Store, fmt: str, **filters: Any) -> tuple[str, int]:
    if fmt == "hud":  # ok runs unless a status is asked for (toolkit/results/hud.py)
        from toolkit.results import hud

        runs = store.runs(**{**filters, "status": filters.get("status") or "ok"})
        samples = store.samples([r.run_id for r in runs])
        recs = hud.records(runs, samples)  # runs with no samples (failed before measuring) give no record
        return json.dumps(recs, indent=1, ensure_ascii=False) + "\n", len({s.run_id for s in samples})
    runs = store.runs(**filters)
    by_run: dict[str, list[SampleRow]] = {r.run_id: [] for r in runs}
    for s in store.samples([r.run_id for r in runs]):
        by_run[s.run_id].append(s)
    if fmt == "json":
        kept: dict[str, list[dict]] = {r.run_id: [] for r in runs}
        for a in store.artifacts([r.run_id for r in runs]):
            kept[a.run_id].append({"name": a.name, "path": a.path, "sha256": a.sha256, "size": a.size})
        doc = {
            "format": EXPORT_FORMAT,
            "schema_version": SCHEMA_VERSION,
            "exported_at": _now(),
            "runs": [dict(r.to_dict(), samples=[
                {k: v for k, v in asdict(s).items() if k != "run_id"} for s in by_run[r.run_id]
            ], artifacts=kept[r.run_id]) for r in runs],
        }
        return json.dumps(doc, indent=2, sort_keys=False, ensure_ascii=False, default=str) + "\n", len(runs)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for r in runs:
        head = [r.run_id, r.recipe, r.status, r.group_id or "", r.repeat, r.env_key or "",
                r.bench_key or "", r.gpu_key, r.sglang_version or "", r.flashinfer_version or "",
                "" if r.config_verified is None else int(r.config_verified), r.started_at or "",
                r.finished_at or ""]
        if not by_run[r.run_id]:
            w.writerow(head + [""] * 6)
        for s in by_run[r.run_id]:
            w.writerow(head + [s.metric, repr(s.value), s.unit, s.point, s.point_kind, s.repeat])
    return buf.getvalue(), len(runs)


def export(store: Store, fmt: str, out: Path | str | IO[str], *, require_runs: bool = False, **filters: Any) -> int:
    """Write the runs matching `filters` (as for `Store.runs`) to `out` (a path or a text stream).

    "json": {"format", "schema_version", "exported_at", "runs": [{...run, "samples": [...],
    "artifacts": [{name, path, sha256, size}]}]}, everything stored (a run's kept files by their
    records: the files stay where they are), re-importable with `import_export`. "csv": one row per sample (a run
    without samples gets one row with empty sample columns), the run's identity columns
    repeated. "hud": PyTorch HUD v3 benchmark records (toolkit/results/hud.py), a JSON list, one
    record per configuration, metric and point, the repeats as values; ok runs unless `status` is
    given. Returns the number of runs written. `require_runs`: no run to write is an error (PatchbenchError,
    nothing written), not a file that holds only a header.
    """
    if fmt not in EXPORT_FORMATS:
        raise BadInput(f"export format must be one of {', '.join(EXPORT_FORMATS)}, not {fmt}")
    if isinstance(out, (str, Path)) and Path(out).is_dir():
        raise BadInput(f"--output {out} is a directory: give the export file's path")
    text, n = _export_text(store, fmt, **filters)
    if require_runs and not n:
        raise PatchbenchError(f"nothing to export: {_none_matched(fmt, filters)} in {store.path}",
                              hint="`patchbench results` lists what is stored")
    if isinstance(out, (str, Path)):
        p = Path(out)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(p.name + f".tmp{os.getpid()}")
        try:
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, p)
        finally:
            tmp.unlink(missing_ok=True)
    else:
        out.write(text)
    return n


def _none_matched(fmt: str, filters: dict) -> str:
    status = filters.get("status") or ("ok" if fmt == "hud" else None)
    status = "/".join(status) if isinstance(status, (list, tuple)) else status
    recipes = filters.get("recipe")
    recipes = ", ".join(recipes) if isinstance(recipes, (list, tuple)) else recipes
    what = " ".join(x for x in (f"no {status}" if status else "no", "runs") if x)
    what += f" of {recipes}" if recipes else ""
    what += f" in group {filters['group_id']}" if filters.get("group_id") else ""
    return what + (" with samples (a HUD record is a measured value)" if fmt == "hud" else "")


def check_export_runs(runs, src) -> None:
    """BadInput naming the first run (index, id) of an export whose record cannot be stored as it is:
    a run that is not an object, without a string run_id, of an unknown status, or a sample whose metric is
    not a string or whose value is not a finite number."""
    from toolkit.results.store import STATUSES

    if not isinstance(runs, list):
        raise BadInput(f"{src}: `runs` must be a list of run records")
    for i, r in enumerate(runs):
        where = f"{src}: run {i}"
        if not isinstance(r, dict) or not isinstance(r.get("run_id"), str) or not r.get("run_id"):
            raise BadInput(f"{where}: a run record must be an object with a string run_id")
        where += f" ({r['run_id'][:8]})"
        if r.get("status", "ok") not in STATUSES:
            raise BadInput(f"{where}: status {r.get('status')!r} is not one of {', '.join(STATUSES)}")
        samples = r.get("samples", [])
        if not isinstance(samples, list):
            raise BadInput(f"{where}: `samples` must be a list")
        for j, smp in enumerate(samples):
            v = smp.get("value") if isinstance(smp, dict) else None
            if not isinstance(smp, dict) or not isinstance(smp.get("metric"), str) or isinstance(v, bool) \
                    or not isinstance(v, (int, float)) or not math.isfinite(v) \
                    or not isinstance(smp.get("point"), int) or set(smp) != set(SAMPLE_FIELDS) - {"run_id"}:
                raise BadInput(f"{where}: sample {j} must have {', '.join(f for f in SAMPLE_FIELDS if f != 'run_id')}: "
                               f"a string metric, a finite number value, a whole number point (got {str(smp)[:120]})")
        for a in r.get("artifacts") or []:
            if not isinstance(a, dict) or not {"name", "path", "sha256", "size"} <= set(a):
                raise BadInput(f"{where}: an artifact record needs name, path, sha256 and size")


def import_export(store: Store, src: Path | str | IO[str], *, measured_here: bool = False) -> int:
    """Record the runs of a JSON export that `store` does not have yet (by run id), each in its own
    transaction, marked as imported. Returns the number imported. `measured_here`: the runs are this
    campaign's own (a Slurm job's export, a SQLite store moved into the team's: `import --own`), not
    another machine's numbers: not marked imported, and a run an earlier import of the file marked imported
    loses the mark (kept as `extra.moved_from`; counted in the number returned)."""
    try:
        if isinstance(src, (str, Path)):
            doc = json.loads(Path(src).read_text(encoding="utf-8"))
        else:
            doc = json.load(src)
    except (OSError, ValueError) as e:
        raise BadInput(f"cannot read results export {src}: {e}") from None
    if not isinstance(doc, dict) or doc.get("format") != EXPORT_FORMAT:
        raise BadInput(f"{src} is not a patchbench results export")
    if int(doc.get("schema_version", 0)) > SCHEMA_VERSION:
        raise BadInput(f"{src} has schema version {doc['schema_version']}, newer than {SCHEMA_VERSION}")
    check_export_runs(doc.get("runs", []), src)  # all of it, before the first run is stored: never half an import
    have = {r.run_id: r for r in store.runs(run_ids=[r["run_id"] for r in doc.get("runs", [])])}
    n = 0
    for r in doc.get("runs", []):
        # a run the store holds unfinished and without samples (the database went away while it was measured):
        # this record, kept on the measuring disk, completes it, as this store's own measurement (record_run
        # decides inside its transaction; any other stored run is RunExists, skipped below)
        complete = r["run_id"] in have
        if complete and have[r["run_id"]].status not in ("running", "interrupted"):
            n += measured_here and _own(store, have[r["run_id"]], r)
            continue
        samples = [SampleRow(run_id=r["run_id"], **s) for s in r.get("samples", [])]
        fields_ = {k: v for k, v in r.items() if k in RUN_FIELDS}
        extra = dict(fields_.get("extra") or {})
        if not measured_here and not complete:
            extra.setdefault("imported", {"from": str(src), "exported_at": doc.get("exported_at")})
        fields_["extra"] = extra
        kept = [Artifact(r["run_id"], a["name"], a["path"], a["sha256"], int(a["size"])) for a in r.get("artifacts") or []]
        try:
            store.record_run(fields_, samples, kept, complete=complete)
        except RunExists:  # another import stored it a moment ago: it is there, once
            continue
        n += 1
    return n


def _own(store: Store, stored, record: dict) -> bool:
    """A run an earlier import of this export marked imported (measured elsewhere), now imported as this
    store's own (`measured_here`): the mark becomes `moved_from`, so it counts as a run stored directly.
    A run that was imported already where it was exported (its own record says so) stays imported."""
    mark = (stored.extra or {}).get("imported")
    if not mark or (record.get("extra") or {}).get("imported") or (stored.machine or {}).get("imported_from"):
        return False
    extra = {k: v for k, v in stored.extra.items() if k != "imported"}
    store.add_samples(stored.run_id, [], extra={**extra, "moved_from": mark})
    return True
