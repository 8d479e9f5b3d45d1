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
