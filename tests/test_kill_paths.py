"""patchbench itself killed (SIGKILL, the machine dying) mid-run, on the miniature: what it measured
before the kill is in the store, marked for what it is, and counted nowhere."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil

from conftest import REPO_ROOT, demo_project
from toolkit.cli import main
from toolkit.results.store import Store


def _start_run(proj, home, recipe: str, log):
    """`patchbench run RECIPE --repeats 1` in its own process (the one the test kills), stderr to `log`."""
    with log.open("w") as out:
        return subprocess.Popen([sys.executable, "-m", "toolkit", "run", recipe, "--repeats", "1"], cwd=proj,
                                env={**os.environ, "PATCHBENCH_HOME": str(home), "PYTHONPATH": str(REPO_ROOT)},
                                stdout=subprocess.DEVNULL, stderr=out)


def test_a_sigkill_during_the_answers_check_keeps_the_benchmark_marked_incomplete(home, tmp_path, monkeypatch,
                                                                                 capsys):
    proj = demo_project(tmp_path, monkeypatch)
    # 16 prompts x 64 tokens greedy at c=1 and c=16: the answers check takes seconds after the benchmark
    (proj / "recipes" / "demo" / "longcheck.toml").write_text(
        'extends = "demo/baseline"\n[quality]\nmax_tokens = 64\nlaunches = 1\n')
    log = tmp_path / "run.log"
    cli = _start_run(proj, home, "demo/longcheck", log)
    store, measured, deadline = Store(home / "results.sqlite"), False, time.monotonic() + 240
    try:
        while not measured and time.monotonic() < deadline and cli.poll() is None:
            time.sleep(0.05)  # polling the store, as a dashboard would
            if (home / "results.sqlite").exists():
                measured = any(store.samples([r.run_id]) for r in store.runs(recipe="demo/longcheck"))
        if measured:
            os.kill(cli.pid, signal.SIGKILL)  # the benchmark is stored: patchbench dies in the answers check
    finally:
        if cli.poll() is None:
            os.kill(cli.pid, signal.SIGKILL)
        cli.wait()
    assert "output check" not in log.read_text(), log.read_text()  # killed before the answers check ended
    [run] = store.runs(recipe="demo/longcheck")
    assert run.status == "running" and "quality" not in run.extra  # as the kill left it
    tok = {s.point: s.value for s in store.samples([run.run_id]) if s.metric == "output_tok_s"}
    assert set(tok) == {1, 4, 16} and all(v > 0 for v in tok.values()), tok  # the numbers survived the kill
    assert "answers check" in run.extra["incomplete"]

    # the next run reaps it: interrupted, saying what it kept; its server group ended
    assert main(["run", "demo/baseline", "--until", "check"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert f"run {run.run_id[:8]} marked interrupted" in err, err
    assert not [p for p in psutil.process_iter(["cmdline"]) if str(home / "envs") in " ".join(p.info["cmdline"] or [])]
    run = store.get_run(run.run_id)
    assert run.status == "interrupted" and "benchmark measured and kept" in run.error, run.error
    assert len(store.samples([run.run_id])) == len(tok) * len({s.metric for s in store.samples([run.run_id])})
    # not a verified run: compare counts none of it
    assert main(["compare", "demo/baseline", "demo/longcheck"]) == 2
    assert "interrupted" in capsys.readouterr().err


def test_a_launch_interrupted_mid_benchmark_costs_the_seconds_it_spent(home, tmp_path, monkeypatch, capsys):
    proj = demo_project(tmp_path, monkeypatch)
    # 256 tokens at 12 ms a step: the benchmark at c=1 alone takes seconds
    (proj / "recipes" / "demo" / "long.toml").write_text(
        'extends = "demo/baseline"\n[benchmark]\noutput_len = 256\n[quality]\nlaunches = 0\n')
    log = tmp_path / "run.log"
    cli = _start_run(proj, home, "demo/long", log)
    deadline = time.monotonic() + 240
    try:
        while "server ready" not in log.read_text() and time.monotonic() < deadline and cli.poll() is None:
            time.sleep(0.05)
        assert "server ready" in log.read_text(), log.read_text()
        time.sleep(3)  # the benchmark measures meanwhile
        cli.send_signal(signal.SIGINT)  # Ctrl-C mid-benchmark
        assert cli.wait(timeout=120) == 130, log.read_text()
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
    [run] = Store(home / "results.sqlite").runs(recipe="demo/long")
    assert run.status == "interrupted" and run.timings["benchmark"] >= 2.5, run.timings  # the seconds it spent
    assert main(["results", "demo/long"]) == 0
    cost = [line for line in capsys.readouterr().out.splitlines() if line.startswith("cost: demo/long")]
    assert cost and cost[0].startswith("cost: demo/long: 1 launches, ") and ": interrupted 1 (" in cost[0], cost
    seconds = float(cost[0].split("launches, ")[1].split(" s,")[0])
    assert seconds >= 3, cost  # not "1 launches, 0 s"


def test_a_sigkill_during_the_launch_costs_the_seconds_the_launch_held(home, tmp_path, monkeypatch, capsys):
    proj = demo_project(tmp_path, monkeypatch)
    # the miniature takes 30 s to become ready: patchbench is killed while it waits for the server
    (proj / "recipes" / "demo" / "slowstart.toml").write_text(
        'extends = "demo/baseline"\n[server.args]\nmini-startup-s = 30\n[quality]\nlaunches = 0\n')
    log = tmp_path / "run.log"
    cli = _start_run(proj, home, "demo/slowstart", log)
    store, deadline, launching = Store(home / "results.sqlite"), time.monotonic() + 240, None
    try:
        while launching is None and time.monotonic() < deadline and cli.poll() is None:
            time.sleep(0.05)  # polling the store, as a dashboard would
            if (home / "results.sqlite").exists():
                launching = next((r for r in store.runs(recipe="demo/slowstart")
                                  if (r.extra.get("in_step") or {}).get("step") == "launch"), None)
        assert launching is not None, log.read_text()
        time.sleep(4)  # the server starts meanwhile, holding what it holds
        os.kill(cli.pid, signal.SIGKILL)
    finally:
        if cli.poll() is None:
            os.kill(cli.pid, signal.SIGKILL)
        cli.wait()
    assert "server ready" not in log.read_text()  # killed before the benchmark
    assert main(["run", "demo/baseline", "--until", "check"]) == 0  # the next run reaps it
    assert f"run {launching.run_id[:8]} marked interrupted" in capsys.readouterr().err
    run = store.get_run(launching.run_id)
    assert run.status == "interrupted" and "killed in its launch step" in run.error, run.error
    assert 3.5 <= run.timings["launch"] < 30, run.timings  # the seconds up to the kill, not 0, not to the reap
    assert main(["results", "demo/slowstart"]) == 0
    cost = [line for line in capsys.readouterr().out.splitlines() if line.startswith("cost: demo/slowstart")]
    assert cost and float(cost[0].split("launches, ")[1].split(" s,")[0]) >= 3.5, cost  # was "1 launches (...), 0 s"
    assert ": interrupted 1 (" in cost[0], cost
