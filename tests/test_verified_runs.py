"""Verified runs on the miniature: static and runtime config checks, crashes mid-sweep, no orphans."""

from __future__ import annotations

import json
import shutil
import subprocess

import psutil
import pytest

from conftest import REPO_ROOT, git
from toolkit.cli import main
from toolkit.results.store import Store

MINI = REPO_ROOT / "upstream" / "minisglang"
HTTP = "python/sglang/srt/entrypoints/http_server.py"

RECIPE = """
description = "{name}"
[sources.sglang]
path = "../mini"
package_dir = "python"
[patches]
sglang = [{patches}]
[server]
model = "mini"
gpus = 0
timeout_s = 60
[server.args]
tp-size = 8
ep-size = 8
{extra_args}
[benchmark]
input_len = 8
output_len = 8
concurrency = [1, 2]
num_prompts = 4
warmup = 1
repeats = 1
[expect]
{expect}
"""


@pytest.fixture
def proj(tmp_path, home):
    root = tmp_path / "proj"
    shutil.copytree(MINI, root / "mini", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"))
    (root / "recipes").mkdir()
    (root / "patches").mkdir()
    return root


def recipe(root, name, *, patches=(), expect="", extra_args=""):
    path = root / "recipes" / f"{name}.toml"
    path.write_text(RECIPE.format(name=name, patches=", ".join(f'"{p}"' for p in patches), expect=expect,
                                  extra_args=extra_args))
    return str(path)


def test_ep8_mismatch_is_caught_before_launch(proj, capsys):
    r = recipe(proj, "ep8-wrong", expect="ep_size = 1")
    assert main(["run", r, "--until", "check"]) == 2
    err = capsys.readouterr().err
    assert "static config check failed" in err and "ep_size: expected 1" in err and "says 8" in err
    assert "step check" in err and "Traceback" not in err


def test_unknown_flag_is_named_before_launch(proj, capsys):
    r = recipe(proj, "bad-flag", extra_args="cuda-graph-max-batch = 8")
    assert main(["run", r, "--until", "check"]) == 2
    err = capsys.readouterr().err
    assert "does not accept" in err and "--cuda-graph-max-batch" in err


def test_server_dropping_ep_size_marks_run_invalid(proj, home, capsys):
    """A patch that silently ignores --ep-size: the static check passes, /server_info catches it."""
    scratch = proj / "scratch"
    shutil.copytree(proj / "mini", scratch)
    git(scratch, "init", "-q"); git(scratch, "add", "-A"); git(scratch, "commit", "-qm", "b")
    http = scratch / HTTP
    http.write_text(http.read_text().replace('        info["version"] = __version__\n',
                                             '        info["version"] = __version__\n        info["ep_size"] = 1\n', 1))
    diff = subprocess.run(["git", "diff"], cwd=scratch, capture_output=True, text=True, check=True).stdout
    assert diff
    (proj / "patches" / "drop-ep.patch").write_text("Subject: ignore --ep-size\n\n" + diff)
    r = recipe(proj, "ep8-dropped", patches=["drop-ep.patch"], expect="ep_size = 8")
    assert main(["run", r]) == 1
    store = Store(home / "results.sqlite")
    [run] = store.runs(recipe="ep8-dropped")
    assert run.status == "invalid" and run.config_verified is False
    assert any("ep_size: expected 8, /server_info says 1" in v for v in run.verification)
    assert store.samples([run.run_id]) == []


def _alive_servers(marker: str) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if marker in " ".join(p.info["cmdline"] or []):
                out.append(p)
        except psutil.Error:
            pass
    return out


def _client_connected(server: psutil.Process) -> bool:
    """Whether a client holds an established connection to one of `server`'s listening ports."""
    conns = getattr(server, "net_connections", server.connections)(kind="tcp")  # psutil < 6: connections
    ports = {c.laddr.port for c in conns if c.status == psutil.CONN_LISTEN}
    return any(c.status == psutil.CONN_ESTABLISHED and c.laddr.port in ports for c in conns)


def test_crash_mid_sweep_is_recorded_and_sweep_goes_on(proj, home, capsys):
    crash = recipe(proj, "crashes", extra_args="mini-crash-after-requests = 3")
    fine = recipe(proj, "fine")
    assert main(["run", crash, fine, "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    store = Store(home / "results.sqlite")
    by_recipe = {store.get_run(rid).recipe: store.get_run(rid) for _, rid in out["runs"]}
    failed, ok = by_recipe["crashes"], by_recipe["fine"]
    assert failed.status == "failed"
    assert "CUDA error" in (failed.log_tail or "") or "illegal memory access" in (failed.log_tail or "")
    assert failed.error.startswith("server crashed: ") and "illegal memory access" in failed.error  # the log's line
    assert failed.log_paths["server"].endswith("server.log")
    assert ok.status == "ok" and store.samples([ok.run_id])
    # No process of either run is left: the server and its scheduler child are gone.
    assert _alive_servers(str(home / "envs")) == []


def test_results_list_and_export(proj, home, capsys, tmp_path):
    assert main(["run", recipe(proj, "fine")]) == 0
    capsys.readouterr()
    assert main(["results"]) == 0
    assert "fine" in capsys.readouterr().out
    out = tmp_path / "runs.csv"
    assert main(["results", "--export", "csv", "-o", str(out)]) == 0
    text = out.read_text()
    assert "output_tok_s" in text and "fine" in text


def test_without_a_gpu_run_stops_after_the_static_check(proj, home, capsys):
    path = proj / "recipes" / "needs-gpu.toml"
    path.write_text(RECIPE.format(name="needs-gpu", patches="", expect="ep_size = 8", extra_args="")
                    .replace("gpus = 0\n", ""))
    from toolkit.run import machine

    if machine.has_cuda_gpu():
        pytest.skip("this machine has a GPU")
    assert main(["run", str(path)]) == 3
    err = capsys.readouterr().err
    assert "no CUDA GPU on this machine" in err and "needs-gpu" in err and "passed the static check" in err
    assert Store(home / "results.sqlite").runs(recipe="needs-gpu") == []


def test_server_killed_mid_sweep(proj, home, tmp_path):
    """kill -9 of the server during its benchmark: a failed run with the log tail, its orphaned
    scheduler child reaped by the group teardown, and the next recipe of the sweep still measured."""
    import os
    import signal
    import sys
    import time

    slow = recipe(proj, "killed", extra_args="mini-step-base-ms = 40")
    (proj / "recipes" / "killed.toml").write_text(
        (proj / "recipes" / "killed.toml").read_text().replace("output_len = 8", "output_len = 400"))
    fine = recipe(proj, "after")
    cli = subprocess.Popen([sys.executable, "-m", "toolkit", "run", slow, fine, "--fixed", "--json"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env={**os.environ, "PATCHBENCH_HOME": str(home)})
    victim = None
    deadline = time.monotonic() + 120
    while victim is None and time.monotonic() < deadline and cli.poll() is None:
        for p in _alive_servers(str(home / "envs")):
            try:
                argv = " ".join(p.cmdline())
                # the server itself (not its supervisor, whose argv names it too), with its child up and
                # the benchmark's client connected: mid-benchmark
                if ("sglang.launch_server" in argv and "supervisor.py" not in argv and p.children()
                        and _client_connected(p)):
                    victim = p
                    break
            except psutil.Error:
                pass
        time.sleep(0.05)
    assert victim is not None, "the first server never came up"
    os.kill(victim.pid, signal.SIGKILL)
    out, err = cli.communicate(timeout=300)
    assert cli.returncode == 1, err
    runs = json.loads(out)["runs"]
    store = Store(home / "results.sqlite")
    by_recipe = {store.get_run(rid).recipe: store.get_run(rid) for _, rid in runs}
    assert by_recipe["killed"].status == "failed" and by_recipe["killed"].log_tail
    assert "code -9" in by_recipe["killed"].error  # the server's own signal, passed on by its supervisor
    assert by_recipe["after"].status == "ok"
    assert _alive_servers(str(home / "envs")) == []


def test_until_verify_launches_checks_and_stops(proj, home):
    assert main(["run", recipe(proj, "verify-only", expect="ep_size = 8"), "--until", "verify"]) == 0
    store = Store(home / "results.sqlite")
    [run] = store.runs(recipe="verify-only")
    assert run.status == "ok" and run.config_verified is True and run.server_info["ep_size"] == 8
    assert store.samples([run.run_id]) == []
