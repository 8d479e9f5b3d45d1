"""Patch activation evidence on real runs: a patch whose declared evidence never shows in the live
server's log makes the run `invalid` (with the reason), and compare leaves such runs out."""

from __future__ import annotations


from conftest import demo_project
from toolkit.cli import main
from toolkit.results.store import Store

SHORT = '[benchmark]\nconcurrency = [1]\nrepeats = 1\nnum_prompts = 4\noutput_len = 8\n'


def test_missing_evidence_makes_the_run_invalid_and_compare_leaves_it_out(tmp_path, home, monkeypatch, capsys):
    proj = demo_project(tmp_path, monkeypatch)
    (proj / "recipes/t").mkdir()
    (proj / "recipes/t/fast.toml").write_text('extends = "demo/fast"\n' + SHORT)
    (proj / "recipes/t/ghost.toml").write_text(
        'extends = "demo/baseline"\n[patches]\nsglang = ["demo/faster-decode.patch"]\n'
        '[evidence."demo/faster-decode.patch"]\nlog = "fused decode step active"\n' + SHORT)
    assert main(["run", "t/fast", "t/ghost", "--fixed"]) == 1  # a run of the sweep is not ok
    store = Store(home / "results.sqlite")
    runs = {r.recipe: r for r in store.runs()}
    assert runs["t/fast"].status == "ok"
    assert runs["t/fast"].extra["evidence"] == {"demo/faster-decode.patch": "ok"}
    ghost = runs["t/ghost"]
    assert ghost.status == "invalid"
    assert "demo/faster-decode.patch: 0 of >= 1 'fused decode step active' lines in server.log" in ghost.error
    assert ghost.extra["evidence"] == {"demo/faster-decode.patch": "missing"}
    capsys.readouterr()
    assert main(["compare", "t/fast", "t/ghost", "--json"]) == 2
    assert "t/ghost" in capsys.readouterr().err
    # `results` flags the evidence, one line per run even at 80 columns (and when piped)
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "toolkit.cli", "results"], capture_output=True, text=True,
                          env={**__import__("os").environ, "COLUMNS": "80", "PATCHBENCH_HOME": str(home)})
    lines = proc.stdout.splitlines()
    assert all(len(ln) <= 80 for ln in lines), lines
    for r in runs.values():
        mine = [ln for ln in lines if r.run_id[:8] in ln]
        assert len(mine) == 1, lines
        assert r.recipe in mine[0]
        assert ("missing" if r.recipe == "t/ghost" else " ok ") in mine[0]
    proc = subprocess.run([sys.executable, "-m", "toolkit.cli", "results", "--status", "running"],
                          capture_output=True, text=True, env={**__import__("os").environ, "PATCHBENCH_HOME": str(home)})
    assert "no running runs" in proc.stdout and "(2 runs in all" in proc.stdout
