"""Every verdict keeps its promise: benchmarks/verdict_calibration.py's rows, fewer cases, fixed
seeds (deterministic): each false-alarm rate's exact 95% interval reaches its stated alpha or below,
and each power reaches its target. A change that breaks a verdict's error rate fails here."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import verdict_calibration as vc  # noqa: E402

CASES = 300
# The answers rows at the hardest share of unstable prompts (and the fewest at 4 launches, where the
# old rule was most wrong), the change point at its higher noise and the stretch at -20% (each Otava
# row costs two starts of its interpreter), every other row.
ROWS = [r for r in vc.ROWS if (not r.name.startswith("answers") or "30/64" in r.name
                               or r.name.startswith("answers: 4 candidate launches, 10/64"))
        and (not r.name.startswith("change point") or "3% noise" in r.name or "stretch -20%" in r.name)]


@pytest.fixture
def otava_home(monkeypatch):
    """Otava's env shared between tests (as tests/test_history.py); skipped where it cannot be made."""
    from conftest import TEST_CACHE
    from toolkit.errors import PatchbenchError
    from toolkit.history import otava

    monkeypatch.setenv("PATCHBENCH_OTAVA_ENV", str(TEST_CACHE / "otava-0.8.0"))
    try:
        otava.ensure_env(TEST_CACHE)
    except PatchbenchError as exc:
        pytest.skip(f"apache-otava not installable here: {exc}")


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_verdict_keeps_its_stated_rates(row, request):
    if row.name.startswith("change point"):
        request.getfixturevalue("otava_home")
    result = vc.measure(row, seed=7, cases=CASES)
    assert result.false_alarm_ci[0] <= row.stated_alpha, vc.table([result])
    if row.power_target is not None:
        assert result.power >= row.power_target, vc.table([result])
    assert result.holds


def test_identical_gate_results_never_fail():
    assert vc.gate_identical(seed=3, cases=100) == 0


def test_the_table_and_json(tmp_path, capsys):
    """The benchmark's own entry point: a table row per verdict, JSON with the same figures."""
    import json

    out = tmp_path / "cal.json"
    vc.ROWS[:] = [r for r in vc.ROWS if r.name.startswith("speed")]
    try:
        assert vc.main(["--cases", "50", "--json", str(out)]) in (0, 1)
    finally:
        import importlib

        importlib.reload(vc)
    text = capsys.readouterr().out
    data = json.loads(out.read_text())
    assert [d["name"] for d in data] == [line.split("  ")[0] for line in text.splitlines()[2:-1]]
    assert all({"stated_alpha", "false_alarm_rate", "false_alarm_ci", "power", "holds"} <= set(d) for d in data)
    assert vc.main(["--cases", "0"]) == 2


def test_change_point_verdict_counts_a_step_and_not_an_edge_outlier():
    """toolkit.history.change_verdict.judge: a halving over 4 points with 1% noise counts (the demo's
    history); Otava's candidate on a flat series whose best split does not pass the whole-series test
    is dropped, and a kept change point carries both p-values."""
    from toolkit.history.change_verdict import changed, judge, split_pvalues
    from toolkit.history.otava import ChangePoint

    def cp(index, p):
        return ChangePoint(index, -50.0, 0.5, 72.0, 37.0, 1.0, 1.0, p)

    (kept,) = judge([72.0, 73.0, 37.0, 37.5], [cp(2, 1e-4)], alpha=0.01)
    assert kept.otava_pvalue == 1e-4 and kept.splits == 3 and kept.pvalue == pytest.approx(changed([72, 73, 37, 37.5]))
    assert kept.pvalue < 0.01
    flat = [100.0, 101.0, 99.5, 100.5, 100.2, 99.8, 100.1, 98.8]  # its best split: p = 0.28 after 7 places
    assert judge(flat, [cp(7, 5e-4)], alpha=0.01) == []
    assert split_pvalues([1.0, 1.0, 2.0, 2.0])[1] == 0.0  # a difference without any spread is exact


def test_a_regression_fixed_later_is_a_stretch_with_both_ends():
    """Otava proposes nothing for 100, 100, 100, 50, 50, 100, 100 (E-Divisive's halves have about
    the same mean); the verdict reports the stretch as two change points, the regression and its
    fix, and the line a user reads names both. A step is not read as a stretch (it counts as one
    step, even where Otava proposed nothing), a flat series shows neither, and where Otava found one end the stretch's two ends replace it."""
    from toolkit.history import changes, stretch
    from toolkit.history.change_verdict import gate, judge
    from toolkit.history.otava import ChangePoint
    from toolkit.history.series import Entry, History
    from toolkit.results.metrics import parse_spec

    down_up = [100.0, 100.8, 99.4, 50.2, 49.7, 100.3, 99.6]
    start, end = judge(down_up, [], alpha=0.01, min_magnitude=0.03)
    assert (start.index, end.index) == (3, 5) and start.stretch == end.stretch == (3, 5)
    assert start.direction(higher_is_better=True) == "worse" and end.direction(higher_is_better=True) == "better"
    assert start.forward_change_percent == pytest.approx(-50, abs=1) and start.splits == stretch.places(7) == 10
    assert start.pvalue < 0.01 / 3 and start.otava_pvalue is None

    labels = [f"0.1.{i}" for i in range(len(down_up))]
    hist = History("r", "sglang", "output_tok_s", 1, None,
                   [Entry(f"id{i}", lab, "release", i, None, None, values=[v]) for i, (lab, v) in enumerate(zip(labels, down_up))])
    rows = changes.rows(hist, [start, end], parse_spec("output_tok_s@1"), {})
    text = changes.line(rows[0])
    assert "0.1.2 -> 0.1.3" in text and "regression at 0.1.3, fixed at 0.1.5" in text, text
    assert rows[1]["before"] == "0.1.4" and rows[1]["after"] == "0.1.5" and rows[1]["stretch"]["end"] == "end"

    step = [100.0, 100.5, 99.6, 100.2, 99.9, 50.1, 49.8, 50.3, 50.0, 49.7]
    [one] = judge(step, [], alpha=0.01)  # the best split fits better than any stretch: a step, not two ends
    assert one.index == 5 and one.stretch is None and one.otava_pvalue is None
    flat = [100.0, 101.0, 99.5, 100.5, 100.2, 99.8, 100.1, 98.8]
    assert judge(flat, [], alpha=0.01) == [] and gate(flat) > 0.1
    # a 5% dip over two points at 3% noise is no stretch at 0.01; with 1 in 1000 noise it is
    assert judge([100, 103, 97, 95, 95, 101, 99, 102], [], alpha=0.01) == []
    assert len(judge([100, 100.1, 99.9, 95, 95.1, 100, 99.9, 100.1], [], alpha=0.01)) == 2

    # Otava saw the stretch at the start of the series as a step at its end (index 3), and that step
    # counts on its own; the stretch's two ends replace it
    early = [100.0, 50.3, 49.9, 100.8, 99.0, 100.2, 99.8, 99.8, 99.9, 99.2, 99.9, 99.7, 101.3, 100.1, 99.9,
             99.9, 99.7, 99.6, 99.8, 100.2]
    otava_cp = ChangePoint(3, 100.0, 1.0, 50.0, 100.0, 0.3, 0.3, 1e-4)
    (alone,) = judge(early[:3] + [100.0] * 17, [otava_cp], alpha=0.01, min_magnitude=0.9)  # no stretch that small
    assert alone.index == 3 and alone.stretch is None and alone.otava_pvalue == 1e-4
    found = judge(early, [otava_cp], alpha=0.01)
    assert [(c.index, c.stretch, c.otava_pvalue) for c in found] == [(1, (1, 3), None), (3, (1, 3), None)]


def test_sequential_answers_ask_fewer_launches_than_the_fixed_design_of_equal_power():
    """Up to 4 looks at 30/64 unstable prompts: a false 'answers changed' within alpha (its exact
    interval), power at least the fixed 2-launch design's target, and on average well under the 2
    launches that fixed design asks (under no change and under the change alike)."""
    row = next(r for r in vc.ROWS if r.name == "answers, sequential: up to 4 looks, 30/64 unstable")
    result = vc.measure(row, seed=11, cases=CASES)
    assert result.false_alarm_ci[0] <= row.stated_alpha, vc.table([result])
    assert result.power >= 0.9, vc.table([result])
    no_change, changed = result.launches
    assert 1.0 <= no_change <= 1.5 and 1.0 <= changed <= 1.6, vc.table([result])
