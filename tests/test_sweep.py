"""Sweeps: [matrix] expansion, include/exclude, bad input, SLA bisection, the Pareto front, and
`patchbench sweep` on the miniature (pruning with its refusal, interleaving, resume, SLA limit)."""

from __future__ import annotations

import json
import math
import random

import pytest

from conftest import MINI_RECIPE, MINI_SERVED, demo_project
from toolkit.analysis.pareto import dominated_variants, front, legend, point
from toolkit.analysis.sla import Bisection, max_points, parse_bound, search
from toolkit.cli import main
from toolkit.errors import BadInput
from toolkit.recipe.load import expand_recipe, load_recipe
from toolkit.recipe.matrix import variants_of
from toolkit.results.store import Store

BASE = MINI_RECIPE  # the `project` fixture's recipe (tests/conftest.py)


def _names(recipe) -> list[str]:
    return [v.name for v in variants_of(recipe)]


# -- expansion ----------------------------------------------------------------------------------

def test_matrix_expands_to_named_full_recipes(project):
    project.patch("a.patch", "Subject: a\n")
    project.recipe("m", BASE + """
        [matrix]
        server.args.moe-runner-backend = ["cutlass", "triton"]
        server.env.SGLANG_X = ["0", "1"]
        benchmark.output_len = [64]
        patches.mini = [[], ["a.patch"]]
        """)
    recipe = load_recipe("m", project.recipes)
    variants = expand_recipe(recipe)
    assert len(variants) == 8
    first = variants[0]
    assert first.name == "m[moe-runner-backend=cutlass,SGLANG_X=0,output_len=64,mini=none]"
    assert dict(first.server.args)["moe-runner-backend"] == "cutlass"
    assert dict(first.server.env)["SGLANG_X"] == "0"
    assert first.benchmark.output_len == 64 and "matrix" not in first.raw
    assert first.patch_names("mini") == ()
    last = variants[-1]
    assert last.name.endswith("mini=a]") and last.patch_names("mini") == ("a.patch",)
    # loading by the variant's name gives the same recipe, everywhere a name is taken
    again = load_recipe(last.name, project.recipes)
    assert again.name == last.name and again.server == last.server and again.patches == last.patches
    # the unexpanded recipe is the default configuration: unchanged
    assert "moe-runner-backend" not in dict(recipe.server.args)


def test_show_lists_the_expansion(project, capsys):
    path = project.recipe("m", BASE + '[matrix]\nserver.args.ep-size = [1, 2]\n')
    assert main(["show", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [v["name"] for v in doc["variants"]] == ["m[ep-size=1]", "m[ep-size=2]"]
    assert doc["variants"][1]["settings"] == {"server.args.ep-size": 2}
    assert main(["show", str(path)]) == 0
    out = capsys.readouterr().out
    assert "2 variant(s)" in out and "m[ep-size=2]" in out


def test_exclude_and_include_work_as_in_ci_matrices(project):
    project.recipe("m", BASE + """
        [matrix]
        server.args.attention-backend = ["fa3", "triton"]
        server.args.moe-runner-backend = ["cutlass", "triton"]
        exclude = [{ attention-backend = "fa3", moe-runner-backend = "triton" }]
        include = [
            { attention-backend = "triton", moe-runner-backend = "triton", "server.args.page-size" = 64 },
            { attention-backend = "flashmla", moe-runner-backend = "cutlass" },
        ]
        """)
    names = _names(load_recipe("m", project.recipes))
    assert names == [
        "m[attention-backend=fa3,moe-runner-backend=cutlass]",
        "m[attention-backend=triton,moe-runner-backend=cutlass]",
        "m[attention-backend=triton,moe-runner-backend=triton,page-size=64]",  # extended, not added
        "m[attention-backend=flashmla,moe-runner-backend=cutlass]",  # no match: a combination of its own
    ]
    project.recipe("n", BASE + """
        [matrix]
        server.args.attention-backend = ["fa3", "triton"]
        include = [{ "server.env.X" = "1" }]
        """)
    assert _names(load_recipe("n", project.recipes)) == ["n[attention-backend=fa3,X=1]", "n[attention-backend=triton,X=1]"]


@pytest.mark.parametrize("matrix, words", [
    ('server.flags.x = [1, 2]', ["server.flags.x", "not a recipe key"]),
    ('benchmark.concurency = [1, 2]', ["benchmark.concurency", "not a recipe key"]),
    ('server.args.tp-size = []', ["server.args.tp-size", "empty list"]),
    ('server.args.tp-size = 2', ["server.args.tp-size", "must be a list"]),
    ('server.args.tp-size = [1]\nexclude = [{ ep-size = 2 }]', ["ep-size", "not a matrix axis"]),
])
def test_bad_matrix_is_exit_2_naming_the_key(project, capsys, matrix, words):
    project.recipe("m", BASE + "[matrix]\n" + matrix + "\n")
    assert main(["show", str(project.recipes / "m.toml")]) == 2
    text = capsys.readouterr().err
    assert all(w in text for w in words), text


def test_unknown_variant_name_is_exit_2_with_the_closest(project, capsys):
    project.recipe("m", BASE + '[matrix]\nserver.args.ep-size = [1, 2]\n')
    with pytest.raises(BadInput, match=r"did you mean `m\[ep-size=2\]`"):
        load_recipe("m[ep-size=3]", project.recipes)


# -- SLA bounds and bisection ------------------------------------------------------------------

@pytest.mark.parametrize("text, words", [
    ("itl_ms_p98<=50", ["itl_ms_p98", "unknown metric", "known metrics", "itl_ms_p99"]),
    ("itl_ms_p99=<50", ["not a bound", "known metrics"]),
    ("itl_ms_p99<=fast", ["not a bound"]),
])
def test_bad_bounds_are_exit_2_with_the_known_metrics(text, words, capsys):
    assert main(["sweep", "demo/sweep", "--sla", text]) == 2
    err = capsys.readouterr().err
    assert all(w in err for w in words), err


def test_bound_parses_and_holds():
    b = parse_bound(" itl_ms_p99 <= 50 ")
    assert (b.metric, b.op, b.value) == ("itl_ms_p99", "<=", 50.0)
    assert b.holds(50.0) and not b.holds(50.1)
    assert parse_bound("output_tok_s>100").holds(101)


def test_bisection_finds_the_analytic_limit_within_the_point_bound():
    rng = random.Random(7)
    for _ in range(300):
        lo, hi = rng.randint(1, 4), rng.randint(4, 256)
        base, per = rng.uniform(2, 20), rng.uniform(0.05, 3)
        bound = rng.uniform(5, 120)
        limit = math.floor((bound - base) / per)  # ITL(c) = base + per x c <= bound
        s = search(lo, hi, lambda c: base + per * c <= bound)
        if limit < lo:
            assert s.best is None and s.fails_at_lo and s.measured == [(lo, False)]
        else:
            assert s.best == min(limit, hi)
        assert len(s.measured) <= max_points(lo, hi)
    assert max_points(1, 128) == 8 and max_points(5, 5) == 1


def test_bisection_advances_one_point_per_round():
    b = Bisection(1, 16)
    assert b.next_point() == 1
    b.feed(1, True)
    assert b.next_point() == 9
    b.feed(9, False)
    assert b.next_point() == 5


# -- Pareto ----------------------------------------------------------------------------------------

def _launches(mean: float, spread: float = 0.005) -> list[float]:
    return [mean * (1 - spread), mean, mean * (1 + spread)]


def test_pareto_front_membership():
    pts = [point("a", 1, _launches(100), 1), point("a", 8, _launches(320), 1),
           point("b", 1, _launches(90), 1), point("b", 8, _launches(240), 1),  # b is worse than a at every load
           point("c", 16, _launches(400), 1)]  # the most per GPU: on the front
    on = front(pts)
    assert [(p.variant, p.concurrency) for p in on] == [("a", 1), ("a", 8), ("c", 16)]
    assert dominated_variants(pts) == ["b"]


def test_a_variant_behind_the_front_only_within_the_noise_is_not_called_dominated():
    """b's means are 1% below a's at every load, inside a 5% launch-to-launch spread: the front drawn (the
    means') leaves b off, but "dominated" is a verdict and b is not shown beaten. A point measured once has no
    noise to judge, and is never beaten."""
    pts = [point("a", 1, _launches(100, 0.05), 1), point("a", 8, _launches(320, 0.05), 1),
           point("b", 1, _launches(99, 0.05), 1), point("b", 8, _launches(317, 0.05), 1)]
    assert {p.variant for p in front(pts)} == {"a"}
    assert dominated_variants(pts) == []
    assert dominated_variants([point("a", 1, [100.0], 1), point("b", 1, [50.0], 1)]) == []
    # more GPUs: as good per GPU needs the throughput times the GPU ratio
    wide = [point("a", 1, _launches(100), 1), point("b", 1, _launches(150), 2)]
    assert dominated_variants(wide) == []  # b: more per user, less per GPU
    assert dominated_variants([point("a", 1, _launches(100), 1), point("b", 1, _launches(210), 2)]) == ["a"]
    assert "one-sided at 0.025 / (variants - 1)" in legend() and "<= 0.025" in legend()


# -- on the miniature ----------------------------------------------------------------------------

SWEEP = """
description = "sweep test"
""" + MINI_SERVED + """[server.args]
tp-size = 1
random-seed = 0
mini-step-base-ms = 4
mini-step-per-seq-us = 2500
mini-prefill-base-ms = 0.5
[benchmark]
input_len = 8
output_len = 8
concurrency = [1, 8]
num_prompts = {prompts}
warmup = 1
repeats = {repeats}
[matrix]
server.args.mini-step-per-seq-us = [2000, 3000]
include = [{{ mini-step-per-seq-us = 4000, "server.args.stream-interval" = 0 }}]
"""


def _write(proj, name: str, text: str) -> None:
    (proj / "recipes" / f"{name}.toml").write_text(text)


def test_sweep_prunes_interleaves_and_resumes(tmp_path, monkeypatch, home, capsys):
    proj = demo_project(tmp_path, monkeypatch)
    _write(proj, "demo/sw", SWEEP.format(prompts=4, repeats=2).replace("concurrency = [1, 8]",
                                                                                "concurrency = [2]"))
    out = proj / "out"
    assert main(["sweep", "demo/sw", "--fixed", "--json", "-o", str(out)]) == 0
    doc = json.loads(capsys.readouterr().out)
    by = {v["variant"]: v for v in doc["variants"]}
    refused = by["demo/sw[mini-step-per-seq-us=4000,stream-interval=0]"]
    assert "stream_interval must be >= 1" in refused["pruned"] and not refused["runs"]
    store = Store(home / "results.sqlite")
    runs = store.runs()
    assert "demo/sw[mini-step-per-seq-us=4000,stream-interval=0]" not in {r.recipe for r in runs}
    order = [r.recipe for r in runs]
    names = ["demo/sw", "demo/sw[mini-step-per-seq-us=2000]", "demo/sw[mini-step-per-seq-us=3000]"]
    assert order == names + names  # repeats interleaved: A B C A B C (the fixed design)
    assert [r["verdict"] for r in doc["ranked"] if r["variant"] == "demo/sw"] == ["default"]
    assert (out / "pareto.png").stat().st_size > 0 and "<svg" in (out / "pareto.svg").read_text()
    assert "stream_interval must be >= 1" in (out / "sweep.md").read_text()
    # resumed: every variant already has its runs; nothing is launched again
    assert main(["sweep", "demo/sw", "--fixed", "--json", "-o", str(out)]) == 0
    again = json.loads(capsys.readouterr().out)
    assert len(store.runs()) == 6
    assert {v["variant"]: v["reused"] for v in again["variants"] if v["runs"]} == {n: 2 for n in names}
    # variant names work where recipe names do
    assert main(["compare", names[1], names[2], "--metric", "itl_ms_median"]) == 0
    assert "demo/sw[mini-step-per-seq-us=3000]" in capsys.readouterr().out
    # a matrix listing the default's own value: that variant is the default (one run identity), pruned, not failed
    _write(proj, "demo/sw2", SWEEP.format(prompts=4, repeats=2).replace("[2000, 3000]", "[2500, 3000]"))
    assert main(["sweep", "demo/sw2", "--until", "check", "--json"]) == 0
    by = {v["variant"]: v for v in json.loads(capsys.readouterr().out)["variants"]}
    assert "the default configuration's own settings" in by["demo/sw2[mini-step-per-seq-us=2500]"]["pruned"]
    assert not by["demo/sw2[mini-step-per-seq-us=3000]"]["pruned"] and not by["demo/sw2"]["pruned"]


def test_one_launch_a_variant_has_no_interval_and_a_throughput_none_below_0(tmp_path, monkeypatch, home, capsys):
    """A sweep of one launch a variant: its table and sweep.md say "no interval", never a zero-width
    "[m, m]" (one launch is no certainty); two launches far apart bound a throughput's mean at 0 from
    below, never "[-1386, 2904]" tok/s (the t interval of 2 values at df 1)."""
    from toolkit.analysis.sweep import mean_ci

    proj = demo_project(tmp_path, monkeypatch)
    _write(proj, "demo/sw", SWEEP.format(prompts=4, repeats=1).replace("concurrency = [1, 8]", "concurrency = [2]"))
    assert main(["sweep", "demo/sw", "--fixed", "-o", str(proj / "out")]) == 0
    text = " ".join(capsys.readouterr().out.split())
    md = (proj / "out" / "sweep.md").read_text()
    assert text.count("(no interval: 1 run) n=1") == 3 and md.count("(no interval: 1 run) n=1") == 3, (text, md)
    m, lo, hi = mean_ci([927.4, 589.8])
    assert lo == 0.0 and hi > m > 0


@pytest.mark.slow  # ~45 s on 2 busy cores: 12 server launches
def test_sla_search_finds_the_cost_model_limit(tmp_path, monkeypatch, home, capsys):
    proj = demo_project(tmp_path, monkeypatch)
    _write(proj, "demo/sw", SWEEP.format(prompts=8, repeats=1))
    # bound 15 ms, base 4 ms: limits 4 (2.5 ms/seq), 5 (2 ms/seq), 3 (3 ms/seq), none of them on the bound
    assert main(["sweep", "demo/sw", "--sla", "itl_ms_median<=15", "--json", "-o", str(proj / "o")]) == 0
    doc = json.loads(capsys.readouterr().out)
    per_seq = {"demo/sw": 2.5, "demo/sw[mini-step-per-seq-us=2000]": 2.0, "demo/sw[mini-step-per-seq-us=3000]": 3.0}
    for v in doc["variants"]:
        if v["variant"] not in per_seq:
            assert v["pruned"]
            continue
        sla = v["sla"]
        limit = min(math.floor((15 - 4) / per_seq[v["variant"]]), 8)  # ITL(c) = base + per_seq x c
        assert abs(sla["max_concurrency"] - limit) <= 1, (v["variant"], sla)
        assert len(sla["measured"]) <= sla["bound_points"] == 4
        at = sla["at_max"]["itl_ms_median"]
        # one run a point (repeats = 1): no interval, never a zero-width one
        assert at["n"] == 1 and at["ci"] == [None, None] and at["mean"] <= 15
    assert any(p["on_front"] for p in doc["pareto"])
    # the published site's sweep page draws the same points: an SLA search's runs measured one
    # concurrency each, and count as the search counted them (not "an older [benchmark]", an empty table)
    assert main(["publish", "-o", str(proj / "site")]) == 0
    capsys.readouterr()
    page = (proj / "site" / "sweeps").glob("*.html")
    text = " ".join(next(page).read_text().split())
    assert "older [benchmark]" not in text and "run them first" not in text, text
    for p in doc["pareto"]:
        assert f"<td>{p['variant']}</td><td>{p['concurrency']}</td>" in text, (p, text)


def test_slurm_chunks_spread_variants_with_the_default_in_each():
    from toolkit.executors.slurm_sweep import chunks

    assert chunks(["d", "a", "b", "c"], 2) == [["d", "a", "c"], ["d", "b"]]
    assert chunks(["d", "a"], 4) == [["d", "a"]]
    assert chunks(["d", "a", "b"], 1) == [["d", "a", "b"]]


def test_sm120_backends_measures_its_default_once():
    """The shipped sweep lists its default's values first on each axis (MoE runner `auto`, DSA prefill
    flashinfer_sparse_mla): that variant must launch with the default's argv, the run identity the sweep
    prunes as "the default configuration's own settings" (it had `--moe-runner-backend auto` on its own,
    so the same launch was measured as the default and again as a variant)."""
    from conftest import REPO_ROOT
    from toolkit.run.identity import recipe_definition

    recipe = load_recipe("sm120-backends", REPO_ROOT / "recipes")
    default = recipe_definition(recipe)["server_argv"]
    same = [v.name for v in expand_recipe(recipe) if recipe_definition(v)["server_argv"] == default]
    assert same == ["sm120-backends[moe-runner-backend=auto,dsa-prefill-backend=flashinfer_sparse_mla]"]


def test_a_sweep_leaves_the_recipes_lock_to_the_recipe(tmp_path, monkeypatch, home, capsys):
    """`sweep --until check` prepared every [matrix] variant against the recipe's own lock file: each wrote
    it with its name and its patch stack, the last one won, and the committed lock then described a
    variant (`run NAME --frozen` refused the recipe's own stack). A variant never writes the lock."""
    proj = demo_project(tmp_path, monkeypatch)
    _write(proj, "demo/pw", 'extends = "demo/baseline"\n[matrix]\n'
                            'patches.sglang = [[], ["demo/slower-decode.patch"]]\n')
    assert main(["sweep", "demo/pw", "--until", "check", "--json"]) == 0
    capsys.readouterr()
    lock = json.loads((proj / "recipes" / "demo" / "pw.lock.json").read_text())
    assert lock["recipe"] == "demo/pw" and lock["sources"]["sglang"]["patches"] == []
    assert main(["run", "demo/pw", "--until", "check", "--frozen"]) == 0


def test_a_variant_is_named_in_its_progress_lines_and_its_running_limit_said(tmp_path, monkeypatch, home, capsys):
    """A variant's name holds `[k=v]`, which rich read as a markup tag and dropped: the sweep printed
    "sweep repeat 0: output check of 16 prompts" for the default and then again for the variant (seen
    on real sglang 0.5.23, `sweep` over `max-running-requests = [4]` at concurrency 8), so the lines
    could not be told apart. And that sweep ranked the variant "-54%" without saying what `compare` does:
    concurrency 8 ran as a batch of 4 (the server's limit, from its /server_info), the rest queued."""
    proj = demo_project(tmp_path, monkeypatch)
    _write(proj, "demo/q", 'extends = "demo/baseline"\n[benchmark]\ninput_len = 8\noutput_len = 4\n'
                           'concurrency = [2]\nnum_prompts = 2\nwarmup = 1\nrepeats = 1\n'
                           '[quality]\ncount = 2\nmax_tokens = 2\nconcurrency = [1]\n'
                           '[matrix]\nserver.args.max-running-requests = [1]\n')
    assert main(["sweep", "demo/q", "--fixed", "-o", str(proj / "out")]) == 0
    cap = capsys.readouterr()
    err, out = " ".join(cap.err.split()), " ".join(cap.out.split())
    assert "demo/q repeat 0: output check of 2 prompts" in err, err[-2000:]
    assert "demo/q[max-running-requests=1] repeat 0: output check of 2 prompts" in err, err[-2000:]
    limit = ("server: demo/q[max-running-requests=1]: concurrency 2 above the 1 requests the server runs at once: "
             "the rest queue")
    assert limit in out, out[-2000:]
    assert limit in " ".join((proj / "out" / "sweep.md").read_text().split())
    assert "server: demo/q:" not in out  # the default has no limit below its concurrency


def test_the_default_configuration_answers_as_the_reference_of_its_variants(tmp_path, monkeypatch, home, capsys):
    """A sweep judges every variant's answers against the default configuration, whose own two launches
    are the floor. A sweep recipe that extends a baseline inherits its `compare_to`, so its default was
    taken for a candidate and answered once: on real sglang 0.5.23 (a sweep of recipes/cpu/baseline over
    max-running-requests) the variant's answers verdict then read "too few launches: the reference's own
    variation needs 2 launches with answers, it has 1" however long the sweep ran."""
    proj = demo_project(tmp_path, monkeypatch)
    _write(proj, "demo/q2", 'extends = "demo/baseline"\n[benchmark]\ninput_len = 8\noutput_len = 4\n'
                            'concurrency = [1]\nnum_prompts = 2\nwarmup = 1\nrepeats = 2\n'
                            '[quality]\ncount = 2\nmax_tokens = 2\nconcurrency = [1]\n'
                            '[matrix]\nserver.args.mini-step-base-ms = [2]\n')
    assert main(["sweep", "demo/q2", "--fixed", "-o", str(proj / "out")]) == 0
    capsys.readouterr()
    asked = {}
    for run in Store(home / "results.sqlite").runs():
        asked.setdefault(run.recipe, []).append(((run.extra or {}).get("quality") or {}).get("status"))
    assert asked["demo/q2"] == ["ok", "ok"], asked  # the reference: both launches answer
    assert sorted(asked["demo/q2[mini-step-base-ms=2]"]) == ["ok", "skipped"], asked  # a candidate: one
    rc = main(["compare", "demo/q2", "demo/q2[mini-step-base-ms=2]", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and "too few launches" not in json.dumps(out["quality"]), out["quality"]


def test_sweep_frozen_holds_a_patch_axis_to_the_lock(tmp_path, monkeypatch, home, capsys):
    """`sweep --frozen` over a `patches.SOURCE` axis: the lock recorded the default's stack only, so every
    variant adding a patch was "pruned" with "--frozen: patch stack has 1 patch, the lock 0" beside
    sglang's refusals, and the sweep measured the default alone, exit 0. The lock now records the
    [matrix] patches: a frozen sweep measures the variant, and an edited one stops the sweep (exit 2,
    naming the variant and the patch), never a pruned variant."""
    proj = demo_project(tmp_path, monkeypatch)
    _write(proj, "demo/pw", 'extends = "demo/baseline"\n[benchmark]\nconcurrency = [2]\nnum_prompts = 4\n'
                            'input_len = 8\noutput_len = 8\nwarmup = 1\n[quality]\nlaunches = 0\n[matrix]\n'
                            'patches.sglang = [[], ["demo/slower-decode.patch"]]\n')
    assert main(["sweep", "demo/pw", "--until", "check"]) == 0  # writes the lock
    capsys.readouterr()
    lock = json.loads((proj / "recipes" / "demo" / "pw.lock.json").read_text())
    assert [p["name"] for p in lock["sources"]["sglang"]["matrix_patches"]] == ["demo/slower-decode.patch"]
    assert main(["sweep", "demo/pw", "--frozen", "--fixed", "--repeats", "1", "--json", "-o", str(proj / "o")]) == 0
    doc = json.loads(capsys.readouterr().out)
    by = {v["variant"]: v for v in doc["variants"]}
    assert by["demo/pw[sglang=slower-decode]"]["runs"] and not by["demo/pw[sglang=slower-decode]"]["pruned"]
    patch = proj / "patches" / "demo" / "slower-decode.patch"
    patch.write_text(patch.read_text() + "\n")  # edited since the lock
    launches = len(Store(home / "results.sqlite").runs())
    assert main(["sweep", "demo/pw", "--frozen", "--fixed", "--repeats", "1", "-o", str(proj / "o")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "demo/pw[sglang=slower-decode]" in err and "--frozen: patch demo/slower-decode.patch changed" in err, err
    assert len(Store(home / "results.sqlite").runs()) == launches  # stopped before any launch


def test_a_sweep_against_a_default_stored_before_the_box_slowed_reads_only_this_campaign(tmp_path, monkeypatch,
                                                                                          home, capsys):
    """The sweep's default was stored by an earlier campaign; the box then slowed every step by 15% (the
    miniature's SGLANG_MINI_BOX_SLOWDOWN, no part of the configuration) and a plain sweep measures a
    harmless variant (another random seed). The default launches again beside it, and the ranked
    table's verdict is the one the launching judged, over this campaign's launches only (was: its
    stored runs against the variant's new ones, the box's 15% read as the variant's); the default's
    `runs` are those launches, its stored four listed apart as `reused_runs` (were in `runs`)."""
    proj = demo_project(tmp_path, monkeypatch)
    _write(proj, "demo/sd", SWEEP.format(prompts=4, repeats=4).replace("concurrency = [1, 8]", "concurrency = [1]")
           .split("[matrix]")[0] + "[matrix]\nserver.args.random-seed = [1]\n")
    assert main(["run", "demo/sd", "--repeats", "4", "--json"]) == 0
    stored = {rid for _, rid in json.loads(capsys.readouterr().out)["runs"]}
    monkeypatch.setenv("SGLANG_MINI_BOX_SLOWDOWN", "1.15")
    assert main(["sweep", "demo/sd", "--json", "-o", str(proj / "out")]) == 0
    doc = json.loads(capsys.readouterr().out)
    runs = {v["variant"]: v["runs"] for v in doc["variants"]}
    here = runs["demo/sd"]
    # the default launched again, here: its runs are the ones judged; the stored four are listed apart
    assert len(here) >= 2 and not set(here) & stored, runs
    assert {v["variant"]: set(v["reused_runs"]) for v in doc["variants"]} == {"demo/sd": stored,
                                                                            "demo/sd[random-seed=1]": set()}
    from toolkit.analysis import sequential as seq
    from toolkit.analysis.selection import values_at

    store = Store(home / "results.sqlite")
    a, b = (values_at(store.samples(ids, metric="output_tok_s"), "output_tok_s", 1, ids)
            for ids in (here, runs["demo/sd[random-seed=1]"]))
    v = seq.verdict(a, b, higher_is_better=True, design=seq.Design())  # the launches made together only
    (row,) = [r for r in doc["ranked"] if r["variant"] == "demo/sd[random-seed=1]"]
    assert row["verdict"].startswith(seq.verdict_word(v)), (row, v.text)
