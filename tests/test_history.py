"""Tracked upstream history: `track` over the miniature's releases (real wheels on a local index, one env
per release, real servers), `history`'s change points by Apache Otava (its own env, made once per test
cache), and the automatic bisects that name the planted commits."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO_ROOT, TEST_CACHE, cli_json
from toolkit.cli import main
from toolkit.history import otava
from toolkit.resources import PROBES_DIR
from toolkit.results.store import Store

sys.path.insert(0, str(REPO_ROOT / "upstream"))
import mini_releases  # noqa: E402

# Applies where the decode step's fixed cost is still 12 ms: before the planted change, not after.
COST_PATCH = """\
Subject: cost: a comment beside the decode step's fixed cost

diff --git a/python/sglang/srt/model_executor/cost.py b/python/sglang/srt/model_executor/cost.py
--- a/python/sglang/srt/model_executor/cost.py
+++ b/python/sglang/srt/model_executor/cost.py
@@ -19,3 +19,3 @@
 # Fixed cost of one decode step (reading the weights once per step).
-STEP_BASE_S = 0.012
+STEP_BASE_S = 0.012  # checked by patchbench's history test
 # Added per running sequence in a decode step (reading that sequence's KV cache).
"""


@pytest.fixture
def otava_env(monkeypatch):
    """Otava's own env, made once in the test cache (built once for concurrent callers: toolkit.build_once)."""
    monkeypatch.setenv("PATCHBENCH_OTAVA_ENV", str(TEST_CACHE / "otava-0.8.0"))
    try:
        return otava.ensure_env(TEST_CACHE)
    except Exception as exc:  # noqa: BLE001 - no PyPI here
        pytest.skip(f"apache-otava not installable here: {exc}")


@pytest.fixture(scope="module")
def four_releases():
    """0.1.0 .. 0.1.3; 0.1.2 doubles the decode step's fixed cost."""
    return mini_releases.build(TEST_CACHE / "mini-releases-track4", plant="regression", at="0.1.2", n_releases=4)


def _env(monkeypatch, meta) -> None:
    monkeypatch.setenv("PATCHBENCH_MINI_INDEX", meta["index"])
    monkeypatch.setenv("PATCHBENCH_RECIPES", str(REPO_ROOT / "recipes"))


# -- Otava on synthetic series --------------------------------------------------------------------

def test_a_step_counts_when_otava_proposes_only_a_dip_beside_it():
    """CI, cold and loaded (2026-12-04): two releases just before the planted 2x gain ran slow, Otava
    proposed that dip (p < 0.001) and dropped the step; the step's own t across the series passed
    the series-wide test by far. The step counts, where it is; a flat series still shows nothing."""
    from toolkit.history.change_verdict import ChangePoint, judge

    series = [77.5, 79.1, 82.1, 85.2, 74.1, 77.3, 76.5, 75.2, 54.7, 59.2, 112, 133, 133, 150]
    dip = ChangePoint(8, -27.3, 0.376, 78.4, 57.0, 3.44, 2.25, 3.7e-5, otava_pvalue=3.7e-5)
    [step] = judge(series, [dip], alpha=0.01, min_magnitude=0.03)
    assert step.index == 10 and step.forward_change_percent > 50 and step.pvalue < 1e-3
    assert step.otava_pvalue is None  # not Otava's: the report does not quote a p of Otava's for it
    rng = random.Random(3)
    flat = [100 * (1 + rng.gauss(0, 0.03)) for _ in range(14)]
    assert judge(flat, [], alpha=0.01, min_magnitude=0.03) == []


def _steps(rng: random.Random, levels: list[tuple[int, float]], noise: float) -> list[float]:
    return [lvl * (1 + rng.gauss(0, noise)) for n, lvl in levels for _ in range(n)]


def test_otava_finds_known_change_points_and_none_on_a_flat_series(home, otava_env):
    rng = random.Random(7)
    values = _steps(rng, [(30, 100.0), (25, 92.0), (35, 180.0)], 0.01)
    flats = [_steps(random.Random(seed), [(200, 100.0)], 0.02) for seed in (1, 2, 3)]
    stepped, *flat = otava.detect_many([values, *flats], home)
    found = stepped.change_points
    assert [c.index for c in found] == [30, 55]
    assert found[0].forward_change_percent == pytest.approx(-8, abs=1.5) and found[0].pvalue < 0.001
    assert found[0].direction(higher_is_better=True) == "worse"
    assert found[1].direction(higher_is_better=True) == "better" and found[1].magnitude > 0.8
    assert [d.change_points for d in flat] == [[], [], []]
    assert stepped.otava == "0.8.0" and max(d.analysis_s for d in flat) < 1.0


def test_not_enough_history_is_otavas_own_minimum(home, otava_env):
    with pytest.raises(otava.NotEnoughHistory, match="not enough history"):
        otava.detect([100.0, 100.5, 200.0], home)

    # Otava itself, without patchbench's guard: nothing in 3 points, however large the step; 4 suffice
    series = [[100.0, 100.5, 200.0], [100.0, 200.0, 200.5], [100.0, 100.5, 200.0, 200.5]]
    res = subprocess.run([str(otava_env), str(PROBES_DIR / "otava_detect.py")], check=True,
                         input=json.dumps({"series": series}), capture_output=True, text=True)
    found = [[c["index"] for c in r["change_points"]] for r in json.loads(res.stdout)["results"]]
    assert found == [[], [], [2]]


# -- track: resume, one lock per workspace, a stack that does not apply, bad input -----------------

def test_track_resumes_after_a_kill_and_holds_one_lock(home, monkeypatch, capsys, four_releases, otava_env):
    _env(monkeypatch, four_releases)
    argv = [sys.executable, "-m", "toolkit", "track", "demo/update", "--source", "sglang", "--releases"]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    store = Store(home / "results.sqlite")
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if (home / "results.sqlite").exists() and [r for r in store.tracked_runs("demo/update") if r.status == "ok"]:
                break
            time.sleep(0.2)
        # the workspace is busy: a second track refuses at once
        assert main(["track", "demo/update", "--source", "sglang", "--releases"]) == 1
        assert "another `patchbench track` is running" in capsys.readouterr().err
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    before = {r.extra["track"]["point"]["id"] for r in store.tracked_runs("demo/update") if r.status == "ok"}
    assert before and len(before) < 4
    rc, out = cli_json(capsys, ["track", "demo/update", "--source", "sglang", "--releases"])
    assert rc == 0
    assert set(out["already_measured"]) == before
    assert sorted(out["measured"] + out["already_measured"]) == four_releases["versions"]
    ok = [r for r in store.tracked_runs("demo/update") if r.status == "ok"]
    assert sorted(r.extra["track"]["point"]["id"] for r in ok) == four_releases["versions"]  # once each
    assert {r.recipe for r in ok} == {f"demo/update@{v}" for v in four_releases["versions"]}
    rc, again = cli_json(capsys, ["track", "demo/update", "--source", "sglang", "--releases"])
    assert rc == 0 and again["measured"] == [] and len(again["already_measured"]) == 4

    # history: four points, the doubled step cost between 0.1.1 and 0.1.2 is a change point. One run
    # per point on a loaded box reads e.g. 81, 75, 41, 44 (t across the split p = 0.009): four points
    # cannot reach the default 0.01 per series after the 3-split correction, so the test states 0.05.
    # Even so the split's t has 2 df: CI (2026-12-05, every run flagged "other processes used 1.8-2.0 of
    # 2 CPUs") read 76, 87 | 44, 44, p 0.019, 0.058 corrected: not found. Found on a quiet box; on a busy
    # one (the runs' own host flags say so) found or nothing, never another place
    rc, hist = cli_json(capsys, ["history", "demo/update", "--metric", "output_tok_s@1",
                                 "--alpha", "0.05", "--max-pvalue", "0.05"])
    assert rc == 0 and [e["label"] for e in hist["series"]] == four_releases["versions"]
    found = [(c["before"], c["after"], c["direction"]) for c in hist["change_points"]]
    assert found == [("0.1.1", "0.1.2", "worse")] or (not found and _busy(ok)), (found, hist["series"])
    assert Path(hist["plot"]["png"]).stat().st_size > 0 and "<svg" in Path(hist["plot"]["svg"]).read_text()
    if found:
        assert "change point 0.1.1 -&gt; 0.1.2" in Path(hist["plot"]["html"]).read_text()
    # a metric the runs do not have at that point, and one they do not have at all: exit 2, what is known
    assert main(["history", "demo/update", "--metric", "output_tok_s@4"]) == 2
    assert "have output_tok_s at 1 only" in capsys.readouterr().err
    assert main(["history", "demo/update", "--metric", "decode_tok_s"]) == 2
    assert "they have: " in capsys.readouterr().err


def tracked_ok_runs(home: Path, recipe: str = "demo/update") -> dict:
    """The ok runs a track stored, per point id."""
    out: dict = {}
    for r in Store(home / "results.sqlite").tracked_runs(recipe) if (home / "results.sqlite").exists() else []:
        if r.status == "ok":
            out[r.extra["track"]["point"]["id"]] = out.get(r.extra["track"]["point"]["id"], 0) + 1
    return out


def kill_track_in_second_pass(home: Path, argv: list[str], *, launched: int) -> dict:
    """Start `patchbench track ...` (argv) in its own process group and SIGKILL it once `launched` ok runs are
    stored (its second pass begun); the ok runs per point it left."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PATCHBENCH_HOME": str(home)}
    proc = subprocess.Popen([sys.executable, "-m", "toolkit", *argv], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 180
    try:
        while time.monotonic() < deadline and proc.poll() is None and sum(tracked_ok_runs(home).values()) < launched:
            time.sleep(0.1)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return tracked_ok_runs(home)


def test_a_track_killed_between_its_passes_gives_the_short_points_their_runs(home, monkeypatch, capsys,
                                                                                four_releases):
    """`track --repeats 2` measures every point once, then once more in reverse order; killed in the second
    pass, it leaves points with one run of the two asked. The next track gives those points the run they
    lack (not counted as done, and not launched twice more), then goes on: every point ends with 2."""
    _env(monkeypatch, four_releases)
    argv = ["track", "demo/update", "--source", "sglang", "--releases", "--limit", "3", "--repeats", "2"]
    before = kill_track_in_second_pass(home, argv, launched=4)  # its first point, the newest, has both runs
    short = sorted(p for p, n in before.items() if n < 2)
    assert short and len(before) == 3, before  # killed between the passes: some points have one run
    rc, out = cli_json(capsys, argv)
    assert rc == 0 and set(short) <= set(out["measured"]), (before, out)
    assert not set(short) & set(out["already_measured"])
    after = tracked_ok_runs(home)
    assert all(after[p] == 2 for p in before), (before, after)  # each short point got the one run it lacked
    rc, again = cli_json(capsys, argv)  # and they are done now
    assert set(before) <= set(again["already_measured"]) and not set(before) & set(again["measured"])


def test_a_point_that_failed_to_build_is_built_again_once_its_build_table_is_edited(home, monkeypatch, capsys,
                                                                                   tmp_path, four_releases):
    """A point whose env did not build (here: a [build] package no index has) is recorded `build-failed`
    and not tried again while nothing changed; once [build] is edited (the package dropped) the next
    track builds and measures it, and says why (was: recorded done for good, whatever the recipe became)."""
    import shutil

    _env(monkeypatch, four_releases)
    recipes = tmp_path / "recipes"
    shutil.copytree(REPO_ROOT / "recipes" / "demo", recipes / "demo")
    toml = recipes / "demo" / "update.toml"
    good = toml.read_text()
    assert '[build]\nmode = "full"\n' in good
    toml.write_text(good.replace('[build]\nmode = "full"\n',
                                 '[build]\nmode = "full"\npackages = ["patchbench-no-such-package==0.0.1"]\n'))
    monkeypatch.setenv("PATCHBENCH_RECIPES", str(recipes))
    argv = ["track", "demo/update", "--source", "sglang", "--releases", "--limit", "1"]
    rc, out = cli_json(capsys, argv)
    assert out["not_measured"]["0.1.0"]["outcome"] == "build-failed", out
    rc, again = cli_json(capsys, argv)  # nothing changed: not built again
    assert "0.1.0" in again["already_measured"] and "0.1.0" not in again["measured"], again
    toml.write_text(good)  # [build] edited: the package dropped
    rc, fixed = cli_json(capsys, argv)
    assert rc == 0 and fixed["measured"] == ["0.1.0"], fixed
    assert "[build] edited since it failed to build" in json.dumps(fixed), fixed


def patched_recipes(tmp_path: Path, releases: dict) -> Path:
    """A recipes folder with `patched`: demo/update plus a patch that applies up to 0.1.1 only."""
    proj = tmp_path / "proj"
    (proj / "patches").mkdir(parents=True)
    (proj / "patches" / "cost-comment.patch").write_text(COST_PATCH)
    recipe = (REPO_ROOT / "recipes" / "demo" / "update.toml").read_text()
    recipe = recipe.replace('index = "${PATCHBENCH_MINI_INDEX:-../../.patchbench/mini-releases/index}"',
                            f'index = "{releases["index"]}"')
    (proj / "recipes").mkdir()
    (proj / "recipes" / "patched.toml").write_text(recipe + '\n[patches]\nsglang = ["cost-comment.patch"]\n')
    return proj / "recipes"


def test_points_where_the_stack_does_not_apply_are_recorded(home, monkeypatch, capsys, tmp_path, four_releases):
    _env(monkeypatch, four_releases)
    monkeypatch.setenv("PATCHBENCH_RECIPES", str(patched_recipes(tmp_path, four_releases)))
    rc, out = cli_json(capsys, ["track", "patched", "--source", "sglang", "--releases", "--since", "0.1.1"])
    assert rc == 0 and out["measured"] == ["0.1.1"]
    assert {k: v["outcome"] for k, v in out["not_measured"].items()} == {"0.1.2": "does-not-apply",
                                                                        "0.1.3": "does-not-apply"}
    assert "does not apply" in out["not_measured"]["0.1.2"]["reason"]
    # recorded: the next track does not try them again
    rc, again = cli_json(capsys, ["track", "patched", "--source", "sglang", "--releases", "--since", "0.1.1"])
    assert again["measured"] == [] and sorted(again["already_measured"]) == ["0.1.1", "0.1.2", "0.1.3"]
    rc, hist = cli_json(capsys, ["history", "patched", "--metric", "output_tok_s@1"])
    assert [(e["label"], e["status"]) for e in hist["series"]] == [
        ("0.1.1", "measured"), ("0.1.2", "does-not-apply"), ("0.1.3", "does-not-apply")]
    assert hist["not_enough_history"].startswith("not enough history: 1 measured point")
    capsys.readouterr()
    assert main(["history", "patched", "--metric", "output_tok_s@1"]) == 0  # the table, as a person reads it
    text = capsys.readouterr().out
    assert "does-not-apply: recipe patched" in text and "not enough history" in text


def test_an_edited_recipe_is_measured_again_not_read_as_a_change_point(home, monkeypatch, capsys, tmp_path,
                                                                       four_releases, otava_env):
    """Issue 29: three releases tracked, then the recipe's step cost fixed at 16 ms (which hides the
    planted regression at 0.1.2): the edit is no change point; `track` measures the old points again
    and `history` says which runs it left out."""
    _env(monkeypatch, four_releases)
    recipes = patched_recipes(tmp_path, four_releases)
    toml = recipes / "edited.toml"
    toml.write_text((recipes / "patched.toml").read_text().split("\n[patches]")[0])
    monkeypatch.setenv("PATCHBENCH_RECIPES", str(recipes))
    rc, out = cli_json(capsys, ["track", "edited", "--source", "sglang", "--releases", "--limit", "3"])
    assert rc == 0 and out["measured"] == ["0.1.0", "0.1.1", "0.1.2"] and out["measured_again"] == {}
    toml.write_text(toml.read_text().replace("[server.args]\n", "[server.args]\nmini-step-base-ms = 16\n"))
    edit = "server arg mini-step-base-ms: (unset) -> 16"

    rc, out = cli_json(capsys, ["track", "edited", "--source", "sglang", "--releases", "--limit", "1"])
    assert rc == 0 and out["measured"] == ["0.1.0"] and out["measured_again"] == {"0.1.0": [edit]}
    rc, hist = cli_json(capsys, ["history", "edited", "--metric", "output_tok_s@1"])
    assert [(e["label"], e["status"], e["older_definition_runs"]) for e in hist["series"]] == [
        ("0.1.0", "measured", 1), ("0.1.1", "older-definition", 1), ("0.1.2", "older-definition", 1)]
    assert hist["series"][1]["reason"] == edit and hist["change_points"] == []
    assert hist["older_definition"] == [{"changed": edit, "points": ["0.1.0", "0.1.1", "0.1.2"]}]
    assert hist["not_enough_history"].startswith("not enough history: 1 measured point")
    capsys.readouterr()
    assert main(["history", "edited", "--metric", "output_tok_s@1"]) == 0
    text = capsys.readouterr().out
    assert "older-definition" in text and "2 point(s) not measured since (0.1.1, 0.1.2)" in text
    assert "2 point(s) not measured since (0.1.1, 0.1.2)" in Path(hist["plot"]["html"]).read_text()

    rc, out = cli_json(capsys, ["track", "edited", "--source", "sglang", "--releases"])
    assert rc == 0 and out["measured"] == ["0.1.1", "0.1.2", "0.1.3"]
    assert out["measured_again"] == {"0.1.1": [edit], "0.1.2": [edit]}
    rc, hist = cli_json(capsys, ["history", "edited", "--metric", "output_tok_s@1"])
    assert [(e["label"], e["status"], e["n_runs"]) for e in hist["series"]] == [
        (v, "measured", 1) for v in four_releases["versions"]]
    # 16 ms everywhere: neither the edit nor the hidden plant (2x) is a change point; one single-run
    # point slowed 10-15% by CI's load (4 workers on 2 cores) can be, at the verdict's stated alpha
    assert all(abs(c["change_pct"]) < 25 for c in hist["change_points"]), hist["change_points"]
    values = [e["value"] for e in hist["series"]]
    assert max(values) / min(values) < 1.5  # the plant unhidden would read 2x; load alone slows a point
    capsys.readouterr()
    assert main(["history", "edited", "--metric", "output_tok_s@1"]) == 0
    text = capsys.readouterr().out
    assert f"runs of an older definition of edited left out at 3 point(s) (0.1.0, 0.1.1, 0.1.2): {edit}" in text
    assert "not measured since" not in text and ("no change points" in text or hist["change_points"]), text


def test_bad_input_exits_2_with_what_is_known(home, monkeypatch, capsys, tmp_path, four_releases):
    _env(monkeypatch, four_releases)
    assert main(["track", "demo/update", "--source", "flashinfer", "--releases"]) == 2
    assert "has no source `flashinfer`" in capsys.readouterr().err
    assert main(["track", "demo/update", "--source", "sglang"]) == 2
    assert "track it with --releases" in capsys.readouterr().err
    assert main(["history", "demo/update", "--metric", "output_tok_s@1"]) == 2
    assert "nothing tracked for recipe demo/update" in capsys.readouterr().err
    monkeypatch.setenv("PATCHBENCH_RECIPES", str(_git_recipe(tmp_path, four_releases["repo"])))
    assert main(["track", "gitsrc", "--source", "sglang", "--every", "2"]) == 2
    assert "is a git source: name the branch to track with --branch" in capsys.readouterr().err
    assert main(["track", "gitsrc", "--source", "sglang", "--releases"]) == 2
    rc, out = cli_json(capsys, ["track", "gitsrc", "--source", "sglang", "--branch", "main", "--since",
                             "2026-01-01T09:00:00+00:00", "--limit", "0"])
    assert rc == 0 and [p["kind"] for p in out["points"]] == ["commit"] * len(out["points"])
    assert out["points"] and all(p["date"] >= "2026-01-01T09:00:00" for p in out["points"])
    orders = [p["order"] for p in out["points"]]
    assert orders == sorted(orders)
    # the next command it suggests reads a point the recipe measures (it said output_tok_s@1 to a
    # recipe measuring concurrency 8 only, e.g. recipes/cpu/baseline, and decode_tok_s recipes)
    recipes = Path(os.environ["PATCHBENCH_RECIPES"])
    text = (recipes / "gitsrc.toml").read_text()
    assert "concurrency = [1]" in text
    (recipes / "gitsrc8.toml").write_text(text.replace("concurrency = [1]", "concurrency = [8]"))
    assert main(["track", "gitsrc8", "--source", "sglang", "--branch", "main", "--since",
                 "2026-01-01T09:00:00+00:00", "--limit", "0"]) == 0
    assert "next: patchbench history gitsrc8 --source sglang --metric output_tok_s@8" in capsys.readouterr().out


def _busy(runs) -> list[str]:
    """The host flags of the runs (other processes' CPU over their windows, steal): a box that cannot
    promise a 2x step stands out of one run per point."""
    from toolkit.results.box_flags import host_flags

    return [f for r in runs for f in host_flags((r.extra or {}).get("host_state") or {})]


def _git_recipe(tmp_path: Path, repo: str) -> Path:
    recipes = tmp_path / "recipes"
    recipes.mkdir(exist_ok=True)
    text = (REPO_ROOT / "recipes" / "demo" / "update.toml").read_text()
    head, tail = text.split("[build]", 1)
    (recipes / "gitsrc.toml").write_text(
        f'[sources.sglang]\ngit = "{repo}"\nrev = "v0.1.0"\npackage_dir = "python"\n\n[build]' + tail)
    return recipes


@pytest.mark.slow
def test_track_a_branch_every_n_commits_and_bisect_between_them(home, monkeypatch, capsys, tmp_path, four_releases,
                                                                 otava_env):
    monkeypatch.setenv("PATCHBENCH_RECIPES", str(_git_recipe(tmp_path, four_releases["repo"])))
    rc, out = cli_json(capsys, ["track", "gitsrc", "--source", "sglang", "--branch", "main", "--every", "2"])
    assert rc == 0 and [p["order"] for p in out["points"]] == list(range(0, 13, 2))
    rc, hist = cli_json(capsys, ["history", "gitsrc", "--metric", "output_tok_s@1", "--bisect"])
    changes = hist["change_points"]
    # The doubled step cost is found on a quiet box. CI, loaded (2026-12-05, every run flagged "other
    # processes used 1.6-2.0 of 2 CPUs"): once a stalled launch read 16 tok/s between 83 and 44 and no
    # change point passed; once the box's own slowdown made a second change point; once the bisect
    # named no commit (its probes did not show the step again). The promise kept: each change point's
    # bisect names the planted commit or none, never another; finding it is required of a quiet box.
    runs = Store(home / "results.sqlite").runs()
    assert any(c["direction"] == "worse" for c in changes) or _busy(runs), hist
    for change in changes:
        b = change["bisect"]
        if b is None:  # not asked for: a gain outside a stretch (CI once read the box's own speed-up as one)
            assert change["direction"] == "better" and not change["stretch"], changes
            continue
        missed = b.get("culprit_id") is None and b["message"].startswith("no item makes the metric")
        assert b.get("culprit_id") == four_releases["planted_commit"] or missed, (b, changes)
        # the verdict links its evidence: the runs of every probe's values, and the rule it decided with
        if b.get("builds"):
            assert b["probes"] and all(len(p["run_ids"]) == len(p["values"]) > 0 for p in b["probes"]), b
            assert "<= 0.025" in b["rule"], b
            # its looks read only its own launches: the good end's runs the track measured are left out,
            # named, and it launched again in the bisect (one sweep)
            base = b["probes"][0]
            assert base["reused"] and not set(base["reused"]) & set(base["run_ids"]), b
            assert b["left_out"][base["label"]].startswith(f"{base['label']}: {len(base['reused'])} stored run(s) "
                                                          "from another campaign"), b
            assert len({r.group_id for r in runs if r.run_id in {i for p in b["probes"] for i in p["run_ids"]}}) == 1


# -- the demo: both planted changes found and their commits named ----------------------------------

@pytest.mark.slow
def test_history_finds_the_planted_gain_and_regression_and_names_their_commits(home, monkeypatch, capsys,
                                                                               otava_env):
    meta = mini_releases.build(TEST_CACHE / "mini-releases-track", **DEMO)
    _env(monkeypatch, meta)
    rc, out = cli_json(capsys, ["track", "demo/update", "--source", "sglang", "--releases", "--git", meta["repo"],
                             "--repeats", "2"])
    assert rc == 0 and len(out["measured"]) == len(meta["versions"])
    argv = ["history", "demo/update", "--metric", "output_tok_s@1", "--bisect", "--direction", "both",
            "--git", meta["repo"]]
    rc, hist = cli_json(capsys, argv)
    assert rc == 0
    found = {(c["after"], c["direction"]): c for c in hist["change_points"]}
    # The 2x gain is always found. The 8% step is found on a quiet box (`nox -s demo-track`), but two
    # runs per point on a loaded CI box spread 5-10%, and an 8% step in a 10-point segment then cannot
    # pass the change verdict's 0.01 after its split correction (history/change_verdict.py): it may be
    # missed. And the box's own slowdowns are steps in the data: on CI (2026-12-05) 0.1.3's two runs
    # read 18% slow, and the verdict placed a -15% step after 0.1.2 (p 0.0099). The bisect is the guard:
    # it names the planted commit or no commit ("no item makes the metric worse"), never another.
    assert ("0.1.10", "better") in found, found
    assert all(d == "worse" and after in BEFORE_GAIN for after, d in found if after != "0.1.10"), found
    gain = found[("0.1.10", "better")]["bisect"]
    assert gain["confirmed"] and gain["culprit_id"] == meta["planted"]["0.1.10"], gain
    # the 8% step's bisect, at two runs per commit on a loaded box, can take a wrong turn; then the
    # commit it ends on is no step of its own, and the verdict says so ("weak") instead of naming it;
    # or its probes, measured after the change verdict's, do not show the step again ("no item makes
    # the metric worse"): a miss, never another commit named
    for (after, _), c in found.items():
        b = c["bisect"]
        missed = b.get("culprit_id") is None and b["message"].startswith("no item makes the metric")
        assert b.get("culprit_id") == meta["planted"].get(after) or (not b.get("confirmed") and "weak" in b["message"]) \
            or b.get("candidates") or (after != "0.1.10" and missed), b
    assert all(c["bisected_now"] for c in hist["change_points"])
    # one bisect per change point: asking again measures nothing new
    n_runs = len(Store(home / "results.sqlite").runs())
    rc, again = cli_json(capsys, argv)
    assert not any(c["bisected_now"] for c in again["change_points"])
    assert len(Store(home / "results.sqlite").runs()) == n_runs


DEMO = {"plant": "gain", "at": "0.1.10", "also": ("slowdown8@0.1.5",), "n_releases": 14}
BEFORE_GAIN = tuple(f"0.1.{i}" for i in range(1, 10))  # where the 8% step (0.1.5) or a slow box may be seen
