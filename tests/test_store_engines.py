"""One store, two engines: the pipeline records into a real PostgreSQL (tests/postgres_server.py) as
into SQLite, and compare / selection / the run listing / a tracked history and its change-point
verdict / an SLA sweep's verdicts answer the same on both; a store the release
at schema 3 made migrates forward and moves into PostgreSQL; many writers at once lose nothing and
readers never see half a run; credentials never show."""

from __future__ import annotations

import json
import multiprocessing as mp
import re
import shutil
import sqlite3
from pathlib import Path


from conftest import REPO_ROOT, cli_json, demo_project
from test_history import _env as releases_env, four_releases, otava_env  # noqa: F401  (fixtures)
from test_run_identity import demo  # noqa: F401  (the fixture: the demo recipes, small benchmarks)
from toolkit.cli import main
from toolkit.results.exchange import export, import_export
from toolkit.results.store import SCHEMA_VERSION, Store
from toolkit.run.bench import Sample

SCHEMA3 = REPO_ROOT / "tests" / "data" / "schema3-demo.sqlite"  # tests/data/make_schema3_store.py
COMPARE = ["compare", "demo/baseline", "demo/fast", "--metric", "output_tok_s", "--json"]


def _out(capsys, argv: list[str], store) -> str:
    """What `patchbench ARGV --store STORE` prints, the store's own name made neutral."""
    capsys.readouterr()
    rc = main([*argv, "--store", str(store.location)])
    out = capsys.readouterr().out
    assert rc == 0, out
    return out.replace(str(store.path), "STORE")


def _answers(capsys, store) -> dict:
    return {"compare": json.loads(_out(capsys, COMPARE, store)),
            "selected": _out(capsys, ["results", "demo/baseline", "demo/fast", "--selected"], store),
            "listing": _out(capsys, ["results"], store),
            "export": [{k: v for k, v in r.items()} for r in _exported(store)]}


def _exported(store) -> list[dict]:
    import io

    buf = io.StringIO()
    export(store, "json", buf)
    return json.loads(buf.getvalue())["runs"]


def _move(src: Store, dst: Store, tmp_path: Path) -> None:
    """Every run of `src` into `dst` as a Slurm job's runs reach the main store (jobs.merge)."""
    path = tmp_path / f"moved-{dst.engine_name}.json"
    export(src, "json", path)
    import_export(dst, path, measured_here=True)


def test_a_sweep_recorded_into_postgresql_answers_as_in_sqlite(demo, home, pg_server, pg_url, tmp_path,  # noqa: F811
                                                             capsys):
    """The pipeline writes into PostgreSQL itself (--store URL); the same runs in SQLite give the
    same compare JSON, selection and listing, run ids included. Each run's files are kept in
    `[store] artifacts`, checked on read: compare, report and publish read the answers from the
    kept copies and name a missing or altered one (its answers not used). Then the database goes
    away in the middle of a run."""
    pg = Store(pg_url)
    kept = tmp_path / "shared-artifacts"
    (home / "config.toml").write_text(f'[store]\nartifacts = "{kept}"\n')
    assert main(["run", "demo/baseline", "demo/fast", "--fixed", "--store", pg_url]) == 0
    runs = pg.runs()
    assert len(runs) == 4 and {r.status for r in runs} == {"ok"} and len(pg.samples([r.run_id for r in runs])) >= 4

    # each run's files are kept in the shared directory, their sha256 in the database, checked on read
    files = pg.artifacts([r.run_id for r in runs])
    assert {a.run_id for a in files} == {r.run_id for r in runs}
    assert all(Path(a.path).is_file() and Path(a.path).is_relative_to(kept) for a in files)
    capsys.readouterr()
    assert main(["results", "--check-artifacts", "--store", pg_url]) == 0
    before = json.loads(_out(capsys, COMPARE, pg))
    assert before["quality"]["demo/fast"] and not [n for n in before["notes"] if n.startswith("artifact")]

    # a teammate's machine: no run directories, the answers read from the kept copies alone
    shutil.rmtree(home / "runs")
    assert json.loads(_out(capsys, COMPARE, pg)) == before
    answers = {r.recipe: a for r in runs for a in files if a.run_id == r.run_id and a.name == "quality.json"}
    fast, base = answers["demo/fast"], answers["demo/baseline"]
    doc = json.loads(Path(fast.path).read_text())
    Path(fast.path).write_text(json.dumps({**doc, "edited": True}))  # still answers, not the stored bytes
    Path(base.path).unlink()
    capsys.readouterr()
    assert main(["results", "--check-artifacts", "--store", pg_url]) == 1
    out = capsys.readouterr().out
    assert f"{fast.name}: altered" in out and f"{base.name}: missing" in out and "2 not to be trusted" in out
    after = json.loads(_out(capsys, COMPARE, pg))
    warned = [n for n in after["notes"] if n.startswith("artifact: ")]
    assert sorted(warned) == sorted([
        f"artifact: run {fast.run_id[:8]} (demo/fast): quality.json altered ({fast.path}, sha256 not the stored "
        "one): its answers not used",
        f"artifact: run {base.run_id[:8]} (demo/baseline): quality.json missing ({base.path}): its answers not used"])
    assert after["quality"]["demo/fast"] == {} and after["rows"] == before["rows"]  # the speed verdict stands
    text = " ".join(_out(capsys, COMPARE[:-1], pg).split())  # the table, as a person reads it
    assert all(f"note: {w}" in text for w in warned), text
    capsys.readouterr()
    assert main(["report", "demo/baseline", "demo/fast", "-o", str(tmp_path / "rep"), "--store", pg_url]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert all(f"warning: {w}" in err for w in warned), err
    assert all(w in (tmp_path / "rep" / "report.md").read_text() for w in warned)
    rc, pub = cli_json(capsys, ["publish", "-o", str(tmp_path / "site"), "--store", pg_url])
    assert rc == 0 and sorted(n.split(": ", 1)[1] for n in pub["notes"] if ": artifact: " in n) == sorted(warned)

    # the same runs in SQLite (their kept files' records with them) answer the same, trust included
    lite = Store(tmp_path / "lite.sqlite")
    _move(pg, lite, tmp_path)
    assert {(a.run_id, a.name, a.sha256) for a in lite.artifacts([r.run_id for r in runs])} == {
        (a.run_id, a.name, a.sha256) for a in files}
    a, b = _answers(capsys, pg), _answers(capsys, lite)
    assert a["compare"]["rows"] and a == b
    pg.close()
    _pull_the_plug_mid_run(pg_server, pg_url)


def _engines_json(capsys, argv: list[str], *stores: Store) -> list[dict]:
    """`patchbench ARGV --json --store S` for each store: what each printed."""
    out = []
    for store in stores:
        rc, doc = cli_json(capsys, [*argv, "--store", str(store.location)])
        assert rc == 0, doc
        out.append(doc)
    return out


def test_a_tracked_history_and_its_change_verdict_answer_alike_on_both_engines(home, monkeypatch, capsys,  # noqa: F811
                                                                                tmp_path, pg_url, four_releases,
                                                                                otava_env):
    """`track` records the miniature's four releases into PostgreSQL itself; the same runs moved
    into SQLite give the same `history --json`: series, definitions, change points and their verdict."""
    releases_env(monkeypatch, four_releases)
    pg = Store(pg_url)
    rc, out = cli_json(capsys, ["track", "demo/update", "--source", "sglang", "--releases", "--store", pg_url])
    assert rc == 0 and sorted(out["measured"]) == four_releases["versions"]
    assert len(pg.tracked_runs("demo/update")) == 4
    lite = Store(tmp_path / "lite.sqlite")
    _move(pg, lite, tmp_path)
    argv = ["history", "demo/update", "--metric", "output_tok_s@1", "--alpha", "0.05", "--max-pvalue", "0.05"]
    a, b = _engines_json(capsys, argv, pg, lite)
    assert [e["label"] for e in a["series"]] == four_releases["versions"] and a["not_enough_history"] is None
    assert a == b
    # and the next track finds every point measured on either engine
    for store in (pg, lite):
        rc, again = cli_json(capsys, ["track", "demo/update", "--source", "sglang", "--releases",
                                      "--store", str(store.location)])
        assert rc == 0 and again["measured"] == [] and sorted(again["already_measured"]) == four_releases["versions"]


def _sla_sweep() -> str:
    """test_sweep's recipe at 4 prompts, 1 repeat, concurrency 1 and 4, two configurations."""
    from test_sweep import SWEEP

    text = SWEEP.format(prompts=4, repeats=1).replace("concurrency = [1, 8]", "concurrency = [1, 4]")
    return text.split("[matrix]")[0] + "[matrix]\nserver.args.mini-step-per-seq-us = [2000]\n"


def test_an_sla_sweep_answers_alike_on_both_engines(tmp_path, monkeypatch, home, capsys, pg_url):
    """`sweep --sla` measured into PostgreSQL; asked again, from PostgreSQL and from SQLite holding
    the same runs, it reuses them all and gives the same ranking, SLA verdicts and Pareto front."""
    proj = demo_project(tmp_path, monkeypatch)
    (proj / "recipes" / "demo" / "slaw.toml").write_text(_sla_sweep())
    argv = ["sweep", "demo/slaw", "--sla", "itl_ms_median<=10", "-o", str(proj / "o")]
    rc, first = cli_json(capsys, [*argv, "--store", pg_url])
    assert rc in (0, 1) and [v["sla"] for v in first["variants"]]
    pg, lite = Store(pg_url), Store(tmp_path / "lite.sqlite")
    _move(pg, lite, tmp_path)
    a, b = _engines_json(capsys, argv, pg, lite)
    assert len(pg.runs()) == len(lite.runs()) == sum(len(v["sla"]["measured"]) for v in first["variants"])
    assert all(v["reused"] == len(v["sla"]["measured"]) for v in a["variants"]), a["variants"]
    assert a == b


def test_a_schema3_store_migrates_and_moves_into_postgresql(demo, pg_url, tmp_path, capsys):  # noqa: F811
    """The release at schema 3 made tests/data/schema3-demo.sqlite through its pipeline; opened now it
    is at the newest schema with every run and sample, its order, its track and import records
    found by their new columns, and the same answers once moved into PostgreSQL."""
    path = tmp_path / "old.sqlite"
    shutil.copy(SCHEMA3, path)
    con = sqlite3.connect(path)
    assert con.execute("SELECT version FROM schema_version").fetchone() == (3,)
    before_runs = [r[0] for r in con.execute("SELECT run_id FROM runs ORDER BY started_at, rowid")]
    before_samples = sorted(con.execute("SELECT run_id, metric, value, point FROM samples").fetchall())
    con.close()

    lite = Store(path)
    assert lite.schema_version() == SCHEMA_VERSION
    assert [r.run_id for r in lite.runs()] == before_runs
    assert sorted((s.run_id, s.metric, s.value, s.point) for s in lite.samples(before_runs)) == before_samples
    assert [r.recipe for r in lite.tracked_runs("demo/update")] == ["demo/update@0.1.0"]
    (imported,) = [r for r in lite.runs() if r.recipe == "elsewhere"]
    hashes = imported.extra["imported"]
    assert [r.run_id for r in lite.imported_runs(file_sha256=hashes["file_sha256"])] == [imported.run_id]
    assert [r.run_id for r in lite.imported_runs(rows_sha256=hashes["rows_sha256"])] == [imported.run_id]
    new = lite.record_run({"recipe": "after"})
    assert lite.runs()[-1].run_id == new  # new runs go after the migrated ones
    lite.delete_runs([new])

    pg = Store(pg_url)
    _move(lite, pg, tmp_path)
    assert [r.run_id for r in pg.runs()] == before_runs
    assert [r.recipe for r in pg.tracked_runs("demo/update")] == ["demo/update@0.1.0"]
    assert [r.run_id for r in pg.imported_runs(file_sha256=hashes["file_sha256"])] == [imported.run_id]
    a, b = _answers(capsys, lite), _answers(capsys, pg)
    assert a["compare"]["rows"] and a == b
    # a second open costs no migration and changes nothing
    assert Store(path).runs() == lite.runs()


def _writer(url: str, n: int, tag: str) -> None:
    store = Store(url)
    for i in range(n):
        store.record_run({"recipe": "w", "group_id": tag, "repeat": i},
                         [Sample("output_tok_s", float(k), "tok/s", k, "concurrency") for k in range(1, 6)])


def test_concurrent_writers_lose_nothing_and_readers_see_whole_runs(pg_url):
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(pg_url, 15, f"w{i}")) for i in range(4)]
    for p in procs:
        p.start()
    reader, partial, looks = Store(pg_url), 0, 0
    while any(p.is_alive() for p in procs) or looks == 0:
        ids = [r.run_id for r in reader.runs(recipe="w")]
        counts: dict[str, int] = {}
        for s in reader.samples(ids):
            counts[s.run_id] = counts.get(s.run_id, 0) + 1
        partial += sum(1 for i in ids if counts.get(i) != 5)
        looks += 1
    assert [p.join(60) or p.exitcode for p in procs] == [0, 0, 0, 0]
    runs = reader.runs(recipe="w")
    assert len(runs) == 60 and len({r.run_id for r in runs}) == 60
    assert sorted((r.group_id, r.repeat) for r in runs) == sorted((f"w{i}", k) for i in range(4) for k in range(15))
    assert partial == 0, f"{partial} half-written run(s) seen in {looks} looks"


def test_credentials_come_from_libpq_and_never_show(pg_server, pg_url, tmp_path, monkeypatch, capsys):
    import postgres_server

    from sqlalchemy.engine import make_url

    db = make_url(pg_url).database
    with_pw = pg_server.url(db, tcp=True, password=True)
    store = Store(with_pw)
    store.record_run({"recipe": "secret-check"})
    assert postgres_server.PASSWORD not in str(store.path) and "***" in str(store.path)
    capsys.readouterr()
    assert main(["results", "--store", with_pw]) == 0
    out = capsys.readouterr()
    assert "secret-check" in out.out and postgres_server.PASSWORD not in out.out + out.err
    exported = tmp_path / "e.json"
    assert main(["results", "--export", "json", "-o", str(exported), "--store", with_pw]) == 0
    assert postgres_server.PASSWORD not in exported.read_text() + capsys.readouterr().out

    # no password in the URL: libpq reads PGPASSFILE
    pgpass = tmp_path / "pgpass"
    pgpass.write_text(f"127.0.0.1:{pg_server.port}:*:patchbench:{postgres_server.PASSWORD}\n")
    pgpass.chmod(0o600)
    monkeypatch.setenv("PGPASSFILE", str(pgpass))
    assert [r.recipe for r in Store(pg_server.url(db, tcp=True)).runs()] == ["secret-check"]

    # a wrong password: one line, exit 1, the password it was given not in it
    monkeypatch.delenv("PGPASSFILE")
    wrong = with_pw.replace(postgres_server.PASSWORD, "not-the-pw-123")
    capsys.readouterr()
    assert main(["results", "--store", wrong]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: results store postgresql://patchbench:***@") and "not-the-pw-123" not in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "~/.pgpass" in err and "pg_isready" not in err  # the hint fits the failure: a password, not a server down
    # a database that does not exist, a port that is not a number: one line each, the hint that fits
    assert main(["results", "--store", with_pw.rsplit("/", 1)[0] + "/no_such_db"]) == 1
    assert "createdb" in capsys.readouterr().err
    assert main(["results", "--store", "postgresql://u@127.0.0.1:abc/team"]) == 2
    err = capsys.readouterr().err
    assert "not a database URL" in err and "internal error" not in err and len(err.strip().splitlines()) == 1


def test_store_url_from_env_and_user_config(home, pg_url, monkeypatch, capsys):
    from toolkit.results.engine import store_location

    assert store_location(home) == home / "results.sqlite"
    (home / "config.toml").write_text(f'[store]\nurl = "{pg_url}"\n')
    assert store_location(home) == pg_url
    monkeypatch.setenv("PATCHBENCH_STORE", str(home / "env.sqlite"))
    assert store_location(home) == home / "env.sqlite"
    assert store_location(home, "postgresql://u@h/d") == "postgresql://u@h/d"
    monkeypatch.delenv("PATCHBENCH_STORE")
    (home / "config.toml").write_text('[store]\nurl = "x"\nuser = "me"\n')
    capsys.readouterr()
    assert main(["results", "--home", str(home)]) == 2
    assert re.search(r"unknown \[store\] key\(s\) user", capsys.readouterr().err)



def _pull_the_plug_mid_run(pg_server, pg_url: str) -> None:
    """The database stops taking connections while a run is measured: the run ends `interrupted`,
    kept on this disk, one line says so (no traceback), and the store's row reads interrupted."""
    import os
    import subprocess
    import sys
    import time

    import psycopg
    from sqlalchemy.engine import make_url

    db = make_url(pg_url).database
    proc = subprocess.Popen([sys.executable, "-m", "toolkit", "run", "demo/baseline", "--repeats", "1",
                             "--store", pg_url], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=os.environ)
    store, deadline = Store(pg_url), time.monotonic() + 240
    before = {r.run_id for r in store.runs()}
    while not store.runs(status="running") and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)  # waiting for the run to begin (its env is built first)
    assert proc.poll() is None, proc.communicate()
    store.close()
    with psycopg.connect(pg_server.url(), autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{db}" ALLOW_CONNECTIONS false')
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (db,))
        out, err = proc.communicate(timeout=240)
        admin.execute(f'ALTER DATABASE "{db}" ALLOW_CONNECTIONS true')
    assert proc.returncode == 1, out + err
    last = err.strip().splitlines()[-1]
    assert "Traceback" not in out + err
    assert last.startswith(f"error: results store {Store(pg_url).path}: ") and "ended interrupted" in last, err
    kept = Path(re.search(r"record kept in (\S+)", last).group(1))
    (run,) = json.loads(kept.read_text())["runs"]
    assert run["status"] == "interrupted" and "the results store went away" in run["error"]
    (stored,) = [r for r in Store(pg_url).runs() if r.run_id not in before]
    assert stored.run_id == run["run_id"] and stored.status == "running" and stored.is_interrupted()
    assert f"`patchbench import {kept}` stores it" in last  # how to get it back, once the database is up


def test_a_sqlite_history_moved_into_postgresql_with_own_counts_as_the_teams_runs(demo, home, pg_url, tmp_path,  # noqa: F811
                                                                                     capsys):
    """A user's SQLite store moved into the team's PostgreSQL (`results --export json`, then `import`): by
    default its runs are 'measured elsewhere' and the import says how to count them; `import --own` counts
    them as runs stored directly, also after a first import without it (was: every verdict of the moved
    history 'imported (use --imported)', forever: no command could lift the mark)."""
    assert main(["run", "demo/baseline", "demo/fast", "--fixed"]) == 0  # into the default SQLite store
    moved = tmp_path / "mine.json"
    assert main(["results", "--export", "json", "-o", str(moved)]) == 0
    capsys.readouterr()
    assert main(["import", str(moved), "--store", pg_url]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "imported 4 runs" in said and "count them only with --imported" in said and "import --own" in said, said
    assert main(COMPARE[:-1] + ["--store", pg_url]) == 2
    assert "imported (use --imported)" in capsys.readouterr().err
    assert main(["import", str(moved), "--own", "--store", pg_url]) == 0  # the same file again, as the team's own
    assert "imported 4 runs from" in capsys.readouterr().out
    pg, lite = Store(pg_url), Store(home / "results.sqlite")
    assert all(not r.imported and r.extra["moved_from"]["from"] == str(moved) for r in pg.runs())
    assert json.loads(_out(capsys, COMPARE, pg)) == json.loads(_out(capsys, COMPARE, lite))  # the same verdicts
    assert main(["import", str(moved), "--own", "--store", pg_url]) == 0  # once is enough
    assert "imported 0 runs" in capsys.readouterr().out and len(pg.runs()) == 4
    # JSONL from sglang's own bench was measured outside patchbench: --own is refused for it
    jsonl = tmp_path / "bench.jsonl"
    jsonl.write_text('{"output_throughput": 100.0, "max_concurrency": 1}\n')
    assert main(["import", str(jsonl), "--recipe", "x", "--own", "--store", pg_url]) == 2
    assert "--own is for a patchbench export" in capsys.readouterr().err


def test_imported_runs_of_an_earlier_env_are_not_mixed_into_the_recipes_runs(demo, home, tmp_path, capsys):  # noqa: F811
    """`compare --imported` over a moved history: the recipe's imported runs of its earlier patch (another env
    key) are left out and named, as stored runs of it are; only the newest configuration counts (was: both
    envs' runs in one verdict, demo/mine '1.5x faster' from the imported runs of the patch it no longer has)."""
    mine = demo / "recipes" / "demo" / "mine.toml"
    mine.write_text('extends = "demo/baseline"\n[patches]\nsglang = ["demo/faster-decode.patch"]\n')
    assert main(["run", "demo/baseline", "demo/mine", "--fixed"]) == 0
    moved, team = tmp_path / "mine.json", str(tmp_path / "team.sqlite")
    assert main(["results", "--export", "json", "-o", str(moved)]) == 0
    assert main(["import", str(moved), "--store", team]) == 0  # measured elsewhere: counted with --imported
    mine.write_text(mine.read_text().replace("faster-decode", "slower-decode"))
    assert main(["run", "demo/mine", "--fixed", "--store", team]) == 0
    store = Store(team)
    now = [r.run_id for r in store.runs(recipe="demo/mine") if not r.imported]
    capsys.readouterr()
    assert main([*COMPARE[:2], "demo/mine", "--metric", "output_tok_s", "--json", "--imported", "--store", team]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["runs"]["demo/mine"] == now and len(now) == 2, doc["runs"]
    assert any(n.startswith("demo/mine: 2 run(s) of another configuration left out (env key:") for n in doc["notes"])
    assert "imported runs used on request: demo/baseline" in doc["notes"]
