"""The gate's verdict goes wherever the answers' verdict goes: attribute, bisect and sweep print it
(with its rule) and carry it in their JSON, each measured prefix against the base and each sweep
variant against the default configuration (the miniature, through the CLI; its answers are words,
so the env's GSM8K evaluation scores 0.0 and `min_accuracy = 0.5` fails, while the paired test of
two identical evaluations says p = 1)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from gate_project import GATE_BLOCK, gate_project
from toolkit.cli import main

QUALITY = GATE_BLOCK + 'dataset = "gsm10.jsonl"\nmin_accuracy = 0.5\n'
# the prefixes attribute measured (2 values each), no more: the gain of demo/fast's patch is the culprit
BISECT = ["--metric", "output_tok_s@1", "--direction", "better", "--repeats", "2", "--max-repeats", "2"]


def _alter_kept_answers(home, recipe: str) -> str:
    """Edit a kept answers file of one of `recipe`'s runs (`[store] artifacts`): the note a verdict
    that uses it must print."""
    from toolkit.results.store import Store

    store = Store(home / "results.sqlite")
    runs = {r.run_id: r for r in store.runs(recipe=recipe)}
    kept = [a for a in store.artifacts(list(runs)) if a.name == "quality.json"][-1]
    Path(kept.path).write_text(Path(kept.path).read_text() + " ")
    return f"artifact: run {kept.run_id[:8]} ({recipe}): quality.json altered"


def _assert_gate(gate: dict) -> None:
    assert gate["verdict"] == "gate failed" and "min_accuracy 0.5" in gate["text"], gate
    assert gate["p_value"] == 1.0 and gate["accuracy"] == 0.0 and gate["rule"].startswith("gate: ")


def test_attribute_and_bisect_give_each_prefix_its_gate(home, tmp_path, monkeypatch, capsys):
    from toolkit.commands import common

    monkeypatch.setattr(common.console, "width", 400)  # the table's verdict cell on one line
    demo = gate_project(tmp_path, monkeypatch)
    (home / "config.toml").write_text(f'[store]\nartifacts = "{tmp_path / "kept"}"\n')
    (demo / "gfast.toml").write_text('extends = "demo/fast"\n' + QUALITY)
    assert main(["attribute", "demo/gfast", "--repeats", "2", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    (key, gate), = data["gate"].items()
    assert key == "+1 demo/faster-decode.patch"
    _assert_gate(gate)
    assert main(["attribute", "demo/gfast", "--repeats", "2"]) == 0  # the same runs, read again
    out = capsys.readouterr().out
    assert f"gate: {key}: gate failed: gsm8k accuracy 0.000 of 10" in out
    row = next(line for line in out.splitlines() if "faster-decode.patch" in line and "│" in line)
    assert "gate failed" in row, out  # the table's verdict cell: never a plain "faster"
    assert "gate: fails when the 95% Wilson lower bound of its accuracy is under 0.5" in out

    # bisect launches the prefixes again for its speed looks (its own campaign); their answers and gate read
    # the attribute runs of the same identity too (answers are no speed): the same verdict, JSON and text
    assert main(["bisect", "demo/gfast", *BISECT, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["culprit"] == 1 and list(data["gate"]) == [key]
    _assert_gate(data["gate"][key])
    assert set(data["quality"]) == {key}
    assert main(["bisect", "demo/gfast", *BISECT]) == 0
    out = capsys.readouterr().out
    assert f"gate: {key}: gate failed" in out and "McNemar's exact test" in out

    # a kept answers file altered: attribute and bisect (their runs reused) name it
    note = _alter_kept_answers(home, "demo/gfast")
    for argv in (["attribute", "demo/gfast", "--repeats", "2"], ["bisect", "demo/gfast", *BISECT]):
        assert main([*argv, "--json"]) == 0
        assert [n for n in json.loads(capsys.readouterr().out)["notes"] if n.startswith(note)], argv


def test_sweep_gives_each_variant_its_gate(home, tmp_path, monkeypatch, capsys):
    demo = gate_project(tmp_path, monkeypatch)
    (home / "config.toml").write_text(f'[store]\nartifacts = "{tmp_path / "kept"}"\n')
    (demo / "gsweep.toml").write_text('extends = "demo/baseline"\n' + QUALITY + textwrap.dedent("""\
        [matrix]
        server.args.mini-step-base-ms = [8]
        """))
    out_dir = tmp_path / "sweep"
    assert main(["sweep", "demo/gsweep", "--fixed", "-o", str(out_dir), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (variant, gate), = doc["gate"].items()
    _assert_gate(gate)
    row = next(r for r in doc["ranked"] if r["variant"] == variant)
    assert row["verdict"].endswith(", gate failed")  # never a plain "faster" beside a failed gate
    md = (out_dir / "sweep.md").read_text()
    assert f"gate: {variant}: gate failed" in md and "McNemar's exact test" in md
    assert doc["notes"] == []

    # a kept answers file altered after the fact: the sweep (its runs reused) names it, never trusts it
    note = _alter_kept_answers(home, variant)
    assert main(["sweep", "demo/gsweep", "--fixed", "-o", str(out_dir), "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert [n for n in again["notes"] if n.startswith(note)] and note in (out_dir / "sweep.md").read_text()
