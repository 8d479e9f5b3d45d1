"""What a campaign cost is said the same everywhere (toolkit.analysis.verdict_cost): `results`,
`results --selected`, `compare` and `report` count every launch of the configurations compared, the
failed ones too, said apart from those the verdicts used."""

from __future__ import annotations

import json

from conftest import cli_json, demo_project
from toolkit.cli import main

BENCH = ('[benchmark]\nconcurrency = [1]\ninput_len = 16\noutput_len = 16\nnum_prompts = 8\nwarmup = 1\n'
         'repeats = 2\n[quality]\nlaunches = 0\n')


def _cost_lines(text: str) -> list[str]:
    return [" ".join(x.split()) for x in text.split("cost: ")[1:]]


def test_a_failed_launch_is_in_every_cost_line_said_apart(tmp_path, home, monkeypatch, capsys):
    """A launch of t/base crashed (the server died mid-benchmark) after a good sweep: `results` counted it
    (3 launches), the report's cost section only the 2 runs its verdict used, and `compare` said nothing.
    Now report, compare and `results --selected` print the same lines, the failed launch and its seconds
    said apart from the used ones; `results` says the same split of what it lists."""
    root = demo_project(tmp_path, monkeypatch)
    (root / "recipes" / "t").mkdir()
    (root / "recipes" / "t" / "base.toml").write_text('extends = "demo/baseline"\n' + BENCH)
    (root / "recipes" / "t" / "fast.toml").write_text('extends = "demo/fast"\n' + BENCH)
    assert main(["run", "t/base", "t/fast", "--fixed", "--repeats", "1"]) == 0
    monkeypatch.setenv("SGLANG_MINI_CRASH_AFTER_REQUESTS", "2")
    assert main(["run", "t/base", "--fixed", "--repeats", "1"]) != 0
    monkeypatch.delenv("SGLANG_MINI_CRASH_AFTER_REQUESTS")
    capsys.readouterr()
    rc, out = cli_json(capsys, ["compare", "t/base", "t/fast", "--metric", "output_tok_s"])
    base = out["cost"]["recipes"]["t/base"]
    assert rc == 0 and base["launches"] == 2 and base["used"]["launches"] == 1 and base["failed"]["launches"] == 1
    assert base["failed"]["seconds"] > 0 and "failed" not in out["cost"]["recipes"]["t/fast"], out["cost"]
    assert main(["compare", "t/base", "t/fast", "--metric", "output_tok_s"]) == 0
    compared = _cost_lines(capsys.readouterr().out)
    assert compared[0].startswith("t/base: 2 launches, ") and ": used 1 (" in compared[0] and ", failed 1 (" in compared[0]
    assert main(["results", "--selected", "t/base", "t/fast"]) == 0
    assert _cost_lines(capsys.readouterr().out)[:3] == compared[:3]
    assert main(["report", "t/base", "t/fast", "--metric", "output_tok_s", "-o", str(tmp_path / "rep")]) == 0
    capsys.readouterr()
    md = (tmp_path / "rep" / "report.md").read_text()
    assert f"- {compared[0]}" in " ".join(md.split()), md
    assert main(["results", "t/base"]) == 0
    listed = _cost_lines(capsys.readouterr().out)
    assert listed[0].startswith("t/base: 2 launches, ") and ": stored 1 (" in listed[0] and ", failed 1 (" in listed[0]
    json.dumps(out)


def test_the_report_cost_heading_counts_the_launches_its_lines_count(tmp_path, home, monkeypatch, capsys):
    """t/base ran twice without a GPU ([server] gpus = 0), then once edited to hold one GPU, a launch that
    crashed: the report's section was headed "Cost (launch time; no GPU held)" (titled by the runs used)
    above a line of 0.02 GPU-min (every launch). Now the heading is titled by the launches its lines count."""
    from toolkit.run import machine

    root = demo_project(tmp_path, monkeypatch)
    (root / "recipes" / "t").mkdir()
    base = root / "recipes" / "t" / "base.toml"
    base.write_text('extends = "demo/baseline"\n' + BENCH)
    assert main(["run", "t/base", "--fixed", "--repeats", "2"]) == 0
    base.write_text('extends = "demo/baseline"\n' + BENCH + "[server]\ngpus = 1\n")
    monkeypatch.setattr(machine, "has_cuda_gpu", lambda: True)  # the miniature serves on the CPU all the same
    monkeypatch.setenv("SGLANG_MINI_CRASH_AFTER_REQUESTS", "2")
    assert main(["run", "t/base", "--fixed", "--repeats", "1"]) != 0
    monkeypatch.delenv("SGLANG_MINI_CRASH_AFTER_REQUESTS")
    base.write_text('extends = "demo/baseline"\n' + BENCH)
    assert main(["report", "t/base", "-o", str(tmp_path / "rep")]) == 0
    capsys.readouterr()
    md = " ".join((tmp_path / "rep" / "report.md").read_text().split())
    assert "### Cost (GPU minutes) - t/base: 3 launches, " in md and ", failed 1 (" in md and "GPU-min" in md, md
    assert "no GPU held" not in md


def test_a_resumed_run_costs_the_launches_its_verdicts_read_not_only_its_own(tmp_path, home, monkeypatch, capsys):
    """`run t/base t/fast` killed after 3 launches, asked again: it launched 1 more and printed "cost: 1
    launches ...; the fixed design: 8 launches" for a verdict that read 4 launches (a saving of 8x it never
    made). Now the line and the JSON count the stored launches the verdicts read besides this call's."""
    import re

    import toolkit.run.pipeline as pipeline
    from conftest import interrupt_launches_after

    root = demo_project(tmp_path, monkeypatch)
    (root / "recipes" / "t").mkdir()
    (root / "recipes" / "t" / "base.toml").write_text('extends = "demo/baseline"\n' + BENCH)
    (root / "recipes" / "t" / "fast.toml").write_text('extends = "demo/fast"\n' + BENCH)
    real, launched = pipeline.run_once, interrupt_launches_after(monkeypatch, 3)
    assert main(["run", "t/base", "t/fast"]) != 0
    monkeypatch.setattr(pipeline, "run_once", real)
    capsys.readouterr()
    assert main(["run", "t/base", "t/fast"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    got = re.search(r"cost: (\d+) launches, .*?; the verdicts also read (\d+) stored launches of an earlier call "
                    r"\([\d.]+ min\): (\d+) launches, [\d.]+ min in all; the fixed design", text)
    assert got, text
    now, stored, total = map(int, got.groups())
    assert now >= 1 and stored == 3 and total == now + stored, text
    rc, out = cli_json(capsys, ["run", "t/base", "t/fast"])  # settled from the store now: nothing launched
    used = {rid for ids in out["used"].values() for rid in ids}
    assert rc == 0 and set(launched) <= used and len(used) == total and not out["runs"], out
    assert out["cost"]["launches"] == 0 and out["cost"]["stored_launches"] == total, out["cost"]
    assert main(["run", "t/base", "t/fast"]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert f"cost: nothing launched (the stored runs of these configurations decided it: {total} stored launches" \
        in said, said
