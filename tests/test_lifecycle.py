"""The server never outlives patchbench, and every run ends with a status: real patchbench
processes killed mid-benchmark, the reaper of the next run, bind errors, the one-batch driver."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import psutil
import pytest

from test_verified_runs import _alive_servers, _client_connected, proj, recipe  # noqa: F401  (proj: a fixture)
from toolkit.cli import main
from toolkit.results.store import Store


def _slow(root):
    """A recipe whose benchmark takes long enough to be killed in the middle of."""
    path = recipe(root, "killed", extra_args="mini-step-base-ms = 40")
    text = (root / "recipes" / "killed.toml").read_text().replace("output_len = 8", "output_len = 400")
    (root / "recipes" / "killed.toml").write_text(text)
    return path


def _start_sweep(home, *recipes):
    return subprocess.Popen([sys.executable, "-m", "toolkit", "run", *recipes, "--repeats", "2", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PATCHBENCH_HOME": str(home)})


def _wait_mid_benchmark(cli, home):
    """Wait until a server of the sweep answers and its benchmark is under way."""
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and cli.poll() is None:
        runs = [r for r in Store(home / "results.sqlite").runs(status="running")] \
            if (home / "results.sqlite").exists() else []
        for r in runs:
            log = home / "runs" / r.run_id / "server.log"
            # ready, and the benchmark's client connected (its warmup request alone takes 400 x 40 ms)
            if log.exists() and "ready to roll" in log.read_text(errors="replace") and _benchmarking(home):
                return r.run_id
        time.sleep(0.2)
    out, err = cli.communicate(timeout=10) if cli.poll() is not None else ("", "")
    raise AssertionError(f"the benchmark never started: {err[-2000:]}")


def _benchmarking(home) -> bool:
    """Whether a server of `home` (not its supervisor) has a client connected."""
    for p in _alive_servers(str(home / "envs")):
        try:
            argv = " ".join(p.cmdline())
            if "sglang.launch_server" in argv and "supervisor.py" not in argv and _client_connected(p):
                return True
        except psutil.Error:
            pass
    return False


def _gone_within(home, seconds: float) -> list:
    deadline = time.monotonic() + seconds
    left = _alive_servers(str(home / "envs"))
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = _alive_servers(str(home / "envs"))
    return left


def test_kill_9_mid_benchmark_leaves_no_server_and_next_run_marks_it_interrupted(proj, home, capsys):
    slow, fine = _slow(proj), recipe(proj, "fine")
    cli = _start_sweep(home, slow, fine)
    run_id = _wait_mid_benchmark(cli, home)
    assert list((home / "live").glob("*.json")), "the live server is recorded"
    cli.kill()
    cli.communicate(timeout=30)
    assert _gone_within(home, 5.0) == [], "a server process outlived patchbench by more than 5 s"
    store = Store(home / "results.sqlite")
    assert store.get_run(run_id).status == "running"  # as the dead process left it
    capsys.readouterr()  # listed as it reads: interrupted (its process is gone), not running
    assert main(["results", "--status", "interrupted"]) == 0 and run_id[:8] in capsys.readouterr().out
    assert main(["results", "--status", "running"]) == 0 and run_id[:8] not in capsys.readouterr().out

    assert main(["run", fine]) == 0
    err = capsys.readouterr().err
    assert f"run {run_id[:8]} marked interrupted" in err
    killed = store.get_run(run_id)
    assert killed.status == "interrupted" and f"pid {cli.pid}" in killed.error
    assert list((home / "live").glob("*.json")) == []
    assert main(["results"]) == 0
    assert "interrupted" in capsys.readouterr().out


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_mid_benchmark_stores_interrupted_and_ends_the_group(proj, home, capsys, sig):
    cli = _start_sweep(home, _slow(proj), recipe(proj, "fine"))
    run_id = _wait_mid_benchmark(cli, home)
    t0 = time.monotonic()
    cli.send_signal(sig)
    assert _gone_within(home, 5.0) == []
    _, err = cli.communicate(timeout=30)
    assert time.monotonic() - t0 < 10
    assert cli.returncode == 128 + sig, err  # 143 for SIGTERM, 130 for Ctrl-C, as a shell reports them
    assert "the same command again counts them" not in err  # --repeats 2: a fixed design launches them all again
    run = Store(home / "results.sqlite").get_run(run_id)
    assert run.status == "interrupted" and run.error == f"interrupted ({sig.name})"
    assert list((home / "live").glob("*.json")) == []
    assert main(["run", recipe(proj, "fine")]) == 0  # the next run just runs


def _busy_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s, s.getsockname()[1]


def test_port_in_use_is_a_stored_failed_run_with_a_one_line_reason(proj, home, capsys):
    sock, port = _busy_port()
    with sock:
        path = recipe(proj, "busy")
        text = (proj / "recipes" / "busy.toml").read_text().replace("timeout_s = 60\n", f"timeout_s = 60\nport = {port}\n")
        (proj / "recipes" / "busy.toml").write_text(text)
        fine = recipe(proj, "fine")
        (proj / "recipes" / "fine.toml").write_text((proj / "recipes" / "fine.toml").read_text()
                                                   + '\n[server.env]\nPATCHBENCH_TEST_SIDE = "fine"\n')
        assert main(["run", path, fine, "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    store = Store(home / "results.sqlite")
    runs = {store.get_run(rid).recipe: store.get_run(rid) for _, rid in out["runs"]}
    assert runs["busy"].status == "failed"
    assert runs["busy"].error == f"port {port} on 127.0.0.1 is in use"
    assert runs["fine"].status == "ok"  # the sweep went on


def test_host_that_cannot_be_bound_is_a_stored_failed_run(proj, home, capsys):
    path = recipe(proj, "nohost")
    text = (proj / "recipes" / "nohost.toml").read_text().replace("timeout_s = 60\n", 'timeout_s = 60\nhost = "192.0.2.1"\n')
    (proj / "recipes" / "nohost.toml").write_text(text)
    assert main(["run", path]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "internal error" not in err
    [run] = Store(home / "results.sqlite").runs(recipe="nohost")
    assert run.status == "failed" and run.error.startswith("host 192.0.2.1 cannot be bound")


ONE_BATCH = """
description = "one-batch on a fork"
[sources.sglang]
path = "../mini"
package_dir = "python"
[server]
model = "mini"
gpus = 0
[server.args]
tp-size = 1
[benchmark]
driver = "one-batch"
batch_sizes = [1, 2]
input_len = 8
output_len = {output_len}
repeats = 1
timeout_s = {timeout}
"""


def _one_batch_recipe(root, name, *, output_len=4, timeout=120):
    path = root / "recipes" / f"{name}.toml"
    path.write_text(ONE_BATCH.format(output_len=output_len, timeout=timeout))
    return str(path)


def test_fork_reporting_0_5_23_with_only_bench_one_batch_runs_the_driver(proj, home, capsys):
    for rel in ("python/sglang/version.py", "python/pyproject.toml"):
        f = proj / "mini" / rel
        f.write_text(f.read_text().replace("0.0.1+mini", "0.5.23"))
    assert not (proj / "mini" / "python" / "sglang" / "benchmark").exists()
    assert main(["run", _one_batch_recipe(proj, "fork"), "--json"]) == 0
    [(_, run_id)] = json.loads(capsys.readouterr().out)["runs"]
    store = Store(home / "results.sqlite")
    run = store.get_run(run_id)
    assert run.status == "ok" and run.sglang_version == "0.5.23"
    assert {s.point for s in store.samples([run_id], metric="decode_tok_s")} == {1, 2}
    assert "server" not in run.log_paths and {"one-batch", "result"} <= set(run.log_paths)
    for path in run.log_paths.values():
        assert os.path.exists(path), path


def test_one_batch_timeout_kills_its_group_and_fails_the_run(proj, home, capsys):
    path = _one_batch_recipe(proj, "too-slow", output_len=100000, timeout=3)
    fine = _one_batch_recipe(proj, "quick")
    assert main(["run", path, fine, "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    store = Store(home / "results.sqlite")
    runs = {store.get_run(rid).recipe: store.get_run(rid) for _, rid in out["runs"]}
    assert runs["too-slow"].status == "failed" and "timed out after 3 s" in runs["too-slow"].error
    assert runs["quick"].status == "ok"
    assert [p for p in _alive_servers(str(home / "envs")) if p.is_running()] == []


def test_one_batch_failure_stores_and_shows_the_last_lines(proj, home, capsys):
    bench = proj / "mini" / "python" / "sglang" / "bench_one_batch.py"
    bench.write_text(bench.read_text().replace(
        "    latency_test(server_args, bench_args)\n",
        "    raise RuntimeError('this fork cannot load mini on this machine')\n", 1))
    assert main(["run", _one_batch_recipe(proj, "broken")]) == 1
    err = capsys.readouterr().err
    [run] = Store(home / "results.sqlite").runs(recipe="broken")
    assert run.status == "failed"
    assert run.error == ("one-batch benchmark exited with code 1: "
                         "RuntimeError: this fork cannot load mini on this machine")
    assert "Traceback (most recent call last)" in run.log_tail and "Traceback (most recent call last)" in err


def test_a_version_1_store_gains_the_interrupted_status_and_keeps_its_runs(tmp_path):
    import sqlite3

    from toolkit.results.store import MIGRATIONS, SCHEMA_VERSION

    path = tmp_path / "old.sqlite"
    conn = sqlite3.connect(path, isolation_level=None)
    for stmt in MIGRATIONS[1].split(";"):
        if stmt.strip():
            conn.execute(stmt)
    conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
    conn.execute("INSERT INTO schema_version VALUES (1)")
    conn.execute("INSERT INTO runs (run_id, recipe, status) VALUES ('r1', 'a', 'running')")
    conn.execute("INSERT INTO samples (run_id, metric, value, unit, point, point_kind) "
                 "VALUES ('r1', 'output_tok_s', 1.0, 'tok/s', 1, 'concurrency')")
    conn.close()
    store = Store(path)
    assert store.schema_version() == SCHEMA_VERSION  # migrated to the newest
    assert store.mark_interrupted("r1", "interrupted: gone") is True
    assert store.mark_interrupted("r1", "again") is False  # only a running run is marked
    run = store.get_run("r1")
    assert run.status == "interrupted" and run.error == "interrupted: gone" and run.finished_at
    assert len(store.samples(["r1"])) == 1
    assert store.counts() == {"interrupted": 1}


def test_crash_summary_quotes_the_exception_line():
    from toolkit.run.server import crash_line

    tail = ("INFO starting\nTraceback (most recent call last):\n  File \"x.py\", line 3, in <module>\n"
            "    serve()\nOSError: [Errno 98] Address already in use\nINFO Shutdown complete.\n")
    assert crash_line(tail) == "OSError: [Errno 98] Address already in use"
    assert crash_line("step 3\nCUDA error: an illegal memory access was encountered\n") == \
        "CUDA error: an illegal memory access was encountered"
    assert crash_line("torch.cuda.OutOfMemoryError: CUDA out of memory.\n").startswith("torch.cuda.OutOfMemoryError")
    assert crash_line("all fine\n") is None


def test_a_process_that_left_the_group_just_before_patchbench_died_is_ended_too(tmp_path):
    """The supervisor ends the server's group when patchbench dies, and with it a descendant that
    called setsid (out of the group), even one started after the tree had been quiet for a while
    (the supervisor then scans for descendants less often) and just before patchbench died."""
    pidfile = tmp_path / "escaped.pid"
    server = ("import subprocess, sys, time; time.sleep(2.5); "
              "p = subprocess.Popen(['sleep', '300'], start_new_session=True); "
              f"open({str(pidfile)!r} + '.tmp', 'w').write(str(p.pid)); "
              f"__import__('os').rename({str(pidfile)!r} + '.tmp', {str(pidfile)!r}); time.sleep(300)")
    patchbench = ("import sys; from toolkit.run import supervisor; "
                  f"supervisor.spawn([sys.executable, '-c', {server!r}], log={str(tmp_path / 'server.log')!r}, "
                  "environ=dict(__import__('os').environ)); __import__('time').sleep(300)")
    stand_in = subprocess.Popen([sys.executable, "-c", patchbench], cwd=os.path.dirname(os.path.dirname(__file__)))
    try:
        deadline = time.monotonic() + 60
        while not pidfile.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        escaped = int(pidfile.read_text())
        assert os.getsid(escaped) == escaped  # out of the supervisor's group and session
        stand_in.kill()  # patchbench dies: the supervisor's parent-death signal
        stand_in.wait()
        gone = psutil.wait_procs([psutil.Process(escaped)], timeout=15)[0]
        assert [p.pid for p in gone] == [escaped], "the descendant that left the group outlived patchbench"
    finally:
        if stand_in.poll() is None:
            stand_in.kill()
        if pidfile.exists() and psutil.pid_exists(int(pidfile.read_text())):
            os.kill(int(pidfile.read_text()), signal.SIGKILL)


def test_the_servers_pythonpath_does_not_reach_the_supervisor(proj, home, tmp_path):
    """A recipe's PYTHONPATH is for the server's env; patchbench's supervisor must not import from it."""
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "psutil.py").write_text("raise ImportError('not this psutil')\n")
    path = recipe(proj, "shadowed")
    text = (proj / "recipes" / "shadowed.toml").read_text() + f'\n[server.env]\nPYTHONPATH = "{shadow}"\n'
    (proj / "recipes" / "shadowed.toml").write_text(text)
    assert main(["run", path]) == 0
    [run] = Store(home / "results.sqlite").runs(recipe="shadowed")
    assert run.status == "ok"


def test_a_damaged_stored_row_is_named_and_a_new_runs_numbers_are_kept(proj, home, capsys):
    """One stored run's JSON column damaged by hand: `results` names that run in one line (exit 1,
    no traceback); a new run of the same recipe, whose output check reads the earlier runs, fails
    on it but keeps the numbers its benchmark measured (stored with the failed run, not counted)."""
    import sqlite3

    path = recipe(proj, "damaged", extra_args="")
    with open(path, "a") as fh:
        fh.write("\n[quality]\nlaunches = 2\n")
    assert main(["run", path]) == 0
    db = home / "results.sqlite"
    [first] = Store(db).runs(recipe="damaged")
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE runs SET recipe_resolved = '{not json' WHERE run_id = ?", (first.run_id,))
    capsys.readouterr()
    assert main(["results"]) == 1
    err = capsys.readouterr().err
    assert f"run {first.run_id[:8]}" in err and "is not valid JSON" in err and "Traceback" not in err
    assert main(["run", path]) == 1
    with sqlite3.connect(db) as conn:
        (new,) = [r[0] for r in conn.execute("SELECT run_id FROM runs WHERE run_id != ?", (first.run_id,))]
    run = Store(db).get_run(new)
    assert run.status == "failed" and "is not valid JSON" in run.error
    assert any(s.metric == "output_tok_s" for s in Store(db).samples([new]))


def test_a_port_taken_reads_as_a_port_in_use_in_pythons_words_and_uvicorns():
    from toolkit.run.server import in_use_line

    assert in_use_line("Traceback ...\nOSError: [Errno 98] Address already in use\n") == \
        "OSError: [Errno 98] Address already in use"
    uvicorn = ("INFO:     Started server process [7]\nERROR:    [Errno 98] error while attempting to bind on address "
               "('127.0.0.1', 30000): address already in use\nINFO:     Waiting for application shutdown.\n")
    assert in_use_line(uvicorn).endswith("('127.0.0.1', 30000): address already in use")
    assert in_use_line("all fine\n") is None


@pytest.mark.parametrize("ending", ["end_group", "stop_group"])
def test_ending_a_group_does_not_wait_for_init_to_reap_an_orphaned_zombie(tmp_path, ending):
    """A server whose subprocess it did not reap (the miniature's detokenizer when the supervisor's
    second SIGTERM ends the server mid-shutdown; real sglang's scheduler likewise) leaves an exited
    orphan whose parent is now PID 1, which in a container reaps late or never (docker without
    --init). Ending the group waited for that zombie to vanish: the grace, then 5 s more, at every
    stop of every launch. Here patchbench's stand-in is a subreaper that never reaps, as such an
    init: the group still ends, and its end takes well under the grace. `stop_group` ends the groups of the
    one-batch benchmark, the gate's harness and sgl-eval: it waited its whole grace while the zombie was in
    the group."""
    ready = tmp_path / "ready"
    server = ("import os, signal, sys, time\n"
              "kid = os.fork()\n"
              "if kid == 0:\n"
              "    signal.signal(signal.SIGTERM, signal.SIG_DFL); time.sleep(300); os._exit(0)\n"
              "signal.signal(signal.SIGTERM, lambda *a: os._exit(0))  # exits without reaping its child\n"
              f"open({str(ready)!r}, 'w').write(str(kid)); time.sleep(300)\n")
    patchbench = ("import json, os, sys, time, psutil\n"
                  "from toolkit.run import supervisor\n"
                  f"proc = supervisor.spawn([sys.executable, '-c', {server!r}], log={str(tmp_path / 's.log')!r}, "
                  "environ=dict(os.environ))\n"
                  f"while not os.path.exists({str(ready)!r}): time.sleep(0.01)\n"
                  "procs = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]\n"
                  "t = time.monotonic()\n"
                  + ("supervisor.end_group(proc.pid, procs, grace=10.0)\n" if ending == "end_group" else
                     "supervisor.stop_group(proc, grace=10.0)\n")
                  + "took = time.monotonic() - t\n"
                  "proc.wait(timeout=5)\n"
                  "states = {}\n"
                  "for p in procs:\n"
                  "    try: states[p.pid] = p.status()\n"
                  "    except psutil.Error: states[p.pid] = 'gone'\n"
                  "print(json.dumps({'took': took, 'states': states}))\n")
    init = ("import ctypes, subprocess, sys\n"  # PR_SET_CHILD_SUBREAPER: orphans below come here, never reaped
            "ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)\n"
            f"sys.exit(subprocess.run([sys.executable, '-c', {patchbench!r}]).returncode)\n")
    out = subprocess.run([sys.executable, "-c", init], cwd=os.path.dirname(os.path.dirname(__file__)),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert len(got["states"]) == 3 and set(got["states"].values()) <= {"gone", psutil.STATUS_ZOMBIE}, got
    assert got["took"] < 5.0, got  # was 15 s: the grace (10 s) and the 5 s after SIGKILL, for a zombie
