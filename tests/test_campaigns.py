"""A sequential verdict judges only launches made together (toolkit.analysis.campaigns): a side's stored
runs from another campaign are left out of the looks and named, and that side launches again here,
so a box that changed between campaigns is not called an effect."""

from __future__ import annotations

import json
from types import SimpleNamespace as Row

from toolkit.analysis import campaigns


def _row(rid, group, at="2026-12-06T03:00:00"):
    return Row(run_id=rid, group_id=group, started_at=at, machine={"host": "box"}, extra={})


def test_runs_count_in_a_sweep_of_both_sides_or_the_one_launching_now():
    a = [_row("a1", "old"), _row("a2", "old"), _row("a3", "now")]
    b = [_row("b1", "now")]
    sp = campaigns.split(a, b)
    assert sp.a == ("a3",) and sp.b == ("b1",) and sp.reused_a == ("a1", "a2") and not sp.reused_b
    # a resumed call's sweep holds both sides: every run counts (the same campaign)
    assert campaigns.split([_row("a1", "g"), _row("a2", "g")], [_row("b1", "g")]).reused is False
    # the call launching now (`here`): its first launch of one side counts before the other side has one
    sp = campaigns.split(a + [_row("a4", "new")], [], here="new")
    assert sp.a == ("a4",) and sp.reused_a == ("a1", "a2", "a3")
    assert campaigns.split([_row("x", None)], [_row("y", None)]).reused  # no sweep recorded: never together
    line = campaigns.describe("demo/baseline", a[:2], a[2:])
    assert "demo/baseline: 2 stored run(s) from another campaign (sweep old" in line and "host box" in line


def test_a_stored_reference_from_before_the_box_slowed_is_launched_again_not_judged(tmp_path, home, monkeypatch,
                                                                                      capsys):
    """Campaign 1 stores four launches of demo/baseline; then the box slows every step by 15%
    (the miniature's SGLANG_MINI_BOX_SLOWDOWN, outside the recipes' configuration) and `run demo/baseline
    demo/same` (a harmless change: another random seed) asks for a verdict. Judged against the stored
    reference, the pair read "1.15x slower"; now the reference launches again, interleaved, the verdict
    reads only this campaign's launches, and it names the four left out with their sweep;
    `compare` reads the same launches."""
    from test_sequential import small_demo
    from toolkit.analysis import sequential as seq
    from toolkit.analysis.selection import values_at
    from toolkit.cli import main
    from toolkit.results.store import Store

    root = small_demo(tmp_path, monkeypatch, concurrency="[1]")
    (root / "recipes" / "demo" / "same.toml").write_text('extends = "demo/baseline"\n[server.args]\nrandom-seed = 1\n')
    assert main(["run", "demo/baseline", "--repeats", "4", "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    stored = [rid for _, rid in first["runs"]]
    monkeypatch.setenv("SGLANG_MINI_BOX_SLOWDOWN", "1.15")
    assert main(["run", "demo/baseline", "demo/same", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    (row,) = out["sequential"]
    n = row["launches_each"]
    new_base = [rid for name, rid in out["runs"] if name == "demo/baseline"]
    new_same = [rid for name, rid in out["runs"] if name == "demo/same"]
    assert len(new_base) >= n >= 2 and len(new_same) >= n, out["runs"]  # the reference launched again, here
    assert row["reused"] and "demo/baseline: 4 stored run(s) from another campaign" in row["reused"][0]
    assert first["group_id"][:12] in row["reused"][0] and "left out" in row["text"]
    # the verdict is the pure rule over this campaign's launches only (none of the stored four)
    store = Store(home / "results.sqlite")
    a, b = (values_at(store.samples(ids, metric="output_tok_s"), "output_tok_s", 1, ids) for ids in (new_base, new_same))
    design = seq.Design(max_repeats=4)
    assert row["text"].startswith(seq.verdict(a, b, higher_is_better=True, design=design).text)
    assert main(["compare", "demo/baseline", "demo/same", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    rows = [r for r in doc["rows"] if r["metric"] == "output_tok_s"]
    assert rows and not set(rows[0]["base_runs"]) & set(stored), rows[0]
    # its cost says the same: the stored four are left out (not "reused"), and the pair's launches are the
    # first n of each side made here (the stored four's seconds not counted among them)
    from toolkit.analysis.launch_cost import launch_seconds

    base_cost = doc["cost"]["recipes"]["demo/baseline"]
    assert base_cost["left out"]["launches"] == 4 and "reused" not in base_cost, base_cost
    (pair,) = doc["cost"]["pairs"]
    counted = [*rows[0]["base_runs"][:n], *rows[0]["variant_runs"][:n]]
    assert pair["launches"] == 2 * n and pair["seconds"] == round(sum(launch_seconds(r) for r in store.runs(
        run_ids=counted)), 1), (pair, counted)
    assert main(["compare", "demo/baseline", "demo/same"]) == 0
    assert "left out 4 (" in " ".join(capsys.readouterr().out.split())


def test_the_spread_flag_and_the_runs_used_are_the_launches_judged_not_a_stored_reference(tmp_path, home,
                                                                                          monkeypatch, capsys):
    """Four launches of demo/baseline are stored; the box then slows 15% and `run demo/baseline demo/same
    demo/same2` (two harmless changes) launches the reference again. Its stored four and its new launches
    lie 15% apart: read as one configuration's spread they flagged the reference "noisy: launch-to-launch
    spread 6.6% against its peers' 1.4%" (the box's change, not its noise), and `used` listed the stored
    four as judged. Now `used` holds the launches the verdicts judged, `reused_runs` the stored four, and
    the flag reads the judged ones only."""
    from test_sequential import small_demo
    from toolkit.analysis import spread_flag
    from toolkit.analysis.selection import values_at
    from toolkit.cli import main
    from toolkit.results.store import Store

    root = small_demo(tmp_path, monkeypatch, concurrency="[1]")
    for name, seed in (("same", 1), ("same2", 2)):
        (root / "recipes" / "demo" / f"{name}.toml").write_text(
            f'extends = "demo/baseline"\n[server.args]\nrandom-seed = {seed}\n')
    assert main(["run", "demo/baseline", "--repeats", "4", "--json"]) == 0
    stored = [rid for _, rid in json.loads(capsys.readouterr().out)["runs"]]
    monkeypatch.setenv("SGLANG_MINI_BOX_SLOWDOWN", "1.15")
    assert main(["run", "demo/baseline", "demo/same", "demo/same2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    new = {name: [rid for n, rid in out["runs"] if n == name] for name in out["used"]}
    assert out["used"] == new, out["used"]  # the launches judged: this campaign's
    assert out["reused_runs"] == {"demo/baseline": stored}
    store = Store(home / "results.sqlite")
    values = {n: values_at(store.samples(ids, metric="output_tok_s"), "output_tok_s", 1, ids) for n, ids in new.items()}
    assert out["spread_flags"] == [{**f.to_dict(), "metric": "output_tok_s", "point": 1}
                                   for f in spread_flag.flags(values)]
    assert not any(f["name"] == "demo/baseline" for f in out["spread_flags"]), out["spread_flags"]
