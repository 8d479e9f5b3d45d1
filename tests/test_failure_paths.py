"""Failure paths a new user meets on the miniature: each is one line naming the recipe, the step and
what to do, with a non-zero exit, before anything is launched or stored wrongly."""

from __future__ import annotations

import pytest

from conftest import demo_project
from toolkit.cli import main
from toolkit.results.store import Store


def _error(capsys) -> str:
    text = capsys.readouterr().err
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), text  # one line, no traceback
    return lines[0]


def _no_runs(home) -> bool:
    return not (home / "results.sqlite").exists() or not Store(home / "results.sqlite").runs()


@pytest.mark.parametrize("flag, value, key", [
    ("port", "38555", "port"), ("host", '"0.0.0.0"', "host"), ("model-path", '"other/model"', "model"),
])
def test_a_flag_patchbench_passes_itself_in_server_args_is_refused_at_load(flag, value, key, home, tmp_path,
                                                                           monkeypatch, capsys):
    # `--port 38555` after patchbench's own `--port N` would win: the server listened on 38555 while
    # patchbench polled N, and the launch was stored failed as "not ready after timeout_s (hang)"
    proj = demo_project(tmp_path, monkeypatch)
    (proj / "recipes" / "demo" / "mine.toml").write_text(f'extends = "demo/baseline"\n[server.args]\n{flag} = {value}\n')
    assert main(["run", "demo/mine", "--repeats", "1"]) == 2
    line = _error(capsys)
    assert f"`server.args.{flag}`" in line and f"--{flag}" in line and f"{key} = " in line and "[server]" in line, line
    assert "mine.toml" in line, line
    assert _no_runs(home) and not (home / "envs").exists()
    # a [matrix] of such a flag is refused the same way, before any variant is launched
    (proj / "recipes" / "demo" / "mine.toml").write_text(
        f'extends = "demo/baseline"\n[matrix]\nserver.args.{flag} = [{value}]\n')
    assert main(["sweep", "demo/mine"]) == 2
    assert f"`server.args.{flag}`" in _error(capsys)
    assert _no_runs(home)


def test_a_server_dying_mid_benchmark_names_the_point_and_keeps_the_points_before_it(home, tmp_path, monkeypatch,
                                                                                   capsys):
    # the miniature dies at its 30th request: c=1 and c=4 (and their warm-ups) pass, c=16 does not, as a
    # real server that runs out of memory at the highest concurrency
    proj = demo_project(tmp_path, monkeypatch)
    (proj / "recipes" / "demo" / "dies.toml").write_text(
        'extends = "demo/baseline"\n[server.args]\nmini-crash-after-requests = 30\n[quality]\nlaunches = 0\n')
    assert main(["run", "demo/dies", "--repeats", "1"]) == 1
    out = capsys.readouterr().err
    assert "during the benchmark at concurrency 16; concurrency 1, 4 measured before it" in " ".join(out.split()), out
    store = Store(home / "results.sqlite")
    [run] = store.runs(recipe="demo/dies", status="failed")
    assert run.error.startswith("server crashed: ") and "at concurrency 16" in run.error, run.error
    tok = {s.point: s.value for s in store.samples([run.run_id]) if s.metric == "output_tok_s"}
    assert set(tok) == {1, 4} and all(v > 0 for v in tok.values()), tok  # what was measured is not lost
    assert main(["compare", "demo/baseline", "demo/dies"]) == 2  # a failed run is never a result


@pytest.mark.parametrize("fmt", ["csv", "hud", "json"])
def test_an_export_of_no_runs_is_an_error_not_an_empty_file(fmt, home, tmp_path, capsys):
    out = tmp_path / f"runs.{fmt}"
    assert main(["results", "--export", fmt, "-o", str(out)]) == 1
    line = _error(capsys)
    assert line.startswith("error: nothing to export: no ") and "results.sqlite" in line, line
    assert not out.exists()  # no header-only file a dashboard would ingest as "no regressions"
    assert main(["results", "--export", fmt]) == 1  # nor a bare header on stdout
    captured = capsys.readouterr()
    assert captured.out == "" and "nothing to export" in captured.err


def test_an_export_that_matches_no_run_names_the_filter(home, tmp_path, monkeypatch, capsys):
    demo_project(tmp_path, monkeypatch)
    assert main(["run", "demo/fast", "--repeats", "1"]) == 0
    capsys.readouterr()
    assert main(["results", "demo/fast", "--export", "csv"]) == 0
    assert "demo/fast" in capsys.readouterr().out
    assert main(["results", "demo/fast", "--status", "failed", "--export", "hud"]) == 1
    line = _error(capsys)
    assert "no failed runs of demo/fast" in line, line


def test_a_patch_listed_twice_is_refused_at_load_not_reported_as_already_in_the_base(home, tmp_path, monkeypatch,
                                                                                   capsys):
    proj = demo_project(tmp_path, monkeypatch)
    (proj / "recipes" / "demo" / "twice.toml").write_text(
        'extends = "demo/baseline"\n[patches]\nsglang = ["demo/faster-decode.patch", "demo/slower-decode.patch", '
        '"demo/faster-decode.patch"]\n')
    assert main(["run", "demo/twice", "--until", "check"]) == 2
    line = _error(capsys)
    assert "`patches.sglang` lists demo/faster-decode.patch twice (entries 1 and 3)" in line, line
    assert "twice.toml" in line and "already" not in line, line
    assert not (home / "trees").exists() and not (home / "envs").exists()
    # extending a recipe and naming its patch again is no duplicate: the stack extends the parent's
    (proj / "recipes" / "demo" / "again.toml").write_text(
        'extends = "demo/fast"\n[patches]\nsglang = ["demo/faster-decode.patch"]\n')
    assert main(["apply", "demo/again"]) == 0


def _launch_crash_patch(proj) -> str:
    """A patch (made with difflib from the miniature's own file) whose server raises at launch."""
    import difflib

    rel = "python/sglang/launch_server.py"
    old = (proj / "upstream" / "minisglang" / rel).read_text().splitlines(keepends=True)
    new = [line.replace("launch_server(server_args)", 'raise RuntimeError("boom at launch")') for line in old]
    assert new != old
    diff = "".join(difflib.unified_diff(old, new, f"a/{rel}", f"b/{rel}"))
    (proj / "patches" / "demo" / "boom.patch").write_text(f"Subject: boom\n\ndiff --git a/{rel} b/{rel}\n{diff}")
    return "demo/boom.patch"


def test_attribute_with_a_prefix_that_cannot_be_measured_says_why_and_fails(home, tmp_path, monkeypatch, capsys):
    # a row of dashes and exit 0 read as "attributed"; the failure was one of many lines on stderr
    proj = demo_project(tmp_path, monkeypatch)
    patch = _launch_crash_patch(proj)
    (proj / "recipes" / "demo" / "stack.toml").write_text(
        f'extends = "demo/fast"\n[patches]\nsglang = ["{patch}"]\n[quality]\nlaunches = 0\n')
    assert main(["attribute", "demo/stack", "--repeats", "2"]) == 1
    captured = capsys.readouterr()
    errors = [line for line in captured.err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, captured.err
    assert "prefix 2 (+demo/boom.patch) not measured: run " in errors[0], errors[0]
    assert "failed: server crashed: RuntimeError: boom at launch (log: " in errors[0] and "server.log)" in errors[0]
    assert "demo/faster-decode.patch" in captured.out  # the patch before it is still attributed
    assert main(["attribute", "demo/stack", "--repeats", "2", "--json"]) == 1
    import json

    data = json.loads(capsys.readouterr().out)
    assert len(data["unmeasured"]) == 1 and "boom at launch" in data["unmeasured"][0]


def test_compare_of_a_recipe_whose_runs_failed_says_why_instead_of_run_them_first(home, tmp_path, monkeypatch,
                                                                                 capsys):
    proj = demo_project(tmp_path, monkeypatch)
    patch = _launch_crash_patch(proj)
    (proj / "recipes" / "demo" / "boom.toml").write_text(
        f'extends = "demo/baseline"\n[patches]\nsglang = ["{patch}"]\n[quality]\nlaunches = 0\n')
    (proj / "recipes" / "demo" / "never.toml").write_text('extends = "demo/fast"\n')
    assert main(["run", "demo/baseline", "--repeats", "1"]) == 0
    assert main(["run", "demo/boom", "--repeats", "1"]) == 1
    capsys.readouterr()
    assert main(["compare", "demo/baseline", "demo/boom"]) == 2
    line = " ".join(_error(capsys).split())
    assert "demo/boom: its stored run: 1 failed (newest " in line, line
    assert "failed: server crashed: RuntimeError: boom at launch)" in line, line
    assert "run them first" not in line and "`patchbench results demo/boom`" in line, line
    # a recipe never run is still told to run first
    assert main(["compare", "demo/baseline", "demo/never"]) == 2
    assert "run them first" in _error(capsys)


def test_a_home_the_disk_refuses_is_one_line_naming_the_recipe_step_and_path(tmp_path, monkeypatch, capsys):
    # a read-only file system (/sys is one), as a shared cache of another user or a read-only mount: the
    # error was "internal error in patchbench apply: PermissionError ..." (a bug, seemingly)
    import os

    ro = "/sys/kernel/mm"
    try:
        os.mkdir(f"{ro}/.patchbench-probe")
        os.rmdir(f"{ro}/.patchbench-probe")
        pytest.skip(f"{ro} is writable here")
    except OSError:
        if not os.path.isdir(ro):
            pytest.skip(f"no {ro} on this machine")
    demo_project(tmp_path, monkeypatch)
    monkeypatch.setenv("PATCHBENCH_HOME", ro)
    for argv, where in ((["apply", "demo/baseline"], "recipe demo/baseline: step apply: "),
                        (["build", "demo/fast"], "recipe demo/fast: step apply: ")):
        assert main(argv) == 2
        line = _error(capsys)
        assert line.startswith(f"error: {where}") and f"{ro}/trees" in line, line
        assert "internal error" not in line and "PATCHBENCH_HOME" in line, line


def test_a_full_disk_is_said_as_such(tmp_path, monkeypatch, capsys):
    import errno

    from toolkit.tree import applied

    demo_project(tmp_path, monkeypatch)
    monkeypatch.setenv("PATCHBENCH_HOME", str(tmp_path / "home"))

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "home" / "trees" / "x"))

    monkeypatch.setattr(applied.tempfile, "mkdtemp", full)
    assert main(["build", "demo/fast"]) == 1
    line = _error(capsys)
    assert line.startswith("error: recipe demo/fast: step apply: No space left on device: ") and "env gc" in line, line


def test_run_until_check_of_a_patch_that_does_not_apply_ends_with_its_error(home, tmp_path, monkeypatch, capsys):
    proj = demo_project(tmp_path, monkeypatch)
    fast = (proj / "patches" / "demo" / "faster-decode.patch").read_text()
    (proj / "patches" / "demo" / "stale.patch").write_text(fast.replace("-STEP_BASE_S = 0.012", "-STEP_BASE_S = 0.099"))
    (proj / "recipes" / "demo" / "stale.toml").write_text(
        'extends = "demo/baseline"\n[patches]\nsglang = ["demo/stale.patch"]\n')
    assert main(["run", "demo/stale", "--until", "check"]) == 1
    err = capsys.readouterr().err
    last = [line for line in err.splitlines() if line.strip()][-1]
    assert last.startswith("error: recipe demo/stale: step apply: patch demo/stale.patch does not apply"), err
    assert "@@ -18,7 +18,7 @@" in last and "as asked" not in err, err
    assert main(["run", "demo/baseline", "--until", "check"]) == 0
    assert "stopped after `check` as asked" in capsys.readouterr().err


def test_ctrl_c_says_interrupted_in_one_line_and_speaks_of_runs_only_where_runs_are_made(home, tmp_path,
                                                                                        monkeypatch, capsys):
    from toolkit import cli
    from toolkit.commands import apply

    demo_project(tmp_path, monkeypatch)

    def ctrl_c(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(apply, "apply_recipe", ctrl_c)
    assert main(["apply", "demo/baseline"]) == 130
    assert _error(capsys) == "error: interrupted"  # `apply` stores no run: no word of runs stored
    monkeypatch.setattr(cli, "build_parser", ctrl_c)  # Ctrl-C while the verbs' modules load
    assert main(["results"]) == 130
    assert _error(capsys) == "error: interrupted"


@pytest.mark.parametrize("text", ["", '[server]\nmodel = "minisglang/tiny"\ngpus = 0\n'])
def test_a_recipe_without_sources_is_refused_before_an_empty_env_is_built(text, home, tmp_path, monkeypatch,
                                                                          capsys):
    # an empty file, or one that forgot its `extends`: `apply` printed an empty table and exited 0, `build`
    # made an empty env, and `run` failed at the check with "No module named 'sglang'"
    proj = demo_project(tmp_path, monkeypatch)
    (proj / "recipes" / "demo" / "mine.toml").write_text(text)
    for argv, step in ((["apply", "demo/mine"], "apply"), (["build", "demo/mine"], "apply"),
                       (["run", "demo/mine", "--repeats", "1"], "apply"), (["patches", "edit", "demo/mine"], "patches edit")):
        assert main(argv) == 2, argv
        line = _error(capsys)
        assert line.startswith(f"error: recipe demo/mine: step {step}: no [sources] in ") and "mine.toml" in line, line
        assert 'extends = "demo/baseline"' in line, line
    assert not (home / "envs").exists() and _no_runs(home)
    assert not (proj / "recipes" / "demo" / "mine.lock.json").exists()
    if not text:  # `show` of an empty file says what is missing, not an empty table with exit 0
        assert main(["show", "demo/mine"]) == 2
        assert "no [sources] in " in _error(capsys)


@pytest.mark.parametrize("design", [["--repeats", "2"], []])  # the fixed design and the sequential default
def test_run_of_several_recipes_launches_nothing_when_one_fails_to_prepare(design, home, tmp_path, monkeypatch,
                                                                           capsys):
    # demo/stale's patch does not apply: a comparison with it cannot be made, so demo/baseline (prepared first,
    # and fine) is not launched for its repeats either; the failure names the recipe and the step
    proj = demo_project(tmp_path, monkeypatch)
    fast = (proj / "patches" / "demo" / "faster-decode.patch").read_text()
    (proj / "patches" / "demo" / "stale.patch").write_text(fast.replace("-STEP_BASE_S = 0.012", "-STEP_BASE_S = 0.099"))
    (proj / "recipes" / "demo" / "stale.toml").write_text(
        'extends = "demo/baseline"\n[patches]\nsglang = ["demo/stale.patch"]\n')
    assert main(["run", "demo/baseline", "demo/stale", *design]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "error: recipe demo/stale: step apply: patch demo/stale.patch does not apply" in err, err
    assert "nothing launched: demo/stale failed to prepare, so demo/baseline was not launched either" in err, err
    assert "server ready" not in err and _no_runs(home), err
