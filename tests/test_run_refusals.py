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
    assert len([ln for ln in err.splitlines() if ln.strip()]) == 1, err  # refused before anything was built
    assert not Store(home / "results.sqlite").runs()
    # with a variant that differs, the copy is set aside (named) and the other pair is judged
    (proj / "recipes/mine/fast.toml").write_text('extends = "demo/fast"\n' + SHORT)
    assert main(["run", "mine/a", "mine/copy", "mine/fast", "--max-repeats", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["same_as_reference"] == ["mine/copy"]
    assert {v["recipe"] for v in out["sequential"]} == {"mine/fast"}


def test_a_killed_run_resumed_is_one_sweep_for_compare(tmp_path, home, monkeypatch, capsys):
    """`run A B` killed after its first launches and run again: the new launches join the killed
    call's sweep (the newest one holding both, not the reference's older one), so `compare` (newest
    sweep) reads the variant's every launch and the reference's launches of that sweep."""
    from toolkit.run import pipeline

    proj = demo_project(tmp_path, monkeypatch)
    (proj / "recipes/mine").mkdir()
    (proj / "recipes/mine/a.toml").write_text('extends = "demo/baseline"\n' + SHORT)
    # an A/A pair (two configurations of one speed): it keeps launching past the kill at --min-effect 0.001
    (proj / "recipes/mine/b.toml").write_text('extends = "demo/baseline"\n[server.env]\nPATCHBENCH_TEST_SIDE = "b"\n'
                                              + SHORT)
    real, calls = pipeline.run_once, []

    def killed_at_the_fourth(*args, **kwargs):  # B; B A; then killed: both launched in the killed call
        calls.append(1)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    assert main(["run", "mine/a", "--repeats", "1"]) == 0  # an earlier sweep of the reference alone
    monkeypatch.setattr(pipeline, "run_once", killed_at_the_fourth)
    assert main(["run", "mine/a", "mine/b", "--min-effect", "0.001"]) == 130
    monkeypatch.setattr(pipeline, "run_once", real)
    capsys.readouterr()
    assert main(["run", "mine/a", "mine/b", "--min-effect", "0.001", "--max-repeats", "3", "--json"]) == 0
    said = capsys.readouterr()
    out = json.loads(said.out)
    assert "resuming sweep" in said.err
    used = out["used"]
    assert len(used["mine/a"]) >= 2 and len(used["mine/b"]) >= 2
    runs = Store(home / "results.sqlite").runs()
    b_groups = {r.group_id for r in runs if r.status == "ok" and r.recipe == "mine/b"}
    assert b_groups == {out["group_id"]}  # the killed call's sweep, continued (not the reference's older one)
    assert main(["compare", "mine/a", "mine/b", "--min-effect", "0.001", "--json"]) == 0
    cmp = json.loads(capsys.readouterr().out)
    assert sorted(cmp["runs"]["mine/b"]) == sorted(used["mine/b"])
    # compare selects the reference's runs of both sweeps; the run's own JSON lists the earlier sweep's
    # (the reference alone: another campaign) apart, as reused, and its verdict rows read the judged ones
    reused = set(out.get("reused_runs", {}).get("mine/a", []))
    assert set(cmp["runs"]["mine/a"]) <= set(used["mine/a"]) | reused and len(cmp["runs"]["mine/a"]) >= 2
    assert not reused & set(used["mine/a"])
    assert all(set(r["base_runs"]) <= set(used["mine/a"]) for r in cmp["rows"]), cmp["rows"]
