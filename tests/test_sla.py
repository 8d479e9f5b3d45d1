"""SLA bounds in both directions (issue 29): a latency ceiling keeps the highest passing concurrency,
a throughput floor finds the lowest, both together the range between; each bound's verdict at a
point states its runs' spread and says "at the bound" where they straddle it; and
`sweep demo/sweep --sla "output_tok_s>=500"` on the miniature finds each variant's lowest point."""

from __future__ import annotations

import json
import math
import random

import pytest

from conftest import demo_project
from toolkit.analysis.sla import (AT_BOUND, CEILING, FAILS, FLOOR, PASSES, Search, false_pass_rate, judge, legend,
                                  load_breaks, max_points, parse_bound, search)
from toolkit.cli import main


def test_a_bound_is_a_ceiling_or_a_floor_by_its_metric_and_operator():
    assert parse_bound("itl_ms_p99<=50").kind == CEILING  # latency rises with load: holds at low load
    assert parse_bound("output_tok_s>=500").kind == FLOOR  # throughput rises with load: holds at high load
    assert parse_bound("output_tok_s<900").kind == CEILING
    assert parse_bound("ttft_ms_median>5").kind == FLOOR
    assert parse_bound("failed<=0").kind == CEILING


def test_a_floor_search_finds_the_lowest_passing_concurrency_within_the_point_bound():
    rng = random.Random(11)
    for _ in range(300):
        lo, hi = rng.randint(1, 4), rng.randint(4, 256)
        base, per = rng.uniform(2, 20), rng.uniform(0.2, 1.9)
        bound = rng.uniform(100, 900)
        tok_s = lambda c: 1000 * c / (base + per * c)  # noqa: E731 - the miniature's cost model
        s = search(lo, hi, lambda c: tok_s(c) >= bound, want="lowest")
        passing = [c for c in range(lo, hi + 1) if tok_s(c) >= bound]
        assert s.best == (min(passing) if passing else None)
        if not passing:
            assert s.never_passes and s.measured == [(hi, False)]  # the highest load first
        assert len(s.measured) <= max_points(lo, hi)


def _feed_all(s: Search, ok) -> int:
    n = 0
    while (c := s.next_point()) is not None:
        n += 1
        s.feed(c, [judge(b, [b.value * (1.1 if ok(b, c) == (b.op in (">=", ">")) else 0.9)]) for b in s.bounds])
    return n


@pytest.mark.parametrize("floor_from, ceiling_to, passing", [(5, 12, (5, 12)), (1, 16, (1, 16)), (12, 5, None)])
def test_a_floor_and_a_ceiling_together_give_the_range_between(floor_from, ceiling_to, passing):
    bounds = (parse_bound("output_tok_s>=500"), parse_bound("itl_ms_median<=20"))
    s = Search(1, 16, bounds)
    n = _feed_all(s, lambda b, c: c >= floor_from if b.kind == FLOOR else c <= ceiling_to)
    assert s.passing == passing and n <= s.max_points
    if passing:
        assert s.best == passing[1] and s.why_none() is None  # the most load meeting every bound
    else:
        assert "no concurrency meets every bound" in s.why_none() and "output_tok_s>=500 fails" in s.why_none()


def test_the_verdict_at_a_point_states_its_noise():
    b = parse_bound("itl_ms_p99<=50")
    clean = judge(b, [48.7, 49.0, 49.9])
    assert clean.state == PASSES and clean.text == "passes (mean 49.2 of 50, spread 48.7-49.9, 3 runs)"
    straddle = judge(b, [49.1, 50.6])
    assert straddle.state == AT_BOUND and straddle.mean_holds and "spread 49.1-50.6" in straddle.text
    assert judge(b, [51, 52]).state == FAILS and not judge(b, [51, 52]).mean_holds
    assert "one run, its noise unknown" in judge(b, [40]).text
    assert judge(b, []).state == "not measured" and not judge(b, []).mean_holds


def test_the_legend_is_generated_from_the_runs_per_point():
    assert false_pass_rate(2) == 0.25 and false_pass_rate(3) == 0.125
    assert "at most 25% (0.5^2)" in legend(2) and "'at the bound' 50%" in legend(2)
    assert "at most 12% (0.5^3)" in legend(3) and "75%" in legend(3)


def test_a_metric_moving_against_its_direction_is_named():
    lines = load_breaks({4: [480, 470], 8: [600, 610], 12: [390, 400], 16: [700]}, "output_tok_s")
    assert len(lines) == 1 and "fell from 605 at concurrency 8 to 395 at 12" in lines[0]
    assert load_breaks({4: [480, 520], 8: [500, 510]}, "output_tok_s") == []  # within the runs' spread


@pytest.mark.slow  # ~2-4 min on 2 busy cores: up to 5 points x 6 configurations, one launch each
def test_sweep_finds_each_variants_lowest_concurrency_reaching_a_throughput(tmp_path, monkeypatch, home, capsys):
    proj = demo_project(tmp_path, monkeypatch)
    assert main(["sweep", "demo/sweep", "--sla", "output_tok_s>=500", "--repeats", "1", "--json",
                 "-o", str(proj / "o")]) in (0, 1)
    doc = json.loads(capsys.readouterr().out)
    limits = {}
    for v in doc["variants"]:
        if v["pruned"]:
            continue
        s = v["sla"]
        measured = dict((c, ok) for c, ok in s["measured"])
        assert s["kind"] == "floor" and len(s["measured"]) <= s["bound_points"] == max_points(1, 16)
        assert s["measured"][0] == [16, measured[16]]  # the highest load first
        if s["limit"] is None:  # the load never reaches it: said at the top of the range, not "fails at 1"
            assert measured[16] is False and "does not reach the SLA even at concurrency 16" in s["none"]
            continue
        limit = s["limit"]
        assert measured[limit] is True and (limit == 1 or measured[limit - 1] is False), s  # the lowest passing
        [verdict] = s["verdicts"]
        assert verdict["mean"] >= 500 and verdict["state"] in ("passes", "at the bound")
        assert s["passing"] == [limit, 16] and s["min_concurrency"] == limit
        limits[v["variant"]] = limit
    # the cost model: 1000 c / (base + per_seq c) tok/s at most, so a limit is never below what the model
    # allows. The fast per-sequence cost reaches 500 tok/s with a margin on a quiet box (at c = 16: 889 tok/s
    # at base 2 ms, 727 at 6 ms); a loaded CI box once kept base 6 under 500 even at 16, which the loop
    # above already checked is said as "does not reach", so only the fastest variant must find a limit
    assert "demo/sweep[mini-step-base-ms=2,mini-step-per-seq-us=1000]" in limits, doc["variants"]
    for base in (2, 6):
        name = f"demo/sweep[mini-step-base-ms={base},mini-step-per-seq-us=1000]"
        assert limits.get(name, 16) >= math.ceil(base / (2 - 1)), limits
    ranked = [r["point"] for r in doc["ranked"]]
    assert ranked and ranked == sorted(ranked)  # the lowest concurrency first


def test_the_point_verdict_keeps_its_stated_false_pass_rate(monkeypatch):
    """benchmarks/sla_calibration.py, smaller: on the bound and beyond it, "passes" no more often than
    0.5^n (within the binomial interval, fixed seed), for three noise shapes, both bound kinds."""
    import sys

    from conftest import REPO_ROOT

    monkeypatch.syspath_prepend(str(REPO_ROOT / "benchmarks"))
    sys.modules.pop("sla_calibration", None)
    from sla_calibration import calibrate

    rows = calibrate(cases=1000, seed=29, runs=(1, 2, 3))
    false = [r for r in rows if r["kind"] == "false passes"]
    assert false and all(r["keeps"] for r in false), [r for r in false if not r["keeps"]]
    on = [r for r in false if r["true"] == "on the bound"]
    assert all(r["ci"][0] <= 0.5 ** r["runs"] <= r["ci"][1] for r in on)  # the rate is met, not only bounded
