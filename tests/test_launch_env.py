"""What one launch must not inherit from an earlier one: tuned choices (toolkit.run.launch_env).

sglang 0.5.23 saves FlashInfer's tuned tactics and FlashInfer's SM120 sparse-MLA cost profile on disk
and would load the first launch's at every later launch; patchbench's launches each measure afresh
(their own FLASHINFER_AUTOTUNE_DIR, no autotune-cache reuse) unless the recipe asks for reuse."""

from __future__ import annotations

from pathlib import Path

from toolkit.run.launch_env import launch_environ


def test_each_launch_tunes_afresh_in_its_own_directory_unless_the_recipe_says_otherwise(tmp_path):
    env_vars = {"PATH": "/env/bin", "FLASHINFER_WORKSPACE_BASE": "/env/jit"}
    one = launch_environ(env_vars, {}, tmp_path / "run-1")
    two = launch_environ(env_vars, {}, tmp_path / "run-2")
    assert one["SGLANG_FLASHINFER_AUTOTUNE_CACHE"] == "0" and one["FLA_CACHE_RESULTS"] == "0"
    assert one["FLASHINFER_AUTOTUNE_DIR"] == str(tmp_path / "run-1" / "flashinfer-autotune")
    assert Path(one["FLASHINFER_AUTOTUNE_DIR"]).is_dir()
    assert one["FLASHINFER_AUTOTUNE_DIR"] != two["FLASHINFER_AUTOTUNE_DIR"]
    assert one["FLASHINFER_WORKSPACE_BASE"] == "/env/jit"  # compiled kernels stay the env's
    mine = launch_environ(env_vars, {"SGLANG_FLASHINFER_AUTOTUNE_CACHE": "1", "FLASHINFER_AUTOTUNE_DIR": str(tmp_path / "tuned")},
                          tmp_path / "run-3")
    assert mine["SGLANG_FLASHINFER_AUTOTUNE_CACHE"] == "1" and mine["FLASHINFER_AUTOTUNE_DIR"] == str(tmp_path / "tuned")


def test_the_server_of_a_run_is_launched_with_them(tmp_path, monkeypatch, home):
    """Through `run` on the miniature: the environment the launch hands the server process."""
    from conftest import demo_project
    from toolkit.cli import main
    from toolkit.run import server as srv

    seen = []
    real = srv.launch_ready

    def launch_ready(*args, environ, **kwargs):
        seen.append(environ)
        return real(*args, environ=environ, **kwargs)

    monkeypatch.setattr(srv, "launch_ready", launch_ready)
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")  # a shell that writes no bytecode (this CI box's)
    demo_project(tmp_path, monkeypatch)
    assert main(["run", "demo/baseline", "--repeats", "2"]) == 0
    assert len(seen) == 2
    # the env's processes keep their bytecode in the env's own pycache/ (its tree stays as published):
    # the first launch compiled what the server imports, the second read it
    env = Path(seen[0]["VIRTUAL_ENV"])
    assert all(e["PYTHONPYCACHEPREFIX"] == str(env / "pycache") and e["PYTHONDONTWRITEBYTECODE"] == "" for e in seen)
    compiled = list((env / "pycache").rglob("sglang/srt/*.pyc"))
    assert compiled and not list((env / "lib").rglob("__pycache__/*.pyc"))
    dirs = {e["FLASHINFER_AUTOTUNE_DIR"] for e in seen}
    assert len(dirs) == 2 and all(Path(d).parent.parent.name == "runs" for d in dirs)
    assert all(e["SGLANG_FLASHINFER_AUTOTUNE_CACHE"] == "0" for e in seen)
    # and each run stores what it launched with
    from toolkit.results.store import Store

    runs = Store(home / "results.sqlite").runs()
    assert sorted(r.extra["launch_env"]["FLASHINFER_AUTOTUNE_DIR"] for r in runs) == sorted(dirs)


def test_what_the_shell_hands_the_server_is_recorded_and_compare_names_a_difference(tmp_path, monkeypatch, home,
                                                                                    capsys):
    """A run-time variable exported in one shell and not in the next (sglang reads dozens) is a
    difference between the two runs, named beside the others."""
    import json

    from conftest import demo_project
    from toolkit.cli import main
    from toolkit.results.store import Store

    demo_project(tmp_path, monkeypatch)
    monkeypatch.setenv("SGLANG_ENABLE_POST_CAPTURE_KV_SIZING", "1")
    monkeypatch.setenv("UNRELATED_VARIABLE", "x")
    assert main(["run", "demo/baseline", "--repeats", "1"]) == 0
    said = capsys.readouterr()
    assert "the server inherits from the shell (recorded): SGLANG_ENABLE_POST_CAPTURE_KV_SIZING=1" in said.out + said.err
    monkeypatch.delenv("SGLANG_ENABLE_POST_CAPTURE_KV_SIZING")
    assert main(["run", "demo/fast", "--repeats", "1"]) == 0
    runs = {r.recipe: r for r in Store(home / "results.sqlite").runs()}
    inherited = runs["demo/baseline"].extra["launch_env"]["inherited"]
    assert inherited.get("SGLANG_ENABLE_POST_CAPTURE_KV_SIZING") == "1" and "UNRELATED_VARIABLE" not in inherited
    assert "SGLANG_CACHE_DIR" not in inherited  # the env's own settings are not the shell's
    assert "SGLANG_ENABLE_POST_CAPTURE_KV_SIZING" not in runs["demo/fast"].extra["launch_env"]["inherited"]
    capsys.readouterr()
    assert main(["compare", "demo/baseline", "demo/fast", "--json"]) == 0
    diffs = json.loads(capsys.readouterr().out)["differences"]
    assert any("shell variable SGLANG_ENABLE_POST_CAPTURE_KV_SIZING: 1 -> unset" in d for d in diffs), diffs
