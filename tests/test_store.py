"""The results store: schema, round trip, export/import, concurrent writers, killed writers."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from toolkit.run.bench import Sample
from toolkit.errors import BadInput, PatchbenchError
from toolkit.results.exchange import export, import_export
from toolkit.results.store import SCHEMA_VERSION, RunRow, Store, bench_key, gpu_key

REPO_ROOT = Path(__file__).resolve().parent.parent

MACHINE = {"gpus": [{"name": "NVIDIA RTX PRO 6000", "uuid": f"GPU-{i}"} for i in range(8)],
           "driver": "580.65", "cuda": "13.0", "topology": "GPU0 X", "cpu": "EPYC", "host": "box"}


def full_fields(**over):
    f = dict(
        recipe="glm5-ep8",
        recipe_resolved={"name": "glm5-ep8", "server": {"args": {"tp-size": 8, "ep-size": 8}}},
        lock={"sources": {"sglang": {"rev": "v0.5.10.post1"}}},
        tree_hashes={"sglang": "a" * 40, "flashinfer": "b" * 40},
        env_key="env123",
        sglang_version="0.5.10.post1",
        flashinfer_version="0.6.7.post3",
        arch_list=["12.0a"],
        bench_driver="serving",
        bench_params={"input_len": 128, "output_len": 256, "points": [1, 8], "seed": 1},
        server_argv=["-m", "sglang.launch_server", "--tp-size", "8", "--ep-size", "8"],
        machine=MACHINE,
        env_vars={"FLASHINFER_CUDA_ARCH_LIST": "12.0a"},
        repeat=2,
        group_id="g1",
        log_paths={"server": "/tmp/x/server.log"},
        extra={"patches": {"sglang": ["0001-oea.patch"]}},
    )
    f.update(over)
    return f


SAMPLES = [Sample("output_tok_s", 10.5, "tok/s", 1, "concurrency"),
           Sample("output_tok_s", 61.25, "tok/s", 8, "concurrency"),
           Sample("ttft_ms_mean", 120.0, "ms", 1, "concurrency")]


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "results.sqlite")
    yield s
    s.close()


def test_schema_wal_and_version(store):
    assert store.schema_version() == SCHEMA_VERSION
    con = sqlite3.connect(store.path)
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"schema_version", "runs", "samples"} <= tables
    assert con.execute("SELECT COUNT(*) FROM schema_version").fetchone()[0] == 1
    con.close()
    # reopening does not migrate twice
    again = Store(store.path)
    assert again.schema_version() == SCHEMA_VERSION and again.runs() == []


def test_newer_schema_is_refused(tmp_path):
    p = tmp_path / "r.sqlite"
    Store(p).runs()
    con = sqlite3.connect(p)
    con.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 1,))
    con.commit()
    con.close()
    with pytest.raises(PatchbenchError, match="newer"):
        Store(p).runs()


def test_not_a_database_is_one_line_error(tmp_path):
    p = tmp_path / "r.sqlite"
    p.write_text("this is not sqlite " * 100)
    with pytest.raises(PatchbenchError, match="results store"):
        Store(p).runs()


def test_round_trip(store):
    rid = store.begin_run(**full_fields())
    run = store.get_run(rid)
    assert run.status == "running" and run.pid == os.getpid() and run.host
    assert run.display_status() == "running" and not run.is_interrupted()
    assert run.gpu_key == "8x NVIDIA RTX PRO 6000"
    assert run.bench_key == bench_key("serving", full_fields()["bench_params"])
    store.add_samples(rid, SAMPLES[:1])
    store.finish_run(rid, "ok", samples=SAMPLES[1:], config_verified=True,
                     verification=["/server_info matches"], server_info={"tp_size": 8, "version": "0.5.10"},
                     timings={"launch": 41.5}, log_tail="ready\n")
    run = store.get_run(rid[:8])
    f = full_fields()
    for k in ("recipe", "recipe_resolved", "lock", "tree_hashes", "env_key", "sglang_version",
              "flashinfer_version", "arch_list", "bench_driver", "bench_params", "server_argv", "machine",
              "env_vars", "repeat", "group_id", "log_paths", "extra"):
        assert getattr(run, k) == f[k], k
    assert run.status == "ok" and run.config_verified is True
    assert run.verification == ["/server_info matches"]
    assert run.server_info == {"tp_size": 8, "version": "0.5.10"}
    assert run.timings == {"launch": 41.5} and run.log_tail == "ready\n"
    assert run.finished_at >= run.started_at
    got = store.samples([rid])
    assert [(s.metric, s.value, s.unit, s.point, s.point_kind, s.repeat) for s in got] == [
        (s.metric, s.value, s.unit, s.point, s.point_kind, 2) for s in SAMPLES]
    assert store.samples(rid, metric="ttft_ms_mean")[0].value == 120.0
    # filters
    assert [r.run_id for r in store.runs(recipe=["glm5-ep8", "x"], status="ok", env_key="env123")] == [rid]
    assert store.runs(recipe="other") == [] and store.runs(status=["failed"]) == []
    assert store.runs(config_verified=True)[0].run_id == rid
    assert store.counts() == {"ok": 1}


def test_bench_key_ignores_only_incidental_params():
    base = {"input_len": 128, "output_len": 256, "points": [1, 8], "seed": 1, "warmup": 2}
    assert bench_key("serving", base) == bench_key("serving", {**base, "port": 30001, "timeout_s": 9})
    assert bench_key("serving", base) != bench_key("serving", {**base, "input_len": 256})
    assert bench_key("serving", base) != bench_key("one-batch", base)
    assert bench_key("serving", base) != bench_key("serving", {**base, "warmup": 0})


def test_gpu_key():
    assert gpu_key({}) == "none" and gpu_key({"gpus": []}) == "none"
    assert gpu_key({"gpus": [{"name": "B"}, {"name": "A"}, {"name": "B"}]}) == "1x A + 2x B"
    assert gpu_key({"gpu_key": "8x X", "gpus": []}) == "8x X"


def test_validation(store):
    with pytest.raises(TypeError, match="nonsense"):
        store.begin_run(recipe="a", nonsense=1)
    rid = store.begin_run(recipe="a")
    with pytest.raises(ValueError):
        store.finish_run(rid, "running")
    with pytest.raises(ValueError, match="point_kind"):
        store.add_samples(rid, [_BadKind()])
    with pytest.raises(ValueError, match="finite"):
        store.add_samples(rid, [Sample("x", float("nan"), "s", 1, "batch")])
    assert store.samples([rid]) == []  # the failed transactions left nothing behind
    with pytest.raises(PatchbenchError, match="no run"):
        store.finish_run("nope", "ok")
    with pytest.raises(BadInput, match="no run"):
        store.get_run("zzz")
    rid2 = store.record_run({"recipe": "b", "run_id": rid + "-2"})
    with pytest.raises(PatchbenchError, match="already exists"):
        store.record_run({"recipe": "b", "run_id": rid2})


def test_a_run_kept_on_disk_when_the_store_went_away_completes_its_row_on_import(store, tmp_path):
    """The database went away mid-run: the store holds the row begun for it (running, no samples), the
    measuring disk its record (run.json, samples kept). `import` of that record completes the row, as this
    store's own measurement (not marked imported); again, nothing; a row that has samples is never replaced."""
    from toolkit.results.exchange import EXPORT_FORMAT
    from toolkit.results.store import RunExists

    rid = store.begin_run(**full_fields())
    run = {**full_fields(), "run_id": rid, "status": "ok", "config_verified": True,
           "samples": [dict(metric=s.metric, value=s.value, unit=s.unit, point=s.point, point_kind=s.point_kind,
                            repeat=0) for s in SAMPLES]}
    kept = tmp_path / "run.json"
    kept.write_text(json.dumps({"format": EXPORT_FORMAT, "schema_version": SCHEMA_VERSION, "runs": [run]}, default=str))
    assert import_export(store, kept) == 1
    row = store.get_run(rid)
    assert row.status == "ok" and not row.imported and len(store.samples([rid])) == len(SAMPLES)
    assert import_export(store, kept) == 0 and len(store.samples([rid])) == len(SAMPLES)
    with pytest.raises(RunExists):
        store.record_run({**full_fields(), "run_id": rid}, SAMPLES, complete=True)


class _BadKind:
    metric, value, unit, point, point_kind = "x", 1.0, "s", 1, "sequence"


def test_export_json_csv_and_import(store, tmp_path):
    ids = []
    for rep in range(3):
        ids.append(store.record_run(full_fields(repeat=rep, config_verified=True, status="ok"), SAMPLES))
    failed = store.record_run({"recipe": "broken", "status": "failed", "error": "server exited 1"})
    assert export(store, "json", tmp_path / "out" / "r.json") == 4
    doc = json.loads((tmp_path / "out" / "r.json").read_text())
    assert doc["format"] == "patchbench-results" and doc["schema_version"] == SCHEMA_VERSION
    assert [len(r["samples"]) for r in doc["runs"]] == [3, 3, 3, 0]

    other = Store(tmp_path / "other.sqlite")
    assert import_export(other, tmp_path / "out" / "r.json") == 4
    assert import_export(other, tmp_path / "out" / "r.json") == 0  # idempotent
    import dataclasses

    assert all(r.imported for r in other.runs())  # marked: never mistaken for a measurement here
    assert [dataclasses.replace(r, extra={k: v for k, v in r.extra.items() if k != "imported"})
            for r in other.runs()] == store.runs()
    assert other.samples(ids + [failed]) == store.samples(ids + [failed])

    buf = io.StringIO()
    assert export(store, "csv", buf, recipe="glm5-ep8") == 3
    rows = list(csv.DictReader(io.StringIO(buf.getvalue())))
    assert len(rows) == 9
    assert {r["run_id"] for r in rows} == set(ids)
    r0 = rows[0]
    assert (r0["metric"], float(r0["value"]), r0["unit"], r0["point"], r0["point_kind"]) == (
        "output_tok_s", 10.5, "tok/s", "1", "concurrency")
    assert r0["gpu_key"] == "8x NVIDIA RTX PRO 6000" and r0["config_verified"] == "1"
    buf = io.StringIO()
    export(store, "csv", buf, status="failed")
    rows = list(csv.DictReader(io.StringIO(buf.getvalue())))
    assert len(rows) == 1 and rows[0]["metric"] == "" and rows[0]["status"] == "failed"
    with pytest.raises(BadInput):
        export(store, "xml", buf)


WRITER = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {root!r})
    from toolkit.run.bench import Sample
    from toolkit.results.store import Store
    path, tag, n, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    store = Store(path)
    samples = [Sample("output_tok_s", float(k), "tok/s", k, "concurrency") for k in (1, 2, 4)]
    store.runs()  # connected
    print("ready", flush=True)
    sys.stdin.readline()  # both writers start together
    for i in range(n):
        if mode == "whole":
            rid = store.record_run({{"recipe": tag, "repeat": i}}, samples)
        else:  # the pipeline's way: begin, samples, finish (three transactions)
            rid = store.begin_run(recipe=tag, repeat=i)
            store.add_samples(rid, samples[:1])
            store.finish_run(rid, "ok", samples=samples[1:])
        print(rid, flush=True)  # acknowledged: committed before this line
        time.sleep(0.001)  # paced like real runs, so that neither writer starves the other
""").format(root=str(REPO_ROOT))


def test_two_writers_one_killed_loses_no_committed_row(tmp_path):
    path = tmp_path / "results.sqlite"
    Store(path).runs()  # create the schema once (concurrent creation is exercised below too)
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    n = 500
    a = subprocess.Popen([sys.executable, str(script), str(path), "A", str(n), "steps"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    b = subprocess.Popen([sys.executable, str(script), str(path), "B", str(n), "whole"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert a.stdout.readline().strip() == "ready" and b.stdout.readline().strip() == "ready"
        for p in (a, b):
            p.stdin.write("go\n")
            p.stdin.flush()
        acked_b = []
        while len(acked_b) < n // 2:  # kill B midway, while A still writes
            line = b.stdout.readline()
            assert line, "writer B stopped early"
            acked_b.append(line.strip())
        b.send_signal(signal.SIGKILL)
        b.wait(timeout=30)
        acked_b += [x.strip() for x in b.stdout.read().splitlines()]  # lines printed before death
        out_a, _ = a.communicate(timeout=60)
    finally:
        for p in (a, b):
            if p.poll() is None:
                p.kill()
                p.wait()
    # the writers really overlapped in time
    times_a = [r.started_at for r in Store(path).runs(recipe="A")]
    times_b = [r.started_at for r in Store(path).runs(recipe="B")]
    assert min(times_a) < max(times_b) and min(times_b) < max(times_a)
    assert a.returncode == 0 and b.returncode == -signal.SIGKILL
    acked_a = out_a.split()
    assert len(acked_a) == n
    assert n // 2 <= len(acked_b) < n

    store = Store(path)
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    con.close()
    runs_a = store.runs(recipe="A")
    runs_b = store.runs(recipe="B")
    assert {r.run_id for r in runs_a} == set(acked_a)
    assert all(r.status == "ok" for r in runs_a)
    ok_b = [r for r in runs_b if r.status == "ok"]
    # every acknowledged run is there; at most the one in flight when the kill came is extra
    assert set(acked_b) <= {r.run_id for r in ok_b}
    assert len(acked_b) <= len(ok_b) <= len(acked_b) + 1
    assert not [r for r in runs_b if r.status != "ok"]  # record_run: all or nothing
    # transactions are atomic: each finished run has all its samples
    per_run = {}
    for s in store.samples([r.run_id for r in runs_a + ok_b]):
        per_run[s.run_id] = per_run.get(s.run_id, 0) + 1
    assert set(per_run.values()) == {3} and len(per_run) == len(runs_a) + len(ok_b)
    # and the store still takes writes (no lock left behind by the dead writer)
    store.record_run({"recipe": "after"}, SAMPLES)
    assert len(store.runs(recipe="after")) == 1


def test_killed_writer_run_reads_interrupted(tmp_path):
    path = tmp_path / "results.sqlite"
    code = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(REPO_ROOT)!r})
        from toolkit.results.store import Store
        print(Store({str(path)!r}).begin_run(recipe="slow"), flush=True)
        time.sleep(60)
    """)
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        rid = p.stdout.readline().strip()
        store = Store(path)
        assert store.get_run(rid).display_status() == "running"
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=10)
        deadline = time.monotonic() + 5
        while store.get_run(rid).display_status() != "interrupted" and time.monotonic() < deadline:
            time.sleep(0.05)
        run = store.get_run(rid)
        assert run.status == "running" and run.display_status() == "interrupted" and run.is_interrupted()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    # a run recorded on another host cannot be checked: shown as running there
    other = RunRow(run_id="x", recipe="r", status="running", pid=1, host="elsewhere.example")
    assert other.display_status() == "running (on elsewhere.example)"


def test_concurrent_schema_creation(tmp_path):
    """Several processes opening a brand-new store at once all succeed."""
    path = tmp_path / "new" / "results.sqlite"
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(REPO_ROOT)!r})
        from toolkit.results.store import Store
        Store({str(path)!r}).record_run({{"recipe": "x"}}, [])
    """)
    procs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(4)]
    assert [p.wait(timeout=60) for p in procs] == [0, 0, 0, 0]
    s = Store(path)
    assert s.schema_version() == SCHEMA_VERSION and len(s.runs()) == 4


def test_fork_reopens_connection(tmp_path):
    """A Store used before fork() works in the child (own connection) and in the parent."""
    import multiprocessing as mp

    store = Store(tmp_path / "r.sqlite")
    store.record_run({"recipe": "parent"})
    ctx = mp.get_context("fork")
    proc = ctx.Process(target=_child_write, args=(store,))
    proc.start()
    proc.join(30)
    assert proc.exitcode == 0
    store.record_run({"recipe": "parent"})
    assert sorted(r.recipe for r in store.runs()) == ["child", "parent", "parent"]


def _child_write(store: Store) -> None:
    store.record_run({"recipe": "child"}, SAMPLES)


def test_v2_store_gets_run_identities_from_its_stored_fields(tmp_path):
    """Migration to schema 3: a run stored before identities gets the one its fields give; two runs
    that differ only in a server argument get different ones, and flag order does not matter."""
    import sqlite3

    from toolkit.results.schema import MIGRATIONS as M

    path = tmp_path / "v2.sqlite"
    con = sqlite3.connect(path)
    con.executescript(M[1] + ";" + "CREATE TABLE schema_version (version INTEGER NOT NULL);"
                      "INSERT INTO schema_version VALUES (1);")
    for stmt in M[2].split(";"):
        if stmt.strip():
            con.execute(stmt)
    con.execute("UPDATE schema_version SET version = 2")
    argv = '["-m","sglang.launch_server","--host","h","--port","1","--tp-size","1","--x"]'
    other = '["-m","sglang.launch_server","--x","--tp-size","1","--port","2"]'
    slow = '["-m","sglang.launch_server","--tp-size","1","--x","--mini-step-base-ms","30"]'
    for rid, a in (("r1", argv), ("r2", other), ("r3", slow)):
        con.execute("INSERT INTO runs (run_id, recipe, status, env_key, bench_key, server_argv) "
                    "VALUES (?, 'a', 'ok', 'e', 'b', ?)", (rid, a))
    con.commit()
    con.close()
    store = Store(path)
    assert store.schema_version() == SCHEMA_VERSION
    ids = {r.run_id: r.identity for r in store.runs()}
    assert ids["r1"] == ids["r2"] != ids["r3"] and len(ids["r1"]) == 32
    assert [r.run_id for r in store.runs(identity=ids["r3"])] == ["r3"]
