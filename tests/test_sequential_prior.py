"""The stored launch-to-launch spread as a prior of the sequential verdict (toolkit.analysis.noise_prior
with toolkit.analysis.sequential): A/A pairs keep alpha with it, a 2x pair still settles at
min_repeats, no history is today's rule, and a configuration noisy now does not borrow a calm prior."""

from __future__ import annotations

import numpy as np
from scipy import stats as sp

from toolkit.analysis import noise_prior, sequential as seq
from toolkit.analysis.sequential_steps import settle_pairs


POOL = seq.Design(pool_stored=True)  # the recipe's opt-in `[benchmark] pool_stored_spread = true`


def _launches(rng, n, ratio=1.0, noise=0.02, base=100.0):
    return list(base * ratio * np.exp(noise * rng.standard_normal(n)))


def _history(rng, noise, n=10):
    return noise_prior.from_history({"A": _launches(rng, n, noise=noise), "B": _launches(rng, n, noise=noise)})


def test_a_a_pairs_with_a_stored_prior_keep_alpha_under_repeated_looks():
    """10 stored launches a side (18 df) pooled at every look up to 8 each (a cap of 8), and (a second campaign)
    the reference's 8 launches stored: faster/slower on A/A pairs stays within alpha at the hardest
    min_effect (0), over seeded trials, on a box as noisy as when the stored launches ran and on one
    noise_prior.DRIFT (1.5x) noisier now; the prior was pooled (the looks used its df)."""
    rng = np.random.default_rng(20261202)
    design = seq.Design(min_effect=0.0, pool_stored=True, max_repeats=8)
    for kind, calm in (("prior", 1.0), ("prior", noise_prior.DRIFT), ("stored", 1.0)):
        trials, wrong, pooled = 400, 0, 0
        for i in range(trials):
            noise = 0.01 + 0.04 * (i % 5) / 4
            a, b = _launches(rng, 8, noise=noise), _launches(rng, 8, noise=noise)
            if kind == "prior":
                v = seq.verdict(a, b, higher_is_better=True, design=design, prior=_history(rng, noise / calm))
            else:
                v = seq.verdict(a, b, higher_is_better=True, design=design, stored=(8, 0))
            wrong += v.verdict in (seq.FASTER, seq.SLOWER)
            pooled += v.prior_dof > 0
        assert wrong / trials <= design.alpha, (kind, calm, wrong, trials)
        assert sp.binomtest(wrong, trials).proportion_ci(0.95, method="exact").low <= design.alpha
        # (the borrowing test refuses some looks when the box is noisier now)
        assert pooled >= (0.9 if calm == 1.0 else 0.8) * trials, (kind, calm, pooled)


def test_a_2x_pair_settles_at_min_repeats_with_the_prior_and_a_modest_effect_settles_sooner():
    rng = np.random.default_rng(7)
    for _ in range(30):
        prior = _history(rng, 0.02)
        a, b = _launches(rng, 8), _launches(rng, 8, ratio=2.0)
        v = seq.verdict(a, b, higher_is_better=True, design=POOL, prior=prior)
        assert v.verdict == seq.FASTER and v.n == 2 and v.prior_dof == prior.dof, v.text
        assert "spread pooled with 18 df of stored launches" in v.text
        assert seq.verdict(a, b, higher_is_better=True, design=POOL, stored=(8, 0)).n == 2
    with_prior, without = [], []
    for _ in range(300):  # 5% at 2% noise: the current launches alone need more looks (the level's margin for
        # a box 1.5x noisier than its history takes most of what the prior's df give: ~0.1 launch each on average,
        # so the same launches are judged both ways, paired)
        a, b = _launches(rng, 16), _launches(rng, 16, ratio=1.05)
        with_prior.append(seq.verdict(a, b, higher_is_better=True, design=POOL, prior=_history(rng, 0.02)).n)
        without.append(seq.verdict(a, b, higher_is_better=True).n)
    assert np.mean(with_prior) < np.mean(without), (np.mean(with_prior), np.mean(without))


def test_no_history_is_todays_rule():
    """No prior, nothing stored (or both sides stored: a pair judged before, or a resumed one), or a
    recipe that did not opt in (the default) gives the verdict and the calibrated level of the
    current-launches-only rule."""
    assert seq.nominal_level(0.05, 2, 8) == seq.nominal_level(0.05, 2, 8, 0, 0, 0)
    assert abs(seq.nominal_level(0.05, 2, 8) - 0.012275) < 1e-5  # the level before priors existed
    assert noise_prior.from_history({"A": [100.0], "B": []}) is None  # fewer than 2 launches: no dof
    assert noise_prior.fresh_pair(6, 4) == (0, 0) and noise_prior.fresh_pair(6, 0) == (6, 0)
    rng = np.random.default_rng(3)
    for ratio in (1.0, 1.03, 1.3):
        a, b = _launches(rng, 8, noise=0.03), _launches(rng, 8, ratio=ratio, noise=0.03)
        today = seq.verdict(a, b, higher_is_better=True)
        assert seq.verdict(a, b, higher_is_better=True, prior=None, stored=(0, 0)) == today
        assert seq.verdict(a, b, higher_is_better=True, prior=_history(rng, 0.03), stored=(8, 0)) == today  # not opted in
        assert today.prior_dof == 0 and "stored" not in today.text


def test_a_configuration_noisy_now_does_not_borrow_a_calmer_prior():
    """Current launches 5x noisier than the stored ones: the looks refuse the prior (spread_flag's
    rule) and keep the current-launches-only interval; a history far noisier than the others' is
    left out of the prior; the borrowing test is at least as strict as the spread flag."""
    rng = np.random.default_rng(11)
    calm = _history(rng, 0.01)
    refused = 0
    for _ in range(40):
        a, b = _launches(rng, 8, noise=0.05), _launches(rng, 8, noise=0.05)
        v = seq.verdict(a, b, higher_is_better=True, design=POOL, prior=calm)
        refused += v.prior_dof == 0
        now = seq.pooled_spread(a[:v.n], b[:v.n]) ** 2
        if noise_prior.flagged_against(now / calm.var, 2 * v.n - 2, calm.dof):  # spread_flag's rule says noisy
            assert v.prior_dof == 0, v.text
    assert refused >= 30, refused  # at 2 launches each (2 df) a 5x noisier box is not always seen
    assert not noise_prior.borrows(calm, (0.05 ** 2), 14) and noise_prior.borrows(calm, 0.01 ** 2, 14)
    hist = {"A": _launches(rng, 10, noise=0.01), "B": _launches(rng, 10, noise=0.01),
            "C": _launches(rng, 10, noise=0.08)}
    prior = noise_prior.from_history(hist)
    assert prior.names == ("A", "B") and prior.dof == 18 and prior.spread < 0.02
    assert noise_prior.FACTOR >= 1.0 and noise_prior.ALPHA >= 0.01  # a flagged configuration never borrows


def test_attribute_steps_against_a_stored_base_pool_its_spread():
    """settle_pairs (attribute's steps): the base's 8 values are stored, the step is new; with
    their spread pooled a 4% step at 1% noise settles in fewer launches, and no launch is asked of
    the stored side."""
    rng = np.random.default_rng(5)
    pooled, alone, used = [], [], 0
    for _ in range(20):
        base, step = _launches(rng, 8, noise=0.012), _launches(rng, 8, ratio=1.04, noise=0.012)
        for stored, out in (({"base": 8}, pooled), (None, alone)):
            handed = {"base": 0, "step": 0}
            source = {"base": base, "step": step}

            def measure(label, k):
                got = source[label][handed[label]:handed[label] + k]
                handed[label] += len(got)
                return got or None

            _, verdicts = settle_pairs(measure, ["base", "step"], [("base", "step")], POOL, True,
                                       stored=stored)
            v = verdicts[("base", "step")]
            out.append(handed["step"])
            if stored:  # a look from 2 to 6 each has stored values it does not use
                used += v.prior_dof > 0
                assert handed["base"] == 8  # the stored values are handed out at once: they cost nothing
    assert used >= 15 and np.mean(pooled) < np.mean(alone), (used, np.mean(pooled), np.mean(alone))


def test_a_second_campaign_against_a_stored_reference_pools_its_spread(tmp_path, home, monkeypatch, capsys):
    """`run demo/baseline --repeats 6` stores six launches of the reference; `run demo/baseline
    demo/quick` is another campaign: the reference launches again, interleaved with the new recipe
    (the stored six are not judged against launches made since: toolkit.analysis.campaigns), and the
    looks pool the stored six launches' spread around their own mean as a prior (5 df, unless the
    borrowing test refuses them); the JSON says how many degrees of freedom, the text says so, the
    legend has the rule."""
    import json

    from test_sequential import small_demo
    from toolkit.analysis.selection import values_at
    from toolkit.cli import main
    from toolkit.results.store import Store

    root = small_demo(tmp_path, monkeypatch, concurrency="[1]", extra="pool_stored_spread = true\n")
    (root / "recipes" / "demo" / "quick.toml").write_text('extends = "demo/baseline"\n[server.args]\n'
                                                          'mini-step-base-ms = 4\n')
    assert main(["run", "demo/baseline", "--repeats", "6", "--json"]) == 0
    stored = [rid for _, rid in json.loads(capsys.readouterr().out)["runs"]]
    assert main(["run", "demo/baseline", "demo/quick", "--max-repeats", "4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    (row,) = out["sequential"]
    n = row["launches_each"]
    assert row["verdict"] == "faster" and 2 <= n <= 4, row
    new = {name: [rid for nm, rid in out["runs"] if nm == name] for name in ("demo/baseline", "demo/quick")}
    assert len(new["demo/baseline"]) == len(new["demo/quick"]) == n  # the reference launched again, A B B A
    store = Store(home / "results.sqlite")
    a, b, old = ([float(x) for x in values_at(store.samples(ids, metric="output_tok_s"), "output_tok_s", 1, ids)]
                 for ids in (new["demo/baseline"], new["demo/quick"], stored))
    design = seq.Design(max_repeats=4, pool_stored=True)
    prior = noise_prior.from_history({"demo/baseline": old, "demo/quick": []})
    assert prior.dof == 5
    v = seq.verdict(a, b, higher_is_better=True, design=design, prior=prior)
    assert (v.verdict, v.n, v.prior_dof) == (row["verdict"], n, row["prior_dof"]) and row["prior_dof"] in (0, 5), row
    assert (f"spread pooled with {row['prior_dof']} df of stored launches" in row["text"]) == (row["prior_dof"] > 0)
    assert "demo/baseline: 6 stored run(s) from another campaign" in row["reused"][0]
    assert "its stored launches (same run identity)" in out["sequential_legend"]
    # plan: the recipe pools, so the plan simulates the rule with its stored launches' df
    assert main(["plan", "demo/baseline", "--json"]) == 0
    (plan,) = json.loads(capsys.readouterr().out)["plans"]
    assert plan["runs"] == 6 + n and plan["prior_dof"] == 6 + n - 1, plan


def test_what_was_stored_before_a_pair_began_is_counted_from_the_runs_start_times():
    """The reference's runs before the variant's first launch are stored; launches interleaved
    after that are not; a pair whose sides started together (or a resumed one) pools nothing."""
    a = ["2026-12-01T10:00", "2026-12-01T10:05", "2026-12-02T09:15", "2026-12-02T09:20"]
    b = ["2026-12-02T09:10", "2026-12-02T09:30"]
    assert noise_prior.stored_before(a, b) == (2, 0) and noise_prior.stored_before(b, a) == (0, 2)
    assert noise_prior.stored_before(a[2:], b) == (0, 1)
    assert noise_prior.stored_before(["t1", "t3"], ["t2", "t4"]) == (1, 0)  # A B A B: only A's first
    assert noise_prior.stored_before([], b) == (0, 0) and noise_prior.stored_before([None, "x"], [None]) == (0, 0)


def test_plan_expects_the_launches_a_pooling_recipe_will_take():
    """`plan` for a recipe with `pool_stored_spread = true` simulates the stopping rule `run` will use,
    with the stored launches' degrees of freedom pooled: a 20% effect at 4% spread is planned at ~2
    launches each (2.3 at the default cap of 16), not the ~3.2 of the current-launches-only rule; a recipe
    that does not pool is planned as before whatever its history."""
    from toolkit.analysis import launch_plan

    alone = launch_plan.expected(0.20, 0.04, POOL)
    pooled = launch_plan.expected(0.20, 0.04, POOL, prior_dof=18)
    assert pooled.launches_each < 2.5 < 3.0 < alone.launches_each and pooled.settled == alone.settled == 1.0
    assert launch_plan.expected(0.20, 0.04, seq.Design(), prior_dof=18) == launch_plan.expected(0.20, 0.04, seq.Design())
