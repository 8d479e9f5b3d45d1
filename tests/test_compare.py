"""compare: selection of usable runs, refusals, verdicts, rendering, provenance differences."""

from __future__ import annotations

import math
import random

import pytest
from rich.console import Console

from toolkit.analysis.compare import (MissingResults, compare_recipes, diff_provenance,
                                      missing_recipes, render_compare)
from toolkit.run.bench import Sample
from toolkit.errors import BadInput
from toolkit.results.store import Store

PARAMS = {"input_len": 128, "output_len": 256, "points": [1, 8], "num_prompts": 64, "seed": 1}
MACHINE = {"gpus": [{"name": "NVIDIA RTX PRO 6000"}] * 8}


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "results.sqlite")
    yield s
    s.close()


def add_run(store, recipe, tok_s, *, ttft=None, repeat=0, params=PARAMS, machine=MACHINE,
            verified=True, status="ok", point=1, **extra):
    samples = [Sample("output_tok_s", tok_s, "tok/s", point, "concurrency")]
    if ttft is not None:
        samples.append(Sample("ttft_ms_mean", ttft, "ms", point, "concurrency"))
    return store.record_run(dict(recipe=recipe, status=status, bench_driver="serving",
                                 bench_params=params, machine=machine, config_verified=verified,
                                 repeat=repeat, **extra), samples)


def test_identical_distributions_not_significant(store):
    rng = random.Random(11)
    for rep in range(6):
        add_run(store, "base", rng.gauss(100, 3), ttft=rng.gauss(50, 2), repeat=rep)
        add_run(store, "same", rng.gauss(100, 3), ttft=rng.gauss(50, 2), repeat=rep)
    rows = compare_recipes(store, ["base", "same"])
    assert {(r.metric, r.point) for r in rows} == {("output_tok_s", 1), ("ttft_ms_mean", 1)}
    assert all(r.verdict == "not significant" for r in rows)
    assert all(r.n_base == r.n_variant == 6 for r in rows)
    assert all("not significant" in r.text for r in rows)


def test_clear_difference_is_faster_with_ci_excluding_one(store):
    rng = random.Random(5)
    for rep in range(5):
        add_run(store, "base", rng.gauss(100, 2), ttft=rng.gauss(50, 1), repeat=rep)
        add_run(store, "fast", rng.gauss(120, 2), ttft=rng.gauss(40, 1), repeat=rep)
    rows = {r.metric: r for r in compare_recipes(store, ["base", "fast"])}
    tput, ttft = rows["output_tok_s"], rows["ttft_ms_mean"]
    assert tput.verdict == "faster" and tput.ci_low > 1.0 and tput.p_value < 0.05
    assert 1.1 < tput.speedup < 1.3 and tput.baseline == "base" and tput.recipe == "fast"
    # lower latency is also "faster"; the ratio interval lies below 1
    assert ttft.verdict == "faster" and ttft.ci_high < 1.0 and ttft.speedup > 1.0
    assert "x faster [" in tput.text
    text = _render(render_compare(list(rows.values())))
    assert "faster" in text and "output_tok_s" in text and "fast" in text


def test_several_variants_and_samples_averaged_per_run(store):
    for rep in range(4):
        add_run(store, "base", 100.0 + rep * 0.5, repeat=rep)
        add_run(store, "slow", 80.0 + rep * 0.5, repeat=rep)
        rid = add_run(store, "fast", 130.0 + rep * 0.5, repeat=rep)
        # a second sample at the same point within the same run is averaged, not a new repeat
        store.add_samples(rid, [Sample("output_tok_s", 132.0 + rep * 0.5, "tok/s", 1, "concurrency")])
    rows = compare_recipes(store, ["base", "slow", "fast"])
    by = {r.recipe: r for r in rows}
    assert by["slow"].verdict == "slower" and by["fast"].verdict == "faster"
    assert by["fast"].n_variant == 4
    assert by["fast"].variant_mean == pytest.approx(131.0 + 0.75)


def test_too_few_repeats(store):
    for rep in range(2):
        add_run(store, "base", 100.0 + rep, repeat=rep)
        add_run(store, "fast", 150.0 + rep, repeat=rep)
    (row,) = compare_recipes(store, ["base", "fast"])
    assert row.verdict == "too few repeats"


def test_bench_key_mismatch_refused_naming_param(store):
    for rep in range(4):
        add_run(store, "base", 100.0, repeat=rep)
        add_run(store, "long", 100.0, repeat=rep, params={**PARAMS, "input_len": 256})
    with pytest.raises(BadInput, match="input_len 128 vs 256") as ei:
        compare_recipes(store, ["base", "long"])
    assert "\n" not in str(ei.value) and ei.value.exit_code == 2


def test_gpu_mismatch_refused_naming_both(store):
    add_run(store, "base", 100.0)
    add_run(store, "h200", 100.0, machine={"gpus": [{"name": "NVIDIA H200"}]})
    with pytest.raises(BadInput) as ei:
        compare_recipes(store, ["base", "h200"])
    msg = str(ei.value)
    assert "8x NVIDIA RTX PRO 6000" in msg and "1x NVIDIA H200" in msg and "\n" not in msg


def test_missing_and_unusable_runs(store):
    add_run(store, "base", 100.0)
    add_run(store, "unverified", 100.0, verified=False)
    add_run(store, "broken", 0.0, status="failed")
    with pytest.raises(MissingResults) as ei:
        compare_recipes(store, ["base", "nothing", "unverified", "broken"])
    assert ei.value.recipes == ["nothing", "unverified", "broken"]
    assert "no ok, verified results" in str(ei.value) and "not verified" in str(ei.value)
    assert isinstance(ei.value, BadInput)
    assert missing_recipes(store, ["base", "nothing", "unverified"]) == ["nothing", "unverified"]
    # a failed or unverified run of the baseline does not poison the comparison
    add_run(store, "base", 1.0, status="failed", params={**PARAMS, "input_len": 999})
    add_run(store, "other", 100.0)
    assert compare_recipes(store, ["base", "other"])[0].verdict == "too few repeats"
    with pytest.raises(BadInput, match="at least two"):
        compare_recipes(store, ["base"])


def test_group_filter_selects_one_session(store):
    for rep in range(4):
        add_run(store, "base", 100.0 + rep, repeat=rep, group_id="g1")
        add_run(store, "fast", 150.0 + rep, repeat=rep, group_id="g1")
        add_run(store, "fast", 50.0 + rep, repeat=rep, group_id="g2",
                params={**PARAMS, "output_len": 1})
    # the only benchmark both measured is g1's: fast's other runs are left out, not pooled
    (row,) = compare_recipes(store, ["base", "fast"])
    assert row.verdict == "faster" and row.n_variant == 4 and row.variant_mean == 151.5
    (row,) = compare_recipes(store, ["base", "fast"], group_id="g1")
    assert row.verdict == "faster"
    with pytest.raises(MissingResults, match="base: none with group g2"):
        compare_recipes(store, ["base", "fast"], group_id="g2")
    add_run(store, "base", 100.0, group_id="g3")
    add_run(store, "fast", 100.0, group_id="g3", params={**PARAMS, "output_len": 1})
    with pytest.raises(BadInput, match="output_len 256 vs 1"):
        compare_recipes(store, ["base", "fast"], group_id="g3")


def test_diff_provenance(store):
    a = store.get_run(add_run(
        store, "v1", 100.0, sglang_version="0.5.10.post1", flashinfer_version="0.6.7.post3",
        tree_hashes={"sglang": "a" * 40, "flashinfer": "c" * 40}, arch_list=["12.0a"],
        server_argv=["-m", "sglang.launch_server", "--tp-size", "8", "--cuda-graph-max-bs", "32"],
        server_info={"tp_size": 8, "moe_runner_backend": "auto", "port": 30000,
                     "launch_command": "--tp-size 8 --port 30000", "startup_time": {"load_weight": 1.5}},
        env_vars={"FLASHINFER_CUDA_ARCH_LIST": "12.0a"}, env_key="e1"))
    b = store.get_run(add_run(
        store, "v2", 100.0, sglang_version="0.5.23", flashinfer_version="0.6.7.post3",
        tree_hashes={"sglang": "b" * 40, "flashinfer": "c" * 40}, arch_list=["12.0f"],
        server_argv=["-m", "sglang.launch_server", "--tp-size=4", "--enable-single-batch-overlap"],
        server_info={"tp_size": 4, "moe_runner_backend": "flashinfer_cutlass", "port": 30001,
                     "launch_command": "--tp-size=4 --port 30001", "startup_time": {"load_weight": 1.4}},
        env_vars={"FLASHINFER_CUDA_ARCH_LIST": "12.0f", "NCCL_P2P_LEVEL": "SYS"}, env_key="e2"))
    lines = diff_provenance(a, b)
    text = "\n".join(lines)
    assert "sglang version: 0.5.10.post1 -> 0.5.23" in lines
    assert not any(line.startswith("flashinfer version") for line in lines)
    assert f"tree sglang: {'a' * 12} -> {'b' * 12}" in lines
    assert "arch list: 12.0a -> 12.0f" in lines
    assert "server flag --tp-size: 8 -> 4" in lines
    assert "server flag added: --enable-single-batch-overlap" in lines
    assert "server flag removed: --cuda-graph-max-bs 32" in lines
    assert "server_info moe_runner_backend: auto -> flashinfer_cutlass" in lines
    assert "port" not in text and "startup_time" not in text  # launch-to-launch noise is not a difference
    assert "launch_command" not in text  # sglang's echo of the command line: its flags are compared above
    assert "env FLASHINFER_CUDA_ARCH_LIST: 12.0a -> 12.0f" in lines
    assert "env NCCL_P2P_LEVEL: (unset) -> SYS" in lines
    assert "env key: e1 -> e2" in lines
    assert diff_provenance(a, a) == []


def _render(table) -> str:
    console = Console(record=True, width=200)
    console.print(table)
    return console.export_text()


def test_only_the_newest_build_of_a_recipe_counts(store):
    """Runs from before a patch changed (another env key) never mix with the current build's."""
    import time

    for rep in range(4):
        add_run(store, "base", 100.0 + rep * 0.1, repeat=rep, env_key="e-base")
        add_run(store, "variant", 50.0 + rep * 0.1, repeat=rep, env_key="e-old")  # stale build
    time.sleep(0.01)
    for rep in range(4):
        add_run(store, "variant", 100.0 + rep * 0.1, repeat=rep, env_key="e-new")
    [row] = [r for r in compare_recipes(store, ["base", "variant"]) if r.metric == "output_tok_s"]
    assert row.n_variant == 4 and abs(row.variant_mean - 100.15) < 1e-6
    assert row.verdict == "not significant"


# -- one selection rule for every table (real store, real CLI) ----------------------------------------

def _cli(args, capsys):
    from toolkit.cli import main

    rc = main(args)
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_report_and_compare_agree_on_runs_of_an_old_and_a_new_env(store, tmp_path, capsys):
    for rep, v in enumerate((50.0, 51.0, 52.0, 53.0)):  # the baseline before its env changed
        add_run(store, "base", v, repeat=rep, env_key="old", group_id="g-old", started_at=f"2026-01-01T00:0{rep}:00")
    for rep, (b, f) in enumerate(((100.0, 110.0), (101.0, 111.0), (102.0, 112.0), (103.0, 113.0))):
        add_run(store, "base", b, repeat=rep, env_key="new", group_id="g-new", started_at=f"2026-02-01T00:0{rep}:00")
        add_run(store, "fast", f, repeat=rep, env_key="fast", group_id="g-new", started_at=f"2026-02-01T00:0{rep}:30")
    db = str(store.path)
    rc, out, _ = _cli(["compare", "base", "fast", "--metric", "output_tok_s", "--json", "--store", db], capsys)
    assert rc == 0
    import json

    (row,) = json.loads(out)["rows"]
    assert row["n_base"] == 4 and row["base_mean"] == 101.5 and row["speedup"] == pytest.approx(111.5 / 101.5)
    rc, _, _ = _cli(["report", "base", "fast", "--metric", "output_tok_s", "--store", db, "-o", str(tmp_path / "r")],
                    capsys)
    assert rc == 0
    md = (tmp_path / "r" / "report.md").read_text()
    base_line = next(line for line in md.splitlines() if "| base |" in line and "baseline" in line)
    fast_line = next(line for line in md.splitlines() if "| fast |" in line and "x [" in line)
    from toolkit.analysis import stats

    assert stats.format_mean_std(row["base_mean"], row["base_std"], "tok/s").replace(" +- ", " ± ") in base_line
    assert "| 4 |" in base_line and "| 4 |" in fast_line
    assert f"{row['speedup']:.3f}x" in fast_line
    assert "g-new" in md and "2026-02-01" in md  # the runs, group and dates used are named
    # the text table names them too, and the verdict legend shows the minimum effect in force
    rc, out, _ = _cli(["compare", "base", "fast", "--store", db, "--min-effect", "0.2"], capsys)
    assert rc == 0 and "20% (--min-effect)" in out and "runs used:" in out and "g-new" in out
    assert "not significant" in out  # +9.9% is below a 20% minimum effect
    # `results --selected` lists exactly those runs
    rc, out, _ = _cli(["results", "base", "fast", "--selected", "--store", db], capsys)
    used = set(row["base_runs"]) | set(row["variant_runs"])
    assert rc == 0 and all(r[:8] in out for r in used) and len(used) == 8
    assert not any(r.run_id[:8] in out for r in store.runs(env_key="old"))
    # `results --group G` lists that sweep's runs only; a group with no runs is an error, not "no runs"
    rc, out, _ = _cli(["results", "--group", "g-new", "--store", db], capsys)
    assert rc == 0 and all(r.run_id[:8] in out for r in store.runs(group_id="g-new"))
    assert not any(r.run_id[:8] in out for r in store.runs() if r.group_id != "g-new")
    rc, _, err = _cli(["results", "--group", "g-nope", "--store", db], capsys)
    assert rc == 2 and "no runs of that group" in err
    # mixing env keys only on request, and then said
    from toolkit.analysis.selection import Criteria, select

    sel = select(store, ["base", "fast"], Criteria(mix_envs=True, prefer_group=False))
    assert len(sel.runs["base"]) == 8 and any("base: mixing 2 env keys on request" in n for n in sel.notes)


def test_unknown_metric_is_bad_input_listing_the_known_ones(store, capsys):
    add_run(store, "base", 100.0)
    add_run(store, "fast", 120.0)
    for argv in (["compare", "base", "fast", "--metric", "no_such_metric"],
                 ["report", "base", "--metric", "no_such_metric"],
                 ["bisect", "demo/fast", "--metric", "ttft_median@1"]):
        rc, _, err = _cli([*argv, "--store", str(store.path)], capsys)
        assert rc == 2, argv
        assert err.startswith("error:") and "unknown metric" in err and "output_tok_s" in err and "itl_ms_median" in err
        assert "\n" not in err.strip()
    rc, _, err = _cli(["compare", "base", "fast", "--metric", "decode_tok_s", "--store", str(store.path)], capsys)
    assert rc == 2 and "no samples of decode_tok_s (measured: output_tok_s)" in err


def test_imported_runs_and_other_gpus_count_only_on_request(store, capsys):
    for rep in range(4):
        add_run(store, "base", 100.0 + rep, repeat=rep)
        add_run(store, "fast", 130.0 + rep, repeat=rep, extra={"imported": {"from": "x.json"}})
    with pytest.raises(MissingResults, match="imported .use --imported"):
        compare_recipes(store, ["base", "fast"])
    from toolkit.analysis.selection import Criteria, select

    sel = select(store, ["base", "fast"], Criteria(imported=True))
    assert any("imported runs used on request: fast" in n for n in sel.notes)
    for rep in range(4):
        add_run(store, "other-gpu", 90.0 + rep, repeat=rep, machine={"gpu_key": "1x H200"})
    with pytest.raises(BadInput, match="--mix-gpus"):
        compare_recipes(store, ["base", "other-gpu"])
    sel = select(store, ["base", "other-gpu"], Criteria(mix_gpus=True))
    assert any("mixing GPUs on request" in n for n in sel.notes)


def test_missing_activation_evidence_is_left_out_unless_asked(store):
    from toolkit.analysis.selection import Criteria, select

    for rep in range(3):
        add_run(store, "base", 100.0, repeat=rep)
        add_run(store, "oea", 90.0, repeat=rep, status="invalid", extra={"evidence": {"oea.patch": "missing"}})
    with pytest.raises(MissingResults, match="activation evidence missing"):
        select(store, ["base", "oea"])
    sel = select(store, ["base", "oea"], Criteria(missing_evidence=True))
    assert len(sel.runs["oea"]) == 3 and any("missing activation evidence" in n for n in sel.notes)


def test_newest_common_benchmark_and_one_sweep_win(store):
    new = {**PARAMS, "output_len": 512}
    for rep in range(3):
        add_run(store, "base", 100.0, repeat=rep, group_id="old")
        add_run(store, "fast", 120.0, repeat=rep, group_id="old")
    for rep in range(3):  # only the baseline re-ran with the edited benchmark: the old one still counts
        add_run(store, "base", 50.0, repeat=rep, group_id="b-new", params=new)
    (row,) = compare_recipes(store, ["base", "fast"], metrics=["output_tok_s"])
    assert row.base_mean == 100.0
    for rep in range(3):  # now both have: the new benchmark counts
        add_run(store, "fast", 70.0, repeat=rep, group_id="f-new", params=new)
    (row,) = compare_recipes(store, ["base", "fast"], metrics=["output_tok_s"])
    assert row.base_mean == 50.0 and row.variant_mean == 70.0
    for rep in range(2):  # one interleaved sweep of both is preferred over pooling
        add_run(store, "base", 52.0, repeat=rep, group_id="sweep", params=new)
        add_run(store, "fast", 72.0, repeat=rep, group_id="sweep", params=new)
    (row,) = compare_recipes(store, ["base", "fast"], metrics=["output_tok_s"])
    assert row.n_base == 2 and row.base_mean == 52.0


def test_import_of_one_jsonl_twice_leaves_one_run(store, tmp_path, capsys):
    import json as _json

    path = tmp_path / "bench.jsonl"
    path.write_text("".join(_json.dumps({"backend": "sglang", "dataset_name": "random", "random_input_len": 128,
                                         "random_output_len": 256, "max_concurrency": c, "completed": 64,
                                         "output_throughput": 100.0 * c, "median_itl_ms": 10.0 + c}) + "\n"
                            for c in (1, 8)))
    db = str(store.path)
    rc, out, _ = _cli(["import", str(path), "--recipe", "sg", "--store", db], capsys)
    assert rc == 0 and "imported" in out
    (first,) = store.runs(recipe="sg")
    rc, out, _ = _cli(["import", str(path), "--recipe", "sg", "--store", db], capsys)
    assert rc == 0 and f"already imported as run {first.run_id[:8]}" in out
    copy = tmp_path / "copy.jsonl"  # the same rows, re-serialised: still the same data
    copy.write_text("\n".join(_json.dumps(_json.loads(x), indent=None, sort_keys=True)
                              for x in path.read_text().splitlines()) + "\n")
    rc, out, _ = _cli(["import", str(copy), "--recipe", "sg", "--store", db], capsys)
    assert rc == 0 and "already imported" in out
    assert len(store.runs(recipe="sg")) == 1
    samples = {(s.metric, s.point): s.value for s in store.samples(first.run_id)}
    assert samples[("output_tok_s", 8)] == 800.0 and samples[("itl_ms_median", 1)] == 11.0


def test_a_point_without_an_answers_check_says_so_beside_checked_points(store):
    """The check ran at c=1 only: c=8's "faster" is not read as checked (issue 29)."""
    from types import SimpleNamespace

    rng = random.Random(3)
    for rep in range(5):
        for point in (1, 8):
            add_run(store, "base", rng.gauss(100, 2) * point, repeat=rep, point=point)
            add_run(store, "fast", rng.gauss(125, 2) * point, repeat=rep, point=point)
    rows = [r for r in compare_recipes(store, ["base", "fast"]) if r.metric == "output_tok_s"]
    assert {r.point: r.verdict for r in rows} == {1: "faster", 8: "faster"}
    checked = SimpleNamespace(point=1, verdict="not informative", text="not informative")
    text = " ".join(_render(render_compare(rows, quality={"fast": {1: checked}})).split())
    assert "faster, not informative" in text and "faster, answers not checked at this point" in text
    plain = " ".join(_render(render_compare(rows)).split())  # no [quality] at all: nothing to say
    assert "answers not checked" not in plain


def test_benchmarks_that_differ_name_a_value_left_to_the_default_as_default():
    """A recipe that leaves num_prompts to the driver and one that sets it: the refusal says
    "(default)", not Python's None."""
    from toolkit.analysis.selection import require_same_benchmark

    with pytest.raises(BadInput) as e:
        require_same_benchmark({"a": {"bench_key": "1", "bench_params": {"driver": "serving", "num_prompts": None}},
                                "b": {"bench_key": "2", "bench_params": {"driver": "serving", "num_prompts": 8}}})
    assert "num_prompts (default) vs 8" in str(e.value) and "None" not in str(e.value)


def test_an_interval_that_cannot_be_stated_honestly_says_so(home, tmp_path, capsys):
    """Imported bench_serving results, 2 launches a side (`import`, then `compare --imported`): a metric
    whose baseline mean is within its own noise of 0 (ttft std 0.0 and 0.02 ms) has no bounded interval
    for the ratio, so the row says "no interval" and why, never "[0.00, 166.88]" (the delta method's);
    a metric 0 on both sides has no ratio at all ("n/a", never "nanx"); a sound row keeps its interval."""
    import json

    from toolkit.analysis import stats
    from toolkit.cli import main

    def launch(recipe, i, tok_s, std_ttft):
        f = tmp_path / f"{recipe}{i}.jsonl"
        f.write_text(json.dumps({"backend": "sglang", "dataset_name": "random", "max_concurrency": 4,
                                 "random_input_len": 1024, "random_output_len": 256, "completed": 16,
                                 "output_throughput": tok_s, "std_ttft_ms": std_ttft, "std_itl_ms": 0.0}) + "\n")
        assert main(["import", str(f), "--recipe", recipe]) == 0

    for i, (tok_s, std) in enumerate([(40.0, 0.0), (41.0, 0.02)]):
        launch("base", i, tok_s, std)
    for i, (tok_s, std) in enumerate([(44.0, 3.1), (45.0, 2.0)]):
        launch("var", i, tok_s, std)
    capsys.readouterr()
    assert main(["compare", "base", "var", "--imported", "--metric", "ttft_ms_std", "--metric", "itl_ms_std",
                 "--metric", "output_tok_s"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "x (no interval)" in text and "[0.00," not in text, text
    assert "n/a (no ratio)" in text and "nanx" not in text, text
    assert stats.NO_INTERVAL_LEGEND in text
    assert main(["compare", "base", "var", "--imported", "--json"]) == 0
    rows = {r["metric"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert rows["output_tok_s"]["ci_low"] > 1.0  # 40.5 vs 44.5 at 0.7 std: a bounded interval stays
    assert math.isnan(stats.ratio_ci([0.0, 0.02], [3.1, 2.0])[0])
    # 4 launches a side of a metric near 0: Mann-Whitney's p can pass, but without an interval no verdict is drawn
    c = stats.compare_values([0.0, 0.02, 0.0, 0.03], [0.05, 0.09, 0.06, 0.08], higher_is_better=False)
    assert c.p_value < 0.05 and math.isnan(c.ci_low) and c.verdict == stats.NOT_SIGNIFICANT


def test_a_bound_near_1_is_never_rounded_onto_1(home, tmp_path, capsys):
    """4 imported launches a side, 1.3% faster (Mann-Whitney p = 0.029) with the interval's lower bound at
    1.0035: compare prints it "[1.003, ...]", not "[1.00, ...]", which would read as touching 1 beside
    "faster"."""
    import json

    from toolkit.cli import main

    for recipe, values in (("base", [100.0, 100.6, 99.4, 100.2]), ("var", [101.0, 101.9, 100.7, 101.8])):
        for i, tok_s in enumerate(values):
            f = tmp_path / f"{recipe}{i}.jsonl"
            f.write_text(json.dumps({"backend": "sglang", "dataset_name": "random", "max_concurrency": 4,
                                     "random_input_len": 1024, "random_output_len": 256,
                                     "output_throughput": tok_s}) + "\n")
            assert main(["import", str(f), "--recipe", recipe]) == 0
    capsys.readouterr()
    assert main(["compare", "base", "var", "--imported", "--metric", "output_tok_s"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "1.013x [1.003, 1.02]" in text and "faster" in text and "[1.00," not in text, text
