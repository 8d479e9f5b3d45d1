"""Reproduce an update's gain: bisect the miniature's releases (real wheels on a local package index,
one env per release), name the release, then the commit between the neighbouring tags."""

from __future__ import annotations

import json
import math
import sys

import pytest

from conftest import REPO_ROOT, TEST_CACHE
from toolkit.cli import main
from toolkit.tree.package_index import releases_between

sys.path.insert(0, str(REPO_ROOT / "upstream"))
import mini_releases  # noqa: E402


def _releases(name: str, plant: str, at: str) -> dict:
    """The miniature's releases under TEST_CACHE (built once however many test processes ask)."""
    return mini_releases.build(TEST_CACHE / name, plant=plant, at=at)


@pytest.fixture(scope="module")
def gain_releases():
    return _releases("mini-releases-gain", "gain", "0.1.5")


def _bisect(monkeypatch, capsys, meta, *extra) -> dict:
    monkeypatch.setenv("PATCHBENCH_MINI_INDEX", meta["index"])
    monkeypatch.setenv("PATCHBENCH_RECIPES", str(REPO_ROOT / "recipes"))
    capsys.readouterr()
    rc = main(["bisect", "demo/update", "--source", "sglang", "--good", "0.1.0", "--bad", "0.1.8",
               "--metric", "output_tok_s@1", "--json", *extra])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0, out
    return out


def test_local_index_lists_the_releases_in_order(gain_releases):
    assert releases_between("sglang", "0.1.0", "0.1.8", gain_releases["index"]) == gain_releases["versions"]
    assert releases_between("sglang", "0.1.2", "0.1.4", gain_releases["index"]) == ["0.1.2", "0.1.3", "0.1.4"]


@pytest.mark.slow
def test_bisect_names_the_release_that_brought_the_gain_then_its_commit(home, monkeypatch, capsys, gain_releases):
    out = _bisect(monkeypatch, capsys, gain_releases, "--direction", "better", "--git", gain_releases["repo"])
    n = len(gain_releases["versions"])
    assert out["culprit_label"] == "0.1.5"
    # one bisection's builds; twice that when a weak first answer (a base read in a slow moment of a
    # loaded box) led to the repair pass
    assert out["first_phase_builds"] <= (math.ceil(math.log2(n)) + 1) * (2 if out["repaired"] else 1)
    assert out["confirmed"]
    assert out["commit"]["culprit_label"] == gain_releases["planted_commit"][:12]
    # every value of each phase is linked to its runs: the releases' probes, then the commits'
    commits = {p["label"]: p for p in out["commit"]["probes"]}
    bad = out["commit"]["bad_values"]  # the planted commit's latest values, measured together with its parent's
    assert commits[gain_releases["planted_commit"][:12]]["values"][-len(bad):] == bad
    assert all(p["run_ids"] and len(p["run_ids"]) == len(p["values"]) for p in [*out["probes"], *commits.values()])
    assert {p["label"] for p in out["probes"]} >= {"0.1.0", "0.1.5"} and not out["skipped"]
    # The default direction looks for a regression, and there is none.
    again = _bisect(monkeypatch, capsys, gain_releases)
    # on a loaded box a release measured in a slow moment can look worse than its neighbour; then
    # the conviction (both topped up, compared directly) does not confirm it and the answer says "weak"
    assert (again["culprit"] is None and "no item makes the metric worse" in again["message"]) \
        or (not again["confirmed"] and "weak" in again["message"]), again["message"]


@pytest.mark.slow
def test_bisect_names_a_planted_regression_by_default(home, monkeypatch, capsys):
    meta = _releases("mini-releases-regression", "regression", "0.1.3")
    out = _bisect(monkeypatch, capsys, meta)
    assert out["culprit_label"] == "0.1.3"


def test_release_bisect_dry_run_lists_probes_and_builds_the_first(home, monkeypatch, capsys, gain_releases):
    monkeypatch.setenv("PATCHBENCH_MINI_INDEX", gain_releases["index"])
    monkeypatch.setenv("PATCHBENCH_RECIPES", str(REPO_ROOT / "recipes"))
    capsys.readouterr()
    assert main(["bisect", "demo/update", "--source", "sglang", "--good", "0.1.2", "--bad", "0.1.6",
                 "--metric", "output_tok_s@1", "--until", "check", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["releases"] == ["0.1.2", "0.1.3", "0.1.4", "0.1.5", "0.1.6"]
    assert out["max_builds"] == 4 and out["first_env"]
    assert (home / "envs" / out["first_env"][:16]).is_dir()
    # A release that does not exist is refused before anything is built (exit 2).
    assert main(["bisect", "demo/update", "--source", "sglang", "--good", "0.1.2", "--bad", "0.1.9",
                 "--metric", "output_tok_s@1", "--until", "check"]) == 2
    assert "--bad 0.1.9: `sglang` has no release 0.1.9" in capsys.readouterr().err


def test_a_release_or_a_git_repository_that_is_not_there_is_refused_before_any_build(home, monkeypatch, capsys,
                                                                                     gain_releases):
    monkeypatch.setenv("PATCHBENCH_MINI_INDEX", gain_releases["index"])
    monkeypatch.setenv("PATCHBENCH_RECIPES", str(REPO_ROOT / "recipes"))
    capsys.readouterr()
    common = ["bisect", "demo/update", "--source", "sglang", "--metric", "output_tok_s@1"]
    assert main([*common, "--versions", "0.1.0,0.1.9"]) == 2
    assert "--versions 0.1.9: `sglang` has no release 0.1.9" in capsys.readouterr().err
    assert main([*common, "--good", "0.1.0", "--bad", "0.1.3", "--git", str(home / "no-such-repo")]) == 2
    assert "no such repository" in capsys.readouterr().err
    assert not (home / "envs").exists() or not any((home / "envs").iterdir())


@pytest.mark.slow
def test_a_bisect_walking_back_from_a_newer_good_release_names_the_commit_in_upstream_order(
        home, monkeypatch, capsys, gain_releases):
    """--good 0.1.6 --bad 0.1.4: the releases are bisected in upstream order for the opposite change, so the
    release named is the one that changed the metric, 0.1.5 (its gain), and the commit phase bisects
    v0.1.4..v0.1.5 for it (was: "culprit: 0.1.4 ... 1.92x slower against 0.1.5": the older release,
    which changed nothing, named for a slowdown it never brought)."""
    monkeypatch.setenv("PATCHBENCH_MINI_INDEX", gain_releases["index"])
    monkeypatch.setenv("PATCHBENCH_RECIPES", str(REPO_ROOT / "recipes"))
    capsys.readouterr()
    rc = main(["bisect", "demo/update", "--source", "sglang", "--good", "0.1.6", "--bad", "0.1.4",
               "--metric", "output_tok_s@1", "--git", gain_releases["repo"], "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0, out
    assert out["culprit_label"] == "0.1.5" and out["direction"] == "better", out
    assert out["commit"]["direction"] == "better", out["commit"]
    assert out["commit"]["culprit_label"] == gain_releases["planted_commit"][:12], out["commit"]


def test_a_release_range_given_newest_first_is_bisected_in_upstream_order(home, monkeypatch, capsys, gain_releases):
    """--good newer than --bad (or --versions newest first): the dry run lists the releases oldest first, says the
    good end is newer and which change is looked for; a --versions list in no release order is refused."""
    monkeypatch.setenv("PATCHBENCH_MINI_INDEX", gain_releases["index"])
    monkeypatch.setenv("PATCHBENCH_RECIPES", str(REPO_ROOT / "recipes"))
    capsys.readouterr()
    common = ["bisect", "demo/update", "--source", "sglang", "--metric", "output_tok_s@1"]
    assert main([*common, "--good", "0.1.6", "--bad", "0.1.4", "--until", "check", "--json"]) == 0
    cap = capsys.readouterr()
    out = json.loads(cap.out)
    assert out["releases"] == ["0.1.4", "0.1.5", "0.1.6"] and out["newest_first"] and out["first_probe"] == "0.1.4"
    err = " ".join(cap.err.split())
    assert "the good end 0.1.6 is newer than the bad end 0.1.4: bisecting the releases in upstream order for the " \
           "one that made output_tok_s@1 better" in err, err
    assert main([*common, "--versions", "0.1.6,0.1.5,0.1.4", "--until", "check", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["releases"] == ["0.1.4", "0.1.5", "0.1.6"]
    assert main([*common, "--versions", "0.1.0,0.1.5,0.1.2"]) == 2  # before anything is built
    assert "error: --versions 0.1.0,0.1.5,0.1.2: not in release order" in capsys.readouterr().err
