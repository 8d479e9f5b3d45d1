"""compare: selection of usable runs, refusals, verdicts, rendering, provenance differences."""

from __future__ import annotations

import random

import pytest
from rich.console import Console

from toolkit.analysis.compare import (MissingResults, compare_recipes, diff_provenance,
                                      missing_recipes, render_compare)
from toolkit.bench import Sample
from toolkit.errors import BadInput
from toolkit.store import Store

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
    with pytest.raises(BadInput, match="output_len 256 vs 1"):
        compare_recipes(store, ["base", "fast"])
    (row,) = compare_recipes(store, ["base", "fast"], group_id="g1")
    assert row.verdict == "faster"


def test_diff_provenance(store):
    a = store.get_run(add_run(
        store, "v1", 100.0, sglang_version="0.5.10.post1", flashinfer_version="0.6.7.post3",
        tree_hashes={"sglang": "a" * 40, "flashinfer": "c" * 40}, arch_list=["12.0a"],
        server_argv=["-m", "sglang.launch_server", "--tp-size", "8", "--cuda-graph-max-bs", "32"],
        server_info={"tp_size": 8, "moe_runner_backend": "auto", "port": 30000},
        env_vars={"FLASHINFER_CUDA_ARCH_LIST": "12.0a"}, env_key="e1"))
    b = store.get_run(add_run(
        store, "v2", 100.0, sglang_version="0.5.23", flashinfer_version="0.6.7.post3",
        tree_hashes={"sglang": "b" * 40, "flashinfer": "c" * 40}, arch_list=["12.0f"],
        server_argv=["-m", "sglang.launch_server", "--tp-size=4", "--enable-single-batch-overlap"],
        server_info={"tp_size": 4, "moe_runner_backend": "flashinfer_cutlass", "port": 30001},
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
    assert "port" not in text  # launch-to-launch noise is not a difference
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
