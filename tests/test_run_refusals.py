"""`run A B` gives a verdict between A and B: it refuses before anything is built when that verdict
would not be about the recipes (another benchmark, the same recipe twice), and a recipe that is the
reference's own configuration gets no verdict against it."""

from __future__ import annotations

import json

from conftest import demo_project
from toolkit.cli import main
from toolkit.results.store import Store

SHORT = '[benchmark]\nconcurrency = [1]\nrepeats = 1\nnum_prompts = 4\noutput_len = 8\n[quality]\nlaunches = 0\n'


def test_run_refuses_pairs_whose_verdict_would_not_be_about_the_recipes(tmp_path, home, monkeypatch, capsys):
    proj = demo_project(tmp_path, monkeypatch)
    (proj / "recipes/mine").mkdir()
    (proj / "recipes/mine/a.toml").write_text('extends = "demo/baseline"\n' + SHORT)
    (proj / "recipes/mine/long.toml").write_text('extends = "demo/fast"\n' + SHORT.replace("output_len = 8", "output_len = 64"))
    (proj / "recipes/mine/copy.toml").write_text('extends = "mine/a"\n')
    assert main(["run", "mine/a", "mine/long"]) == 2
    assert "cannot compare: the [benchmark] of mine/a and mine/long differ now: output_len 8 vs 64" in capsys.readouterr().err
    assert main(["run", "mine/a", "mine/a"]) == 2
    assert "a recipe compared with itself" in capsys.readouterr().err
    assert not (home / "results.sqlite").exists() or not Store(home / "results.sqlite").runs()  # nothing launched
    assert main(["run", "mine/a", "mine/copy"]) == 2
    err = capsys.readouterr().err
    assert "mine/a and mine/copy are one configuration" in err and "same runs on both sides" in err
    assert not Store(home / "results.sqlite").runs()
    # with a variant that differs, the copy is set aside (named) and the other pair is judged
    (proj / "recipes/mine/fast.toml").write_text('extends = "demo/fast"\n' + SHORT)
    assert main(["run", "mine/a", "mine/copy", "mine/fast", "--max-repeats", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["same_as_reference"] == ["mine/copy"]
    assert {v["recipe"] for v in out["sequential"]} == {"mine/fast"}


def test_a_killed_run_resumed_is_one_sweep_for_compare(tmp_path, home, monkeypatch, capsys):
    """`run A B` killed after its first launches and run again: the new launches join the killed
    call's sweep, so `compare` (newest sweep) reads every launch the settled verdict used."""
    from toolkit.run import pipeline

    proj = demo_project(tmp_path, monkeypatch)
    (proj / "recipes/mine").mkdir()
    (proj / "recipes/mine/a.toml").write_text('extends = "demo/baseline"\n' + SHORT)
    (proj / "recipes/mine/b.toml").write_text('extends = "demo/slow"\n' + SHORT)
    real, calls = pipeline.run_once, []

    def killed_at_the_third(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(pipeline, "run_once", killed_at_the_third)
    assert main(["run", "mine/a", "mine/b"]) == 130
    monkeypatch.setattr(pipeline, "run_once", real)
    capsys.readouterr()
    assert main(["run", "mine/a", "mine/b", "--json"]) == 0
    said = capsys.readouterr()
    out = json.loads(said.out)
    assert "resuming sweep" in said.err
    used = out["used"]
    assert len(used["mine/a"]) >= 2 and len(used["mine/b"]) >= 2
    groups = {r.group_id for r in Store(home / "results.sqlite").runs() if r.status == "ok"}
    assert len(groups) == 1
    assert main(["compare", "mine/a", "mine/b", "--json"]) == 0
    cmp = json.loads(capsys.readouterr().out)
    assert sorted(cmp["runs"]["mine/a"]) == sorted(used["mine/a"]) and sorted(cmp["runs"]["mine/b"]) == sorted(used["mine/b"])
