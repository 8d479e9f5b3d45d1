"""Sequential verdicts (toolkit.analysis.sequential): settle early on big effects, keep alpha under
repeated looks on A/A pairs, say how far an unsettled pair got."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from scipy import stats as sp

from toolkit.analysis import sequential as seq


def _launches(rng, n, ratio=1.0, noise=0.02, base=100.0):
    return list(base * ratio * np.exp(noise * rng.standard_normal(n)))


def test_a_2x_pair_settles_in_min_repeats():
    rng = np.random.default_rng(7)
    for _ in range(50):
        a, b = _launches(rng, 8), _launches(rng, 8, ratio=2.0)
        v = seq.verdict(a, b, higher_is_better=True)
        assert v.verdict == seq.FASTER and v.n == 2, v.text
        lat = seq.verdict([1 / x for x in a], [1 / x for x in b], higher_is_better=False)
        assert lat.verdict == seq.FASTER and lat.n == 2 and lat.speedup == pytest.approx(v.speedup)
    assert seq.verdict(b, a, higher_is_better=True).verdict == seq.SLOWER


def test_a_a_pairs_keep_alpha_under_repeated_looks():
    """Looked at after every pair of launches up to 16 each (the default cap): faster/slower on A/A pairs stays within
    alpha (the upper end of the 95% binomial CI of the count is tested against alpha); the other
    verdicts are equal or not settled."""
    rng = np.random.default_rng(20261201)
    design = seq.Design(min_effect=0.0)  # the hardest case: any excluded 1 counts as faster/slower
    trials, wrong, other = 400, 0, set()
    for i in range(trials):
        noise = 0.01 + 0.04 * (i % 5) / 4
        v = seq.verdict(_launches(rng, 16, noise=noise), _launches(rng, 16, noise=noise), higher_is_better=True,
                        design=design)
        if v.verdict in (seq.FASTER, seq.SLOWER):
            wrong += 1
        else:
            other.add(v.verdict)
    assert other <= {seq.EQUAL, seq.UNSETTLED}
    low = sp.binomtest(wrong, trials).proportion_ci(0.95, method="exact").low
    assert low <= design.alpha, (wrong, trials)
    assert wrong / trials <= design.alpha


def test_quiet_a_a_pair_is_equal_and_a_noisy_one_says_its_interval():
    rng = np.random.default_rng(3)
    v = seq.verdict(_launches(rng, 8, noise=0.002), _launches(rng, 8, noise=0.002), higher_is_better=True)
    assert v.verdict == seq.EQUAL and v.n <= 4 and v.text.startswith(f"equal within 2% after {v.n} launches each")
    a, b = _launches(rng, 16, noise=0.05), _launches(rng, 16, noise=0.05)
    v = seq.verdict(a, b, higher_is_better=True, design=seq.Design(futility=False))
    assert v.verdict == seq.UNSETTLED and v.n == 16 and not seq.more_needed(v)
    assert v.text.startswith("noisy: not settled after 16 launches each, the pair's spread ") and v.low < 1 < v.high
    early = seq.verdict(a, b, higher_is_better=True)  # futility: it could not settle by 16 at this spread
    assert early.verdict == seq.UNSETTLED and early.futile and early.n < 16 and not seq.more_needed(early)
    assert f"after {early.n} launches each (could not settle by 16), the pair's spread" in early.text
    assert seq.more_needed(seq.verdict([100, 101], [99, 103], higher_is_better=True))


def test_first_settled_look_is_kept_and_legend_carries_the_settings():
    rng = np.random.default_rng(5)
    a, b = _launches(rng, 2), _launches(rng, 2, ratio=1.5)
    first = seq.verdict(a, b, higher_is_better=True)
    later = seq.verdict(a + _launches(rng, 6), b + _launches(rng, 6, ratio=0.5), higher_is_better=True)
    assert first.verdict == later.verdict == seq.FASTER and later.n == 2
    assert seq.verdict(a[:1], b[:1], higher_is_better=True).verdict == seq.TOO_FEW
    d = seq.Design(alpha=0.1, min_effect=0.03, min_repeats=3, max_repeats=6)
    text = seq.legend(d)
    assert "90%" in text and "3%" in text and "3..6" in text and "0.1" in text
    with pytest.raises(ValueError):
        seq.Design(min_repeats=1)


def test_critical_value_is_the_crossing_of_the_bayes_factor():
    for n in (2, 3, 5, 8):
        t = seq.critical_t(n, n)
        assert math.isfinite(t) and seq.bayes_factor(t, n, n) == pytest.approx(1 / seq.DEFAULT_ALPHA)
        assert t > sp.t.ppf(0.975, 2 * n - 2)  # wider than the fixed-sample interval: the price of looking
    assert seq.critical_t(1, 1) == math.inf


def test_each_looks_critical_value_and_borrowing_test_are_exactly_the_stated_t_and_f_tests():
    """The critical value of look n is the Student t quantile at the calibrated level with 2n - 2 plus
    the borrowed degrees of freedom (one- and two-sided), and a stored spread is refused by the F
    test's p-value (and a configuration is flagged noisy by its F test), to the last bit: a verdict
    or `plan` computes them thousands of times through scipy.special, without scipy.stats' slow
    argument handling, and must give scipy.stats' numbers."""
    for d in (seq.Design(), seq.Design(alpha=0.1, max_repeats=4), seq.Design(min_repeats=3, max_repeats=6)):
        for n in range(d.min_repeats, d.max_repeats + 1):
            for borrowed, stored in ((0, seq.NONE), (5, seq.Stored(prior_dof=5)), (0, seq.Stored(0, 9, 9))):
                for sides in (1, 2):
                    level = seq.nominal_level(d.alpha, d.min_repeats, d.max_repeats, *stored.key(d), sides=sides)
                    want = float(sp.t.isf(level / 2 if sides == 2 else level, 2 * n - 2 + borrowed))
                    assert seq.critical(n, n, d, stored, borrowed, sides) == want
    from toolkit.analysis import noise_prior

    f = np.array([0.0, 0.3, 1.0, 2.2, 4.0, 9.5, 40.0, np.inf])
    for dof, prior_dof in ((2, 3), (6, 14), (np.array([2.0] * 8), np.array([5.0] * 8))):
        want = (np.sqrt(f) >= noise_prior.FACTOR) & (sp.f.sf(f, dof, prior_dof) < noise_prior.ALPHA)
        assert np.array_equal(noise_prior.flagged_against(f, dof, prior_dof), want)
        assert want.any() and not want.all()
    from toolkit.analysis import spread_flag

    rng = np.random.default_rng(7)
    values = {"quiet": _launches(rng, 6, noise=0.01), "calm": _launches(rng, 6, noise=0.01),
              "noisy": _launches(rng, 6, noise=0.2)}
    (flag,) = spread_flag.flags(values)
    lq = [np.log(values[k]) for k in ("quiet", "calm")]
    pooled = sum(float(x.var(ddof=1)) for x in lq) / 2
    assert flag.name == "noisy" and flag.p_value == float(sp.f.sf(float(np.log(values["noisy"]).var(ddof=1)) / pooled, 5, 10))


def test_repeated_intervals_sit_between_the_fixed_and_the_open_ended_ones_and_the_legend_says_its_level():
    """The default method spends alpha over the looks 2..max only: each look's critical value is
    wider than the fixed-sample t (the price of looking) and narrower than the open-ended mixture's;
    its legend prints the nominal level it computed with."""
    d = seq.Design()
    level = seq.nominal_level(d.alpha, d.min_repeats, d.max_repeats)
    assert 0.005 < level < d.alpha
    for n in range(2, 17):
        c = seq.critical(n, n, d)
        assert sp.t.ppf(0.975, 2 * n - 2) < c
        # 15 looks: at 2 each (2 df) Pocock's c is above the mixture's (11.0 against 10.05), from 3 below it
        assert (c < seq.critical_t(n, n)) == (n >= 3), n
    assert seq.critical(17, 17, d) == seq.critical_t(17, 17) and seq.critical(3, 4, d) == seq.critical_t(3, 4)
    assert f"{level:.4f}" in seq.legend(d) and "within 16 each" in seq.legend(d)
    eight = seq.Design(max_repeats=8)  # 7 looks: between the two at every look
    assert all(sp.t.ppf(0.975, 2 * n - 2) < seq.critical(n, n, eight) < seq.critical_t(n, n) for n in range(2, 9))
    assert "confidence sequence" in seq.legend(seq.Design(method=seq.MIXTURE))
    with pytest.raises(ValueError):
        seq.Design(method="wald")


SMALL = ('driver = "serving"\ninput_len = 16\noutput_len = 16\nconcurrency = [1, 4]\nnum_prompts = 8\nwarmup = 1\n'
         'repeats = 4\nmax_repeats = 4\n')


def small_demo(tmp_path, monkeypatch, *, concurrency: str = "[1, 4]", extra: str = ""):
    """The demo project with demo/baseline's [benchmark] made SMALL (at `concurrency`, `extra` lines
    first); its root."""
    from conftest import demo_project

    root = demo_project(tmp_path, monkeypatch)
    base = root / "recipes" / "demo" / "baseline.toml"
    head, rest = base.read_text().split("[benchmark]", 1)
    base.write_text(head + "[benchmark]\n" + extra + SMALL.replace("concurrency = [1, 4]", f"concurrency = {concurrency}")
                    + rest[rest.index("\n[", 1):])
    return root


def quick_pair(tmp_path, monkeypatch):
    """The demo project with demo/baseline's benchmark made SMALL and demo/quick (a 4 ms decode step
    against 12 ms: 3x); its root."""
    root = small_demo(tmp_path, monkeypatch)
    (root / "recipes" / "demo" / "quick.toml").write_text('extends = "demo/baseline"\n[server.args]\n'
                                                          'mini-step-base-ms = 4\n')
    return root


def test_run_launches_a_3x_pair_until_settled_and_resumes_from_the_store(tmp_path, home, monkeypatch, capsys):
    """`run demo/baseline demo/quick` (sequential by default): a decode step of 4 ms instead of 12 ms
    settles "faster" at every point in 2 launches each (on a busy 2-core box the miniature's launches
    vary by ~10%: a 1.4x pair needs a quieter one to settle in 2); run again, the stored runs of the
    same identity count and nothing is launched; the summary says what the launches cost; compare
    reports the sequential verdict, not "too few repeats"; a sweep of the same configurations keeps
    the sequential state from the store (nothing launched)."""
    import json

    from toolkit.cli import main
    from toolkit.results.store import Store

    root = quick_pair(tmp_path, monkeypatch)

    assert main(["run", "demo/baseline", "demo/quick", "--json"]) == 0  # the recipe's max_repeats = 4
    out = json.loads(capsys.readouterr().out)
    rows = out["sequential"]
    assert {r["point"] for r in rows} == {1, 4}
    assert all(r["verdict"] == "faster" and r["speedup"] > 2 for r in rows), rows
    # 2 each on a quiet box (test_a_2x_pair_settles_in_min_repeats); on CI's loaded one a launch slowed
    # by its neighbours can leave the look at 2 unsettled: the run then stops at the first look that settles
    n = max(r["launches_each"] for r in rows)
    assert 2 <= n <= 4 and [name for name, _ in out["runs"]].count("demo/quick") == n and len(out["runs"]) == 2 * n
    assert "repeated 95% confidence intervals" in out["sequential_legend"]
    assert "F test at 0.01" in out["spread_flag_legend"]
    assert n > 2 or out["spread_flags"] == []  # 2 launches: too few to flag (a loaded box's 3rd or 4th may be flagged)
    cost = out["cost"]
    assert cost["launches"] == 2 * n and cost["fixed_launches"] == 8 and 0 < cost["seconds"]
    assert n == 4 or cost["seconds"] < cost["fixed_seconds"]
    # the same design (the recipe's max 4 each): the stored runs give the same settled verdicts, so
    # nothing is launched; compare and sweep judge with it too (a larger cap has stricter early
    # boundaries, which a loaded box's spread at 2 launches can miss)
    assert main(["run", "demo/baseline", "demo/quick"]) == 0
    text = capsys.readouterr().out
    assert "demo/quick vs demo/baseline, output_tok_s @ 1: " in text and "faster after " in text
    assert (f"cost: nothing launched (the stored runs of these configurations decided it: {2 * n} stored launches, "
            in " ".join(text.split()))
    assert len(Store(home / "results.sqlite").runs()) == 2 * n
    # the same configuration under another name: run counts demo/quick's runs for it and says so;
    # compare, which reads labels, names the label they are stored under instead of "run them first"
    (root / "recipes" / "demo" / "quick2.toml").write_text('extends = "demo/quick"\n')
    assert main(["run", "demo/baseline", "demo/quick2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["counted_as"] == {"demo/quick2": ["demo/quick"]}
    assert len(Store(home / "results.sqlite").runs()) == 2 * n
    assert main(["compare", "demo/baseline", "demo/quick2"]) == 2
    assert "demo/quick2's configuration is stored as demo/quick" in " ".join(capsys.readouterr().err.split())
    # compare: the pair was launched until settled, so every row is run's sequential verdict (at 2 each
    # too few for the fixed rule, at 4 each not the fixed rule's either), under the design its runs recorded
    assert main(["compare", "demo/baseline", "demo/quick", "--metric", "output_tok_s", "--json"]) == 0
    cmp = json.loads(capsys.readouterr().out)
    assert [r["verdict"] for r in cmp["rows"]] == ["faster", "faster"], cmp["rows"]
    assert [r["sequential"] for r in cmp["rows"]] == [r["text"] for r in rows]
    assert cmp["spread_flags"] == out["spread_flags"]  # run's noisy flags, read again from the same runs
    assert "pairs launched until settled" in cmp["legend"] and "2..4 launches each" in cmp["legend"]
    assert "Mann-Whitney" not in cmp["legend"]  # no row took the fixed rule
    assert main(["compare", "demo/baseline", "demo/quick", "--metric", "output_tok_s"]) == 0
    text = capsys.readouterr().out
    assert "too few repeats" not in text and "faster" in text
    # --min-effect sets the sequential verdict's zone too (its legend says the one it judged with)
    assert main(["compare", "demo/baseline", "demo/quick", "--metric", "output_tok_s", "--min-effect", "0.5",
                 "--json"]) == 0
    wide = json.loads(capsys.readouterr().out)
    assert "the ratio is at least 50% (min_effect)" in wide["legend"], wide["legend"]
    # the report marks the rows the sequential rule decided, as compare's p column does
    assert main(["report", "demo/baseline", "demo/quick", "--output", str(tmp_path / "rep")]) == 0
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "faster (sequential)" in md
    # what the verdict cost against the fixed design, per recipe and per verdict (report and results)
    assert "### Cost (launch time; no GPU held)" in md and f"- demo/baseline: {n} launches, " in md, md
    assert f"demo/quick vs demo/baseline (output_tok_s): {2 * n} launches" in md
    # the cost line says the cap the pair was launched under (the recipe's 4), in the report and in results
    assert "(sequential up to 4 each, every point's verdict by" in md and "the fixed design (each side's [benchmark] repeats): ~8 launches" in md
    capsys.readouterr()
    assert main(["results", "--selected", "demo/baseline", "demo/quick"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert f"cost: demo/quick vs demo/baseline (output_tok_s): {2 * n} launches" in text, text
    assert f"(sequential up to 4 each, every point's verdict by {n} launches each)" in text, text
    assert "no GPU" in text  # the miniature holds none: its minutes are the cost
    assert main(["results"]) == 0
    assert f"cost: demo/quick: {n} launches" in " ".join(capsys.readouterr().out.split())
    # a sweep over the same configurations: the sequential state comes from the store
    (root / "recipes" / "demo" / "sq.toml").write_text('extends = "demo/baseline"\n[matrix]\n'
                                                       'server.args.mini-step-base-ms = [4]\n')
    assert main(["sweep", "demo/sq", "--json", "-o", str(tmp_path / "sw")]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(Store(home / "results.sqlite").runs()) == 2 * n  # nothing launched
    (variant,) = [r for r in doc["ranked"] if r["variant"] != "demo/sq"]
    assert variant["verdict"].startswith("faster") and variant["n"] == n, doc["ranked"]
    # nothing launched; the fixed design's figure counts the default's runs, stored under demo/baseline's name
    assert doc["cost"]["launches"] == 0 and doc["cost"]["per_recipe"]["demo/sq"]["fixed_seconds"] > 0, doc["cost"]
    # plan: the recorded spread and launch times of the baseline's runs
    assert main(["plan", "demo/baseline", "--json"]) == 0
    (plan,) = json.loads(capsys.readouterr().out)["plans"]
    assert plan["spread_from"] == ("runs" if n >= 4 else "few runs") and plan["runs"] == n
    assert plan["seconds_from"] == "runs"
    assert plan["seconds_per_launch"] < 60 and [r["effect"] for r in plan["effects"]] == [0.0, 0.02, 0.05, 0.2]


def test_a_run_killed_before_each_recipe_launched_is_resumed_into_its_sweep(tmp_path, home, monkeypatch, capsys):
    """`run A B` interrupted (SIGINT) after A's first launch, before B has a run: the next `run A B`
    continues that sweep (same group: one interleaved campaign for compare and the report), says so,
    and counts A's stored launch."""
    import json
    import os
    import signal
    import subprocess
    import sys
    import time

    from toolkit.cli import main
    from toolkit.results.store import Store

    quick_pair(tmp_path, monkeypatch)
    proc = subprocess.Popen([sys.executable, "-m", "toolkit", "run", "demo/baseline", "demo/quick"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    db, deadline = home / "results.sqlite", time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if db.exists() and Store(db).runs(status="ok"):
            break
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=120)
    killed = Store(db).runs()
    (group,) = {r.group_id for r in killed}
    first = [r for r in killed if r.status == "ok"]
    assert first and first[0].recipe == "demo/baseline", [(r.recipe, r.status) for r in killed]
    assert main(["run", "demo/baseline", "demo/quick", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["group_id"] == group and out["reused"]["demo/baseline"] >= 1
    assert {r.group_id for r in Store(db).runs(status="ok")} == {group}
    # while another process measures that sweep (it holds the sweep's lease: another person on a shared
    # store, another terminal), a call of the same recipes counts its runs but never launches into it
    with Store(db).lease(f"group-{group}") as held:
        assert held
        assert main(["run", "demo/baseline", "demo/quick", "--max-repeats", "5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["group_id"] != group and any("is being measured by another process now" in n for n in out["notes"])
    assert {r.group_id for r in Store(db).runs(run_ids=[rid for _, rid in out["runs"]])} <= {out["group_id"]}


def test_compare_judges_a_sequential_pair_as_run_did_across_sweeps(tmp_path, home, monkeypatch, capsys):
    """A second campaign against a stored reference: `run demo/baseline demo/quick2 --min-repeats 3`
    leaves the baseline's 2 stored launches (an earlier sweep, another campaign) out of its looks and
    names them, and launches the baseline again beside quick2, interleaved, in a new sweep. compare and
    the report read the launches run judged (this campaign's) with the design the runs recorded (min 3,
    not the recipe's 2), so they print run's verdicts word for word."""
    import json

    from toolkit.cli import main
    from toolkit.results.store import Store

    root = small_demo(tmp_path, monkeypatch, concurrency="[1]")
    for name, ms in (("quick", 4), ("quick2", 6)):
        (root / "recipes" / "demo" / f"{name}.toml").write_text(
            f'extends = "demo/baseline"\n[server.args]\nmini-step-base-ms = {ms}\n')
    assert main(["run", "demo/baseline", "demo/quick", "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    stored = [rid for name, rid in first["runs"] if name == "demo/baseline"]
    # asked again under another zone: nothing launched, and run says its verdicts use this call's design,
    # not the one the runs were launched under (which compare reads)
    assert main(["run", "demo/baseline", "demo/quick", "--min-effect", "0.5", "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["runs"] == [] and "min_effect 50%" in again["design_note"] and "min_effect 2%" in again["design_note"]
    assert main(["run", "demo/baseline", "demo/quick2", "--min-repeats", "3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    (pair,) = out["sequential"]
    n = pair["launches_each"]
    # the stored launches are named apart, as reused; `used` holds the launches judged (this campaign's)
    assert n >= 3 and out["reused_runs"]["demo/baseline"] == stored
    again_here = [rid for name, rid in out["runs"] if name == "demo/baseline"]
    assert len(again_here) >= n and f"demo/baseline: {len(stored)} stored run(s) from another campaign" in pair["text"]
    assert out["used"]["demo/baseline"] == again_here
    groups = {r.group_id for r in Store(home / "results.sqlite").runs(run_ids=out["used"]["demo/baseline"])}
    assert groups == {out["group_id"]}  # the judged sequence is one sweep's
    assert main(["compare", "demo/baseline", "demo/quick2", "--metric", "output_tok_s", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    assert row["sequential"] == pair["text"] and row["verdict"] == pair["verdict"], (row, pair)
    assert list(row["base_runs"]) == again_here[:n]  # this campaign's launches, as run judged
    # the runs listed under the table are the selection's (both campaigns'); the line after it names those judged
    assert main(["compare", "demo/baseline", "demo/quick2", "--metric", "output_tok_s"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert (f"judged: demo/baseline: the rows judged {n} of its {len(again_here) + len(stored)} run(s) "
            f"[{', '.join(i[:8] for i in again_here[:n])}]") in text, text
    assert row["launched_under"]["min_repeats"] == 3
    assert main(["report", "demo/baseline", "demo/quick2", "--output", str(tmp_path / "rep")]) == 0
    capsys.readouterr()
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "3..4 launches each" in md
    # the report's runs of the reference: both sweeps' (those judged and the stored two left out)
    assert f"demo/baseline: {len(out['used']['demo/baseline']) + len(stored)} run(s)" in md
    # a third campaign that needs no launch of the reference: its stored runs are the design, not a crossing to fix
    (root / "recipes" / "demo" / "quick3.toml").write_text('extends = "demo/baseline"\n[server.args]\n'
                                                           'mini-step-base-ms = 3\n')
    assert main(["run", "demo/baseline", "demo/quick3", "--json"]) == 0
    third = json.loads(capsys.readouterr().out)
    assert main(["compare", "demo/baseline", "demo/quick3", "--metric", "output_tok_s"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    if not any(name == "demo/baseline" for name, _ in third["runs"]):
        assert "launched by a sequential run against demo/baseline's stored runs" in text, text
        assert "never measured in one sweep" not in text
    # a later fixed campaign adds a baseline run to its sequence: every row still shows the values its
    # verdict's look used (its estimate inside its interval) and the report draws it
    assert main(["run", "demo/baseline", "demo/quick3", "--fixed", "--repeats", "1"]) == 0
    capsys.readouterr()
    assert main(["compare", "demo/baseline", "demo/quick2", "--all-metrics", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert sum(bool(r["sequential"]) for r in rows) > len(rows) // 2  # all but zero-valued counts (log-values)
    for r in (r for r in rows if r["sequential"]):
        assert r["n_base"] == r["n_variant"] == r["launches_each"], r
        assert None in (r["ci_low"], r["ci_high"]) or r["ci_low"] <= r["ratio"] <= r["ci_high"], r  # null: unbounded
    assert main(["report", "demo/baseline", "demo/quick2", "--output", str(tmp_path / "rep2")]) == 0
    # a variant measured on its own by the fixed design, beside a reference launched by other sequential
    # campaigns: not judged as "launched until settled" with their design, but by the fixed rule on all its runs
    (root / "recipes" / "demo" / "slow4.toml").write_text('extends = "demo/baseline"\n[server.args]\n'
                                                          'mini-step-base-ms = 9\n')
    assert main(["run", "demo/slow4", "--repeats", "2"]) == 0
    capsys.readouterr()
    assert main(["compare", "demo/baseline", "demo/slow4", "--metric", "output_tok_s", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (row,) = doc["rows"]
    # (a row too few for the fixed rule may still take the sequential rule at this one look: valid at any look)
    assert row["n_variant"] == 2 and row["launched_under"] is None, row
    assert not any("launched by a sequential run" in n for n in doc["notes"]), doc["notes"]


def test_attribute_launches_each_step_until_settled(tmp_path, home, monkeypatch, capsys):
    """`attribute demo/fast` without --repeats: the base and the patched prefix (a 12 ms -> 8 ms
    decode step) are launched until the step's sequential verdict is settled, and the table says
    the verdict, not "too few repeats"; again, the stored runs decide it as before, no launch."""
    import json

    from toolkit.cli import main

    from toolkit.recipe.load import load_recipe

    small_demo(tmp_path, monkeypatch, concurrency="[1]")
    # up to 6 each: at 4 a busy 2-core box can leave a 1.5x step futile at 3 (too wide to settle by 4)
    argv = ["attribute", "demo/fast", "--metric", "output_tok_s@1", "--max-repeats", "6", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    (step,) = out["sequential"]
    assert step["verdict"] == "faster" and 2 <= step["launches_each"] <= 6, step
    assert out["runs"] == 2 * step["launches_each"] and "too few repeats" not in out["lines"][0]
    assert "faster" in out["lines"][0]
    # what the steps cost, as run says it: these launches against the fixed design's repeats a variant
    repeats = load_recipe("demo/fast").benchmark.repeats
    cost = out["cost"]
    assert (cost["launches"], cost["stored_launches"], cost["fixed_launches"]) == (out["runs"], 0, 2 * repeats), cost
    assert cost["seconds"] > 0 and set(cost["per_recipe"]) == {"prefix0", "prefix1"}, cost
    assert main(argv) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["runs"] == 0 and again["sequential"] == out["sequential"]
    # again: nothing launched, the stored launches its verdicts read are its cost (text as in `run`)
    assert again["cost"]["launches"] == 0 and again["cost"]["stored_launches"] == out["runs"], again["cost"]
    assert main([a for a in argv if a != "--json"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert (f"cost: nothing launched (the stored runs of these configurations decided it: {out['runs']} stored "
            f"launches") in text and f"would have launched {2 * repeats}," in text, text
    # compare reads the step as attribute settled it (its runs record the design, cap 6 included)
    assert main(["compare", "demo/fast@prefix0", "demo/fast", "--metric", "output_tok_s@1", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    assert row["sequential"] == step["text"] and row["launched_under"]["max_repeats"] == 6
    # plan reads a variant label's stored runs (planned with its base recipe's benchmark and server)
    assert main(["plan", "demo/fast@prefix0", "demo/fast", "--json"]) == 0
    plans = json.loads(capsys.readouterr().out)["plans"]
    assert [p["recipe"] for p in plans] == ["demo/fast@prefix0", "demo/fast"] and all(p["runs"] >= 2 for p in plans)


def test_noisy_pair_says_so_and_a_quiet_unsettled_one_does_not():
    rng = np.random.default_rng(11)
    d = seq.Design(futility=False)
    noisy = seq.verdict(_launches(rng, 16, noise=0.08), _launches(rng, 16, ratio=1.03, noise=0.08),
                        higher_is_better=True, design=d)
    assert noisy.noisy and noisy.text.startswith("noisy: not settled after 16 launches each, the pair's spread ")
    assert not seq.more_needed(noisy)
    assert f"below {100 * seq.quiet_spread(d):.1f}%" in noisy.text
    # quiet launches, a true effect right at min_effect: unsettled, but the box is not the problem
    quiet = seq.verdict(_launches(rng, 16, noise=0.004), _launches(rng, 16, ratio=1.02, noise=0.004),
                        higher_is_better=True, design=d)
    assert not quiet.noisy and not quiet.text.startswith("noisy")


def test_plan_without_runs_assumes_the_spread_and_the_timeout(home, capsys):
    import json

    from toolkit.cli import main
    from toolkit.recipe.load import load_recipe

    assert main(["plan", "demo/baseline"]) == 0
    text = capsys.readouterr().out
    assert "varies 3.0% launch to launch (assumed" in text
    assert "for 60 s (no launch recorded: assuming [server] timeout_s, an upper bound)" in " ".join(text.split())
    # the miniature runs without a GPU ([server] gpus = 0): its cost is its minutes, not GPU time
    assert "a launch holds no GPU ([server] gpus = 0)" in text and "min (no GPU) a pair" in text
    assert "effect 20%: ~" in text and "GPU-" not in text and "campaign" not in text
    assert "no change (settled 'equal' or futile): ~" in text
    assert main(["plan", "baseline", "oea", "--json"]) == 0  # GLM-5 on 8 GPUs: GPU hours, the campaign's
    doc = json.loads(capsys.readouterr().out)
    camp = doc["campaign"]
    assert camp["reference"] == "baseline" and camp["variants"] == ["oea"]
    # 1800 s a launch (the timeout: none recorded) x 8 GPUs; the fixed design: each recipe's repeats
    repeats = sum(load_recipe(r).benchmark.repeats for r in ("baseline", "oea"))
    assert camp["fixed"] == {"launches": repeats, "seconds": repeats * 1800.0, "gpu_seconds": repeats * 1800.0 * 8}
    same, small, big = camp["effects"][0], camp["effects"][1], camp["effects"][-1]
    assert big["effect"] == 0.2 and big["launches"] < small["launches"] and big["gpu_seconds"] == big["seconds"] * 8
    # no change (an A/A pair): it settles "equal" or turns futile, and costs more than a 20% effect
    assert same["effect"] == 0.0 and same["launches"] > big["launches"]
    assert main(["plan", "baseline", "oea"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "a launch holds 8 GPU(s) for 1800 s" in text and "GPU-h (" in text and "campaign: baseline against oea" in text
    assert f"the fixed design (each recipe's [benchmark] repeats): {repeats} launches" in text, text
    # the worst case: no pair settles nor turns futile before the cap (16 launches each, both recipes)
    assert camp["worst"]["launches"] == 32 and camp["worst"]["max_repeats"] == 16
    assert "at worst (no pair settles before the cap, max_repeats 16): 32 launches" in text, text


def test_plan_of_a_recipe_with_a_matrix_is_the_sweep_campaign(home, capsys):
    """`plan demo/sweep` plans what `sweep demo/sweep` launches: the default configuration against each of its
    [matrix] variants, not the default alone."""
    import json

    from toolkit.cli import main
    from toolkit.recipe.load import expand_recipe, load_recipe

    variants = [v.name for v in expand_recipe(load_recipe("demo/sweep"))]
    assert main(["plan", "demo/sweep", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [p["recipe"] for p in doc["plans"]] == ["demo/sweep", *variants]
    assert doc["campaign"]["reference"] == "demo/sweep" and doc["campaign"]["variants"] == variants
    assert doc["notes"][0].startswith(f"demo/sweep has a [matrix]: planned as `patchbench sweep` measures it, the "
                                      f"default configuration against each of its {len(variants)} variants")


def test_plan_judges_every_pair_with_the_references_cap_and_shows_the_worst_case(tmp_path, home, monkeypatch, capsys):
    """`run demo/baseline demo/cap4` judges the pair with the reference's design (16 launches each; the
    candidate's own `max_repeats = 4` is named as unused): `plan` of the same recipes plans the candidate's
    rows with that cap too (it had planned them at 4, under the reference's legend of 16, beside a campaign
    at 16), says the candidate's setting is unused, and a plan of one recipe shows its worst case as well."""
    import json

    from conftest import demo_project
    from toolkit.cli import main

    root = demo_project(tmp_path, monkeypatch)
    (root / "recipes" / "demo" / "cap4.toml").write_text(
        'extends = "demo/baseline"\n[server.args]\nrandom-seed = 2\n[benchmark]\nmax_repeats = 4\n')
    assert main(["plan", "demo/baseline", "demo/cap4", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    ref, cand = doc["plans"]
    assert cand["worst"] == {**cand["worst"], "max_repeats": 16, "launches": 32}, cand
    assert cand["effects"] == ref["effects"], (ref, cand)  # same spread (assumed), same design: same plan
    assert "launches 2..16 each" in cand["legend"] and doc["campaign"]["worst"]["max_repeats"] == 16
    assert doc["notes"] and "demo/cap4: `[benchmark] max_repeats = 4` is not used" in doc["notes"][0]
    assert main(["plan", "demo/baseline", "demo/cap4"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "note: demo/cap4: `[benchmark] max_repeats = 4` is not used" in text, text
    # alone, a recipe is planned with its own cap, and its worst case is printed
    assert main(["plan", "demo/cap4"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "at worst (the pair never settles before the cap, max_repeats 4): 4 launches each" in text, text
    assert "note:" not in text


def test_plan_without_benchmark_runs_takes_the_launch_time_of_stored_launches(home, tmp_path, monkeypatch, capsys):
    """No benchmark run of a configuration: plan takes the launch time from its own verify/profile launches,
    else the same model's, and says which; the timeout (an upper bound: 1800 s for the CPU recipes, whose
    launches take 0.5-4 min) only when nothing was ever launched."""
    import json

    from conftest import demo_project
    from toolkit.cli import main

    demo_project(tmp_path, monkeypatch)
    assert main(["run", "demo/baseline", "--until", "verify"]) == 0  # a launch, no benchmark
    capsys.readouterr()
    assert main(["plan", "demo/baseline", "demo/fast", "--json"]) == 0
    base, fast = json.loads(capsys.readouterr().out)["plans"]
    assert base["seconds_from"] == "recipe" and fast["seconds_from"] == "model", (base, fast)
    assert 0 < base["seconds_per_launch"] < 30 and fast["seconds_per_launch"] == base["seconds_per_launch"]
    assert "the median launch to ready of 1 stored launches of the same model" in fast["seconds_why"], fast
    assert main(["plan", "demo/fast"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "the benchmark's time not known, not counted" in text and "timeout_s" not in text, text
    assert main(["run", "demo/baseline", "--repeats", "1"]) == 0  # now with this benchmark: its whole launch
    capsys.readouterr()
    assert main(["plan", "demo/fast", "--json"]) == 0
    (fast,) = json.loads(capsys.readouterr().out)["plans"]
    assert fast["seconds_from"] == "model" and "with this benchmark (demo/baseline)" in fast["seconds_why"], fast
    assert fast["seconds_per_launch"] > base["seconds_per_launch"]  # launch + benchmark + checks


def test_plan_reads_the_spread_of_the_configuration_as_defined_now(tmp_path, home, monkeypatch, capsys):
    """demo/quick measured twice at a 4 ms decode step, then its file changed to 8 ms and measured twice:
    plan's launch-to-launch spread is the 8 ms configuration's own (the runs compare and run would count),
    not the 2x gap between two configurations passing for noise."""
    import json

    from toolkit.cli import main

    root = quick_pair(tmp_path, monkeypatch)
    assert main(["run", "demo/quick", "--fixed", "--repeats", "2"]) == 0
    quick = root / "recipes" / "demo" / "quick.toml"
    quick.write_text(quick.read_text().replace("mini-step-base-ms = 4", "mini-step-base-ms = 8"))
    assert main(["run", "demo/quick", "--fixed", "--repeats", "2"]) == 0
    capsys.readouterr()
    assert main(["plan", "demo/quick", "--json"]) == 0
    (plan,) = json.loads(capsys.readouterr().out)["plans"]
    assert plan["runs"] == 2 and plan["spread_from"] == "few runs", plan
    assert plan["spread_measured"] < 0.2, plan  # 4 ms against 8 ms steps would read as ~0.4 (log scale)
    # two launches are too few to take their spread at face value: planned at its 80% upper bound, at least 3%
    assert plan["spread"] >= max(0.03, 3.9 * plan["spread_measured"]), plan
    # `run` launches until the pair settles at every point (here c=1 and c=4): the plan reads the noisiest
    # point's spread, not the first point's alone, and names the others
    spreads = plan["spreads"]
    assert set(spreads) == {"1", "4"} and all(v is not None for v in spreads.values()), plan
    assert plan["spread_measured"] == max(spreads.values()) == spreads[str(plan["point"])], plan
    assert main(["plan", "demo/quick"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    other = "1" if plan["point"] == 4 else "4"
    assert (f"output_tok_s @ {plan['point']} varies {100 * plan['spread_measured']:.1f}% launch to launch (over 2 runs, "
            f"too few to take at face value: planned at {100 * plan['spread']:.1f}%, the larger of its 80% upper bound "
            f"and the assumed 3%; its noisiest point, as every point must settle: @ {other} "
            f"{100 * spreads[other]:.1f}%)") in text, text


def test_launch_cost_counts_launch_and_benchmark_times_tp_dp():
    import dataclasses

    from toolkit.analysis import launch_cost
    from toolkit.recipe.spec import BenchSpec
    from toolkit.results.records import RunRow

    class R:  # the two fields launch_cost reads of a recipe
        def __init__(self, args, repeats):
            self.server = type("S", (), {"args": tuple(args.items())})()
            self.benchmark = dataclasses.replace(BenchSpec(), repeats=repeats)

    recipe = R({"tp-size": 4, "dp-size": 2}, 5)
    runs = [RunRow(f"r{i}", "x", timings={"build": 500.0, "launch": 240.0, "benchmark": 60.0}) for i in range(2)]
    c = launch_cost.cost(runs, runs, {"x": recipe})
    assert launch_cost.gpus_of(recipe.server.args) == 8 and c["launches"] == 2 and c["seconds"] == 600.0
    assert c["gpu_minutes"] == 80.0 and c["fixed_launches"] == 5 and c["fixed_gpu_minutes"] == 200.0
    assert "2 launches, 10.0 min, 80.00 GPU-min" in launch_cost.describe(c)
    recipe.server.gpus = 0  # a recipe that runs without a GPU: its minutes are its cost, no GPU-minutes
    c = launch_cost.cost(runs, runs, {"x": recipe})
    assert c["gpu_minutes"] == 0 and c["seconds"] == 600.0 and c["per_recipe"]["x"]["gpus"] == 0
    text = launch_cost.describe(c)
    assert "2 launches, 10.0 min (launch to ready + benchmark; no GPU held" in text and "GPU-min" not in text, text


def test_a_verdicts_gpu_minutes_count_its_look_and_the_fixed_design_its_repeats():
    """verdict_cost: a sequential verdict at 2 launches each costs those 4 launches (not the third each
    side stored), x 8 GPUs (tp 4 x dp 2) from the runs' own resolved recipe; the fixed design, each
    side's [benchmark] repeats at the mean launch time."""
    from types import SimpleNamespace

    from toolkit.analysis import verdict_cost
    from toolkit.results.records import RunRow

    resolved = {"server": {"args": {"tp-size": 4, "dp-size": 2}}, "benchmark": {"repeats": 5}}
    runs = {f"{side}{i}": RunRow(f"{side}{i}", side, recipe_resolved=resolved,
                                 timings={"build": 900.0, "launch": 240.0, "benchmark": 60.0})
            for side in "ab" for i in range(3)}
    row = SimpleNamespace(baseline="a", recipe="b", metric="output_tok_s", launches_each=2,
                          launched_under={"alpha": 0.05, "max_repeats": 16},
                          base_runs=("a0", "a1", "a2"), variant_runs=("b0", "b1", "b2"))
    (cost,) = verdict_cost.pair_costs([row], runs, ["output_tok_s"])
    assert cost.used.launches == 4 and cost.used.seconds == 1200.0 and cost.used.gpu_minutes == 160.0
    assert cost.fixed.launches == 10 and cost.fixed.gpu_minutes == 400.0
    assert "4 launches, 20.0 min, 160.00 GPU-min (sequential up to 16 each, every point's verdict by 2 launches each)" \
        in cost.text() and cost.to_dict()["max_repeats"] == 16
    assert "~10 launches, 50.0 min, 400.00 GPU-min: 0.40x its time" in cost.text()
    fixed = SimpleNamespace(**{**row.__dict__, "launched_under": None})  # launched by the fixed design: every run
    assert verdict_cost.pair_costs([fixed], runs, ["output_tok_s"])[0].used.launches == 6


def test_repeats_keeps_the_fixed_design_and_bad_settings_are_bad_input():
    from argparse import Namespace

    from toolkit.commands.run import sequential_design
    from toolkit.errors import BadInput
    from toolkit.recipe.spec import BenchSpec

    class R:
        name = "demo/r"
        benchmark = BenchSpec()

    def ns(**kw):
        base = dict(repeats=None, sequential=True, fixed=False, min_repeats=None, max_repeats=None, min_effect=None,
                    until="store", executor="local")
        return Namespace(**{**base, **kw})

    assert sequential_design(ns(repeats=3, sequential=False), [R(), R()]) is None  # --repeats N: the fixed design
    with pytest.raises(BadInput, match="--repeats 3 is the fixed design"):  # asked for both: said, not dropped
        sequential_design(ns(repeats=3), [R(), R()])
    assert sequential_design(ns(sequential=False, fixed=True), [R(), R()]) is None  # --fixed: the recipe's repeats
    assert sequential_design(ns(sequential=False), [R(), R()]) is not None  # the default: sequential
    with pytest.raises(BadInput):
        sequential_design(ns(fixed=True, max_repeats=4), [R(), R()])
    assert sequential_design(ns(sequential=False), [R()]) is None  # one recipe: nothing to compare
    with pytest.raises(BadInput, match="--sequential: the sequential design judges a pair"):  # asked: said, not dropped
        sequential_design(ns(), [R()])
    assert sequential_design(ns(until="verify"), [R(), R()]) is None
    d = sequential_design(ns(max_repeats=6), [R(), R()])
    assert (d.min_repeats, d.max_repeats, d.min_effect) == (2, 6, 0.02)
    with pytest.raises(BadInput):
        sequential_design(ns(min_repeats=5, max_repeats=3), [R(), R()])


def test_a_configuration_far_noisier_than_its_peers_is_flagged_at_its_stated_rate():
    """Three configurations of one spread: a given one is flagged at most at the stated rate (the
    lower end of the 95% CI of the count is tested against it); one with 4x its peers' spread over
    8 launches is flagged, and the text says both spreads."""
    from toolkit.analysis import spread_flag

    rng = np.random.default_rng(11)
    trials, flagged = 2000, 0
    for i in range(trials):
        noise = 0.01 + 0.04 * (i % 5) / 4
        vals = {name: _launches(rng, 8, noise=noise) for name in ("a", "b", "c")}
        flagged += any(f.name == "a" for f in spread_flag.flags(vals))
    assert sp.binomtest(flagged, trials).proportion_ci(0.95, method="exact").low <= spread_flag.ALPHA
    noisy = {"a": _launches(rng, 8, noise=0.08), "b": _launches(rng, 8), "c": _launches(rng, 8)}
    got = spread_flag.flags(noisy)
    assert [f.name for f in got] == ["a"] and "against its peers'" in got[0].text
    assert spread_flag.flags({"a": _launches(rng, 2, noise=0.5), "b": _launches(rng, 8)}) == []
    assert "0.01" in spread_flag.legend() and "2x" in spread_flag.legend()


def test_track_settle_launches_a_step_that_looks_like_a_change_until_settled(home, monkeypatch, capsys):
    """`track --settle` on two releases of the miniature, the second doubling the decode step's
    fixed cost: the step's single runs differ by far more than min_effect, so both points launch
    until the sequential verdict settles "slower" (from 2 launches each: plain track takes one);
    --max-repeats without --settle is refused."""
    import json

    from conftest import REPO_ROOT
    from toolkit.cli import main

    meta = mini_releases_meta()
    monkeypatch.setenv("PATCHBENCH_MINI_INDEX", meta["index"])
    monkeypatch.setenv("PATCHBENCH_RECIPES", str(REPO_ROOT / "recipes"))
    argv = ["track", "demo/update", "--source", "sglang", "--releases", "--since", "0.1.1", "--limit", "2",
            "--settle", "--max-repeats", "8", "--json"]  # 8: a loaded box spreads runs 20-30%
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["measured"] == ["0.1.1", "0.1.2"]
    [step] = out["steps"]
    assert (step["before"], step["after"], step["verdict"]) == ("0.1.1", "0.1.2", "slower") and step["settled"]
    n = step["launches_each"]  # 2 on a quiet box; a busy 2-core one can need a third
    assert 2 <= n <= 8 and len(out["run_ids"]) == 2 * n and f"slower after {n} launches each" in step["text"]
    # the track says the cap its steps were judged with and what settling cost beside a plain track's
    st = out["settle"]
    assert (st["max_repeats"], st["steps"], st["launches"], st["plain_launches"]) == (8, 1, 2 * n, 2), st
    assert "launches 2..8 each" in st["legend"] and st["seconds"] > 0, st
    # compare reads the step as track settled it: its runs record the design they were launched under
    assert main(["compare", "demo/update@0.1.1", "demo/update@0.1.2", "--metric", "output_tok_s@1", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    assert row["sequential"] == step["text"] and row["launched_under"]["max_repeats"] == 8
    # the next track measures 0.1.3: the settled step is read again from the store (no launch), and the
    # step from 0.1.2 (measured by the earlier track) to 0.1.3 is looked at too: 0.1.2's stored runs are
    # another campaign's (the box may have changed since), so 0.1.2 launches again beside 0.1.3
    assert main(argv[:argv.index("--since")] + ["--since", "0.1.1", "--limit", "1"] + argv[argv.index("--settle"):]) == 0
    out2 = json.loads(capsys.readouterr().out)
    assert out2["measured"] == ["0.1.3"] and out2["already_measured"] == ["0.1.1", "0.1.2"]
    steps = {(s["before"], s["after"]): s for s in out2["steps"]}
    assert steps[("0.1.1", "0.1.2")]["text"] == step["text"]
    later = steps.get(("0.1.2", "0.1.3"))  # flagged only when 0.1.3's single run is 2% off 0.1.2's first
    if later is None:
        assert len(out2["run_ids"]) == 1
    else:  # judged on this track's launches of both points, the earlier track's n runs of 0.1.2 named
        k = later["launches_each"]
        assert len(out2["run_ids"]) == 2 * k, (later, out2["run_ids"])
        assert later["left_out"][0].startswith(f"0.1.2: {n} stored run(s) from another campaign"), later
    assert main(["track", "demo/update", "--source", "sglang", "--releases", "--max-repeats", "4"]) == 2
    assert "--max-repeats is for --settle" in capsys.readouterr().err
    # in text too: nothing new to measure, the stored steps read again, the design and the cost named
    assert main([a for a in argv if a != "--json"]) == 0
    captured = capsys.readouterr()
    text = " ".join(captured.out.split())
    assert re.search(r"settle: \d step\(s\) judged sequentially, 2\.\.8 launches each \(max_repeats 8, min_effect 2%\); "
                     r"cost: \d+ launch\(es\) now, [0-9.]+ min \(no GPU held", text), text
    assert "launches 2..8 each" in " ".join(captured.err.split())


def mini_releases_meta():
    """The four releases test_history.py tracks (0.1.2 doubles the decode step's fixed cost), built
    once in the test cache."""
    import sys

    from conftest import REPO_ROOT, TEST_CACHE

    sys.path.insert(0, str(REPO_ROOT / "upstream"))
    import mini_releases

    return mini_releases.build(TEST_CACHE / "mini-releases-track4", plant="regression", at="0.1.2", n_releases=4)


def test_the_recipe_sets_the_cap_every_command_judges_with(tmp_path, monkeypatch):
    """`[benchmark] max_repeats` is the design of run, sweep, attribute, plan and of compare/report
    (which judge stored runs and have no flag for it); a flag overrides it; a bad value is one line."""
    from argparse import Namespace

    from conftest import demo_project
    from toolkit.analysis import sequential_design as designs
    from toolkit.cli import main
    from toolkit.recipe.load import load_recipe
    from toolkit.recipe.spec import BenchSpec

    root = demo_project(tmp_path, monkeypatch)
    base = root / "recipes" / "demo" / "baseline.toml"
    head, rest = base.read_text().split("[benchmark]", 1)
    base.write_text(head + "[benchmark]\nmax_repeats = 5\nmin_effect = 0.03\n" + rest)
    assert designs.for_ref("demo/baseline").max_repeats == 5 and designs.for_ref("demo/baseline").min_effect == 0.03
    assert designs.for_ref("demo/no-such-recipe") == seq.Design()  # known by its stored runs only
    bench = load_recipe("demo/baseline").benchmark
    assert designs.for_bench(bench, max_repeats=7).max_repeats == 7
    assert designs.for_bench(BenchSpec()).max_repeats == seq.DEFAULT_MAX_REPEATS
    from toolkit.commands.run import sequential_design
    ns = Namespace(repeats=None, sequential=True, fixed=False, min_repeats=None, max_repeats=None, min_effect=None,
                   until="store", executor="local")
    assert sequential_design(ns, [load_recipe("demo/baseline")] * 2).max_repeats == 5
    base.write_text(head + "[benchmark]\nmax_repeats = 1\n" + rest)
    assert main(["show", "demo/baseline"]) == 2


def test_a_candidates_own_cap_is_named_as_unused():
    """The pair is judged with the reference's design: a candidate recipe's own max_repeats is
    said to be unused (a user sets it on the recipe they edit), not silently dropped."""
    from types import SimpleNamespace

    from toolkit.analysis.sequential_design import unused_settings
    from toolkit.recipe.spec import BenchSpec

    ref = SimpleNamespace(name="demo/baseline", benchmark=BenchSpec())
    mine = SimpleNamespace(name="demo/mine", benchmark=BenchSpec(max_repeats=4))
    same = SimpleNamespace(name="demo/same", benchmark=BenchSpec())
    (line,) = unused_settings(ref, [mine, same])
    assert line.startswith("demo/mine: `[benchmark] max_repeats = 4` is not used") and "max_repeats = 16" in line


def test_attribute_min_effect_sets_the_sequential_indifference_zone_too():
    """`attribute --min-effect 0.05` is the zone of the sequential verdict that decides its steps,
    not only the fixed rule's floor; without it the recipe's [benchmark] min_effect (2%) holds."""
    import argparse

    from conftest import REPO_ROOT
    from toolkit.commands import attribute
    from toolkit.recipe.load import load_recipe

    parser = argparse.ArgumentParser()
    attribute.add_arguments(parser)
    recipe = load_recipe("demo/fast", REPO_ROOT / "recipes")
    assert attribute.step_design(parser.parse_args(["demo/fast"]), recipe).min_effect == recipe.benchmark.min_effect
    assert attribute.step_design(parser.parse_args(["demo/fast", "--min-effect", "0.05"]), recipe).min_effect == 0.05


def test_a_pair_the_sequence_gave_up_on_reads_noisy_not_too_few_repeats():
    """3 launches each at a 20% spread: too few for the fixed rule, and the sequence stopped (it
    could not settle by max_repeats): the verdict column says "noisy", which is what stopped the
    launches; a pair that more launches could still settle keeps "too few repeats"."""
    from toolkit.analysis import stats

    a, b = [100.0, 80.0, 120.0], [95.0, 125.0, 85.0]
    c = stats.compare_values(a, b, higher_is_better=True)
    assert c.verdict == stats.TOO_FEW
    v = seq.verdict(a, b, higher_is_better=True)
    assert v.futile and v.noisy and seq.stopped(v)
    assert seq.settle(c, a, b, seq.Design()).verdict == "noisy"
    quiet = ([100.0, 101.0], [103.0, 99.0])
    c = stats.compare_values(*quiet, higher_is_better=True)
    assert seq.settle(c, *quiet, seq.Design()).verdict == stats.TOO_FEW  # 2 each: more launches may settle it


def test_a_launched_pair_with_zero_values_is_not_judged_by_the_fixed_rule():
    """A count that is 0 in some launches (failed requests) of a pair launched until its speed settled:
    the sequential verdict compares log-values and cannot judge it, and the fixed rule would judge a
    launch count the looks chose; the row says "not judged" with no p and no interval. The same
    counts outside a sequential campaign keep the fixed rule, and 0 on both sides in every launch
    stays as it is."""
    import math

    from toolkit.analysis import stats

    a, b = [0.0, 1.0, 0.0, 2.0, 0.0, 1.0], [3.0, 0.0, 4.0, 2.0, 5.0, 3.0]
    c = stats.compare_values(a, b, higher_is_better=False)
    judged = seq.settle(c, a, b, seq.Design(), launched=True)
    assert judged.verdict == stats.NOT_JUDGED and math.isnan(judged.p_value) and math.isnan(judged.ci_low)
    assert "not judged" in stats.format_comparison(judged)
    assert seq.settle(c, a, b, seq.Design()) is c  # not launched sequentially: the fixed rule's verdict
    zeros = [0.0, 0.0, 0.0]
    c0 = stats.compare_values(zeros, zeros, higher_is_better=False)
    assert seq.settle(c0, zeros, zeros, seq.Design(), launched=True) is c0


def test_the_readme_states_the_default_cap():
    """A newcomer reads the cap in the README's command list and its calibration table: both say the
    default design's (they said "<= 8 each" and "2..8" after the default became 16)."""
    from conftest import REPO_ROOT

    text = (REPO_ROOT / "README.md").read_text()
    cap = seq.DEFAULT_MAX_REPEATS
    run_line = next(ln for ln in text.splitlines() if ln.startswith("patchbench run baseline oea  "))
    assert f"<= {cap} each" in run_line, run_line
    row = next(ln for ln in text.splitlines() if ln.startswith("| speed, sequential (the default"))
    assert f"looks at {seq.DEFAULT_MIN_REPEATS}..{cap} launches each" in row, row
    assert f"not settled after {cap} launches each" in text


def test_a_cap_an_sla_search_would_not_use_is_refused(tmp_path, monkeypatch, capsys):
    """`sweep --sla ... --max-repeats 4` ran the SLA search at the recipe's fixed repeats a point and exited 0,
    the cap silently unused (as --max-repeats with --repeats/--fixed is refused): now one line, exit 2,
    before anything is built."""
    from conftest import demo_project
    from toolkit.cli import main

    demo_project(tmp_path, monkeypatch)
    assert main(["sweep", "demo/sweep", "--sla", "itl_ms_median<=20.5", "--max-repeats", "4"]) == 2
    captured = capsys.readouterr()
    assert "--max-repeats is the sequential design's cap; an SLA search (--sla)" in captured.err, captured.err
    assert "Traceback" not in captured.err and "static check" not in captured.err


def test_sequential_options_on_one_recipe_are_refused_not_ignored(tmp_path, monkeypatch, capsys):
    """`run mine/one --sequential --max-repeats 8` launched the recipe's fixed repeats and exited 0, the
    options silently unused (a sequential verdict is between recipes): now one line naming them, exit 2,
    nothing launched."""
    from conftest import demo_project
    from toolkit.cli import main

    demo_project(tmp_path, monkeypatch)
    assert main(["run", "demo/baseline", "--sequential", "--max-repeats", "8"]) == 2
    err = capsys.readouterr().err
    assert "--sequential/--max-repeats: the sequential design judges a pair of recipes; one recipe (demo/baseline) " \
           "launches its `[benchmark] repeats` (4)" in " ".join(err.split()), err
    assert main(["run", "demo/baseline", "--min-effect", "0.05", "--until", "check"]) == 2
    assert "--min-effect: the sequential design judges a pair" in capsys.readouterr().err


def test_sweep_takes_the_zone_as_run_does(tmp_path, home, monkeypatch, capsys):
    """`sweep --min-effect` (run, attribute, plan, compare and report had it; sweep refused the flag): the
    variants are launched and judged with that zone, their runs record it (compare reads the pair as the
    sweep judged it), and with --sla or --fixed it is refused as unused."""
    import json

    from toolkit.cli import main

    root = small_demo(tmp_path, monkeypatch, concurrency="[1]")
    (root / "recipes" / "demo" / "sq.toml").write_text('extends = "demo/baseline"\n[matrix]\n'
                                                       'server.args.mini-step-base-ms = [4]\n')
    assert main(["sweep", "demo/sq", "--min-effect", "0.5", "--json", "-o", str(tmp_path / "sw")]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert "the ratio is at least 50% (min_effect)" in doc["sequential_legend"], doc.get("sequential_legend")
    (variant,) = [r for r in doc["ranked"] if r["variant"] != "demo/sq"]
    assert variant["verdict"].startswith("faster"), doc["ranked"]
    # the written report says the rule (cap and zone) and what the launches cost, as the console does
    md = (tmp_path / "sw" / "sweep.md").read_text()
    assert "launches 2..4 each (max_repeats)" in md and "at least 50% (min_effect)" in md and "- cost: " in md, md
    assert main(["compare", "demo/sq", variant["variant"], "--metric", "output_tok_s@1", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    assert row["launched_under"]["min_effect"] == 0.5, row
    assert main(["sweep", "demo/sq", "--min-effect", "0.5", "--fixed"]) == 2
    assert "--min-effect is the sequential verdict's zone" in capsys.readouterr().err
