"""The store's `interrupted` status (schema v2): a v1 file is migrated with its runs and samples."""

from __future__ import annotations

import sqlite3

from toolkit.run.bench import Sample
from toolkit.results.store import MIGRATIONS, SCHEMA_VERSION, Store


def test_v1_store_migrates_keeping_samples_and_accepts_interrupted(tmp_path):
    path = tmp_path / "old.sqlite"
    con = sqlite3.connect(path)
    con.executescript(MIGRATIONS[1] + "CREATE TABLE schema_version (version INTEGER NOT NULL);"
                      "INSERT INTO schema_version VALUES (1);"
                      "INSERT INTO runs (run_id, recipe, status) VALUES ('r1', 'a', 'ok');"
                      "INSERT INTO samples (run_id, metric, value, unit, point, point_kind) "
                      "VALUES ('r1', 'output_tok_s', 10.0, 'tok/s', 1, 'concurrency');")
    con.commit()
    con.close()
    store = Store(path)
    assert store.schema_version() == SCHEMA_VERSION == 4
    assert store.get_run("r1").identity == "unknown"  # no benchmark key stored: never counts
    assert [s.value for s in store.samples("r1")] == [10.0]
    rid = store.begin_run(recipe="b")
    store.add_samples(rid, [Sample("output_tok_s", 5.0, "tok/s", 1, "concurrency")])
    store.finish_run(rid, "interrupted", error="slurm job 7 ended CANCELLED")
    assert store.get_run(rid).status == "interrupted" and store.runs(status="interrupted")[0].run_id == rid
    con = sqlite3.connect(path)
    con.execute("PRAGMA foreign_keys = ON")
    assert con.execute("PRAGMA foreign_key_check").fetchall() == []  # the rebuilt table is what samples name
    con.close()


def test_a_sqlite_jobs_kept_files_reach_the_main_store_with_its_runs(tmp_path):
    """A Slurm job on a SQLite store ([store] artifacts set): its export carries each run's kept files
    by path and sha256 as soon as they are kept, and the import records them beside the run."""
    import json

    from toolkit.executors.job import JobStore
    from toolkit.results.artifacts import check, keep
    from toolkit.results.exchange import import_export

    job = JobStore(tmp_path / "job.sqlite", export=tmp_path / "export.json",
                   slurm={"job_id": "7", "node": "n1", "log": str(tmp_path / "7.out"), "folder": str(tmp_path)})
    rid = job.begin_run(recipe="a")
    job.finish_run(rid, "ok", samples=[Sample("output_tok_s", 5.0, "tok/s", 1, "concurrency")])
    run_dir = tmp_path / "runs" / rid
    run_dir.mkdir(parents=True)
    (run_dir / "quality.json").write_text('{"points": {}}')
    kept = keep(job, rid, run_dir, tmp_path / "shared")
    (exported,) = json.loads((tmp_path / "export.json").read_text())["runs"]
    assert [(a["name"], a["sha256"]) for a in exported["artifacts"]] == [("quality.json", kept[0].sha256)]
    main = Store(tmp_path / "main.sqlite")
    assert import_export(main, tmp_path / "export.json", measured_here=True) == 1
    assert [(a.name, a.state) for a in check(main, [rid])] == [("quality.json", "ok")]
