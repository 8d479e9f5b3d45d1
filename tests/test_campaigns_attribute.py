"""`attribute`'s record of its values names what its verdicts judged: a prefix's stored runs from another
campaign, left out of the sequential steps (toolkit.analysis.campaigns), are not in `values_from` nor in
"runs used"; they are named apart, as the steps name them."""

from __future__ import annotations

from conftest import cli_json, demo_project
from test_bisect_campaigns import _harmless_stack


def test_values_from_and_runs_used_list_the_judged_launches_and_name_the_stored_base_apart(tmp_path, home,
                                                                                           monkeypatch, capsys):
    """`run t/base` stores two launches; the box then slows 15% and `attribute` of one harmless patch
    launches the base again (its step leaves the stored two out). `values_from`, `prefix_values` and
    "runs used" listed the stored two among prefix0's values, as if judged; now they list this campaign's
    launches only, and name the stored two as left out, with their sweep."""
    from toolkit.cli import main

    root = demo_project(tmp_path, monkeypatch)
    _harmless_stack(root, 1)
    rc, first = cli_json(capsys, ["run", "t/base", "--repeats", "2"])
    assert rc == 0
    stored = [rid for _, rid in first["runs"]]
    monkeypatch.setenv("SGLANG_MINI_BOX_SLOWDOWN", "1.15")
    argv = ["attribute", "t/stack", "--metric", "output_tok_s@1", "--max-repeats", "3"]
    rc, out = cli_json(capsys, argv)
    assert rc == 0, out
    (step,) = out["sequential"]
    assert step["left_out"][0].startswith("prefix0: 2 stored run(s) from another campaign"), step
    base = next(p for p in out["values_from"] if p["label"] == "prefix0")
    assert not set(base["runs"]) & set(stored) and len(base["runs"]) >= 2, base  # the launches judged
    assert base["left_out"] == stored and len(base["values"]) == len(base["runs"])
    assert base["left_out_text"].startswith("prefix0: 2 stored run(s) from another campaign")
    assert first["group_id"][:12] in base["left_out_text"]
    patched = next(p for p in out["values_from"] if p["label"] == "prefix1")
    assert patched["left_out"] == [] and len(patched["runs"]) >= 2
    # prefix_values (the values each prefix's rows read) are the judged ones too: the stored base's slower
    # values of the other campaign were listed among prefix0's
    assert out["prefix_values"] == [base["values"], patched["values"]], (out["prefix_values"], base, patched)
    capsys.readouterr()
    assert main(argv) == 0  # the text (a replay: nothing launched) says the same
    text = capsys.readouterr().out
    used = next(ln for ln in text.splitlines() if ln.startswith("runs used: prefix0"))
    assert not any(rid[:8] in used for rid in stored) and all(rid[:8] in used for rid in base["runs"]), used
    assert "left out: prefix0: 2 stored run(s) from another campaign" in " ".join(text.split()), text
