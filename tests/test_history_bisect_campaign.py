"""`history --bisect` measures in its campaign as `patchbench bisect` does (toolkit.analysis.search_campaign):
a killed bisect of a change point is continued only under its sweep's lease, and a finished one asked
again replays its sweep, launching nothing."""

from __future__ import annotations

import io
import shutil
import subprocess

from rich.console import Console

from conftest import REPO_ROOT, demo_project, interrupt_launches_after
from toolkit.history.autobisect import bisect_change
from toolkit.history.series import Entry
from toolkit.results.metrics import parse_spec
from toolkit.results.store import Store

BENCH = ('[benchmark]\nconcurrency = [1]\ninput_len = 16\noutput_len = 8\nnum_prompts = 4\nwarmup = 1\n'
         'repeats = 2\n[quality]\nlaunches = 0\n')


def _git(repo, *args) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t", *args],
                          check=True, capture_output=True, text=True).stdout.strip()


def _two_harmless_commits(tmp_path) -> list[str]:
    """The miniature in a git repository: its first commit, then two that add modules nothing imports."""
    repo = tmp_path / "mini-git"
    shutil.copytree(REPO_ROOT / "upstream" / "minisglang", repo,
                    ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    _git(repo, "init", "-q")
    shutil.rmtree(repo / ".git" / "hooks", ignore_errors=True)
    for i in range(3):
        if i:
            (repo / "python" / "sglang" / f"note{i}.py").write_text(f"NOTE = {i}\n")
        _git(repo, "add", "-A")
        _git(repo, "commit", "-qm", f"step {i}")
    return [repo, *_git(repo, "rev-list", "--reverse", "HEAD").split()]


def test_a_killed_history_bisect_is_continued_under_its_lease_and_a_finished_one_replayed(tmp_path, home,
                                                                                          monkeypatch):
    """A change point's bisect was killed after one launch; asked again while another process held that
    sweep (a second `history --bisect` continuing it), it launched into it too: `history --bisect`
    took no lease. Now that call measures in a new sweep and says so; asked again, the finished bisect
    replays its sweep: nothing launched, the same probes' runs."""
    import toolkit.run.pipeline as pipeline
    from toolkit.recipe.load import load_recipe as load

    root = demo_project(tmp_path, monkeypatch)
    repo, *commits = _two_harmless_commits(tmp_path)
    (root / "recipes" / "t").mkdir()
    (root / "recipes" / "t" / "git.toml").write_text(
        f'extends = "demo/baseline"\n[sources.sglang]\ngit = "{repo}"\nrev = "{commits[0]}"\npackage_dir = "python"\n'
        + BENCH)
    recipe, spec, store = load("t/git"), parse_spec("output_tok_s@1"), Store(home / "results.sqlite")
    before, after = (Entry(c, c[:12], "commit", i * 2, None, None) for i, c in ((0, commits[0]), (1, commits[2])))
    printed = io.StringIO()

    def bisect(group: str) -> dict:
        return bisect_change(recipe, "sglang", before, after, direction="worse", spec=spec, change_pct=-20.0,
                             home=home, store=store, console=Console(file=printed, width=300), group_id=group,
                             max_repeats=3)

    real, launched = pipeline.run_once, interrupt_launches_after(monkeypatch, 1)
    try:
        bisect("killed000001")
        raise AssertionError("the bisect was not killed")
    except KeyboardInterrupt:
        pass
    monkeypatch.setattr(pipeline, "run_once", real)
    killed = store.get_run(launched[0]).group_id
    with store.lease(f"group-{killed}") as held:  # another process continuing it now
        assert held
        out = bisect("second000001")
    assert "sweep killed000001 of this search is being measured by another process now" in printed.getvalue()
    assert out["sweep"] == "second000001" and out["replayed"] is None and out["runs"] >= 4, out
    assert launched[0] not in {rid for p in out["probes"] for rid in p["run_ids"]}
    # the verdict keeps each step as printed, with what it compared: n values of the probe against n of its reference
    steps = [s for s in out["steps"] if s["outcome"] != "skip"]
    assert steps and steps[0]["reference"] == commits[0][:12], out["steps"]
    assert all(s["line"] in printed.getvalue() and f"n={s['n']}/{s['n_reference']}:" in s["line"] for s in steps)
    printed.truncate(0)
    again = bisect("third0000001")
    assert again["runs"] == 0 and again["sweep"] == "second000001" and again["replayed"], again
    assert [p["run_ids"] for p in again["probes"]] == [p["run_ids"] for p in out["probes"]]
    assert again["steps"] == out["steps"]
    assert "replaying sweep second000001 of this search, finished" in printed.getvalue()
