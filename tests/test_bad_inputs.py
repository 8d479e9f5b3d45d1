"""Bad input gets one line naming the value and what is allowed, exit 2, before anything is
measured (issue 29): counts, ranking points, metrics of a report, a recipe compared with itself, a
child recipe's unset variable, an unknown evaluation, a shapes file of the wrong form."""

from __future__ import annotations

import json

import pytest

from conftest import demo_project
from toolkit.cli import main
from toolkit.results.store import Store


def _error(capsys) -> str:
    text = capsys.readouterr().err
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), text  # one line, no traceback, no usage dump
    return lines[0]


@pytest.mark.parametrize("argv", [
    ["attribute", "demo/fast", "--repeats", "0"],
    ["run", "demo/fast", "--repeats", "-2"],
    ["sweep", "demo/sweep", "--repeats", "0"],
    ["compare", "demo/baseline", "demo/fast", "--run", "--repeats", "0"],
    ["bisect", "demo/fast", "--repeats", "0"],
])
def test_a_count_below_one_is_refused(argv, home, capsys):
    with pytest.raises(SystemExit) as exc:  # refused while the command line is read
        main(argv)
    assert exc.value.code == 2
    line = _error(capsys)
    assert "--repeats" in line and repr(argv[-1]) in line and "at least 1" in line, line
    assert not (home / "results.sqlite").exists() or not Store(home / "results.sqlite").runs()


def test_sweep_metric_at_a_point_not_measured_is_refused_before_measuring(home, capsys):
    assert main(["sweep", "demo/sweep", "--metric", "output_tok_s@99"]) == 2
    line = _error(capsys)
    assert "output_tok_s@99" in line and "concurrency 99" in line and "concurrency 1, 16" in line, line
    assert "not measured by the benchmark of demo/sweep" in line, line  # the benchmark, not some configurations
    assert main(["sweep", "demo/sweep", "--metric", "gpu_temp_c_max"]) == 2
    assert "once per run" in _error(capsys)
    assert main(["sweep", "demo/sweep", "--metric", "decode_tok_s"]) == 2
    assert "static batches" in _error(capsys)
    assert not (home / "results.sqlite").exists() or not Store(home / "results.sqlite").runs()


@pytest.mark.parametrize("bound, words", [
    ("eval_accuracy>=0.8", ["eval_accuracy", "[quality] eval", "once per launch"]),
    ("answer_agreement>=0.9", ["answer_agreement", "output check"]),
    ("gpu_temp_c_max<=80", ["gpu_temp_c_max", "once per run"]),
    ("decode_tok_s>=10", ["decode_tok_s", "static batches"]),
])
def test_an_sla_bound_on_a_metric_not_measured_per_point_names_where_it_is(bound, words, home, capsys):
    assert main(["sweep", "demo/sweep", "--sla", bound]) == 2
    line = _error(capsys)
    assert all(w in line for w in words), line


def _serving_jsonl(path, concurrency: int, tok_s: float):
    path.write_text(json.dumps({"backend": "sglang", "dataset_name": "random", "max_concurrency": concurrency,
                                "random_input_len": 64, "random_output_len": 32, "completed": 16,
                                "output_throughput": tok_s, "median_itl_ms": 12.0}) + "\n")
    return path


def test_report_of_a_point_not_measured_names_what_was(home, tmp_path, capsys):
    for name, tok_s in (("imp-a", 40.0), ("imp-b", 44.0)):
        assert main(["import", str(_serving_jsonl(tmp_path / f"{name}.jsonl", 4, tok_s)), "--recipe", name]) == 0
    capsys.readouterr()
    assert main(["report", "imp-a", "imp-b", "--imported", "--unverified", "--metric", "output_tok_s@99",
                 "-o", str(tmp_path / "r")]) == 2
    line = _error(capsys)
    assert "output_tok_s@99" in line and "output_tok_s at 4" in line and "nothing" not in line, line


def test_compare_a_recipe_with_itself_says_so(home, capsys):
    assert main(["compare", "demo/baseline", "demo/baseline"]) == 2
    line = _error(capsys)
    assert "demo/baseline" in line and "itself" in line, line
    assert main(["compare", "demo/baseline", "recipes/demo/baseline.toml"]) == 2  # by path: the same recipe
    assert "itself" in _error(capsys)


def test_an_unset_variable_names_its_key_and_file(tmp_path, monkeypatch, capsys):
    proj = demo_project(tmp_path, monkeypatch)
    monkeypatch.delenv("NOPE", raising=False)
    child = proj / "recipes" / "demo" / "child.toml"  # no description of its own: one is made from its keys
    child.write_text('extends = "demo/baseline"\n[server.args]\ntp-size = "${NOPE}"\n')
    assert main(["show", "demo/child"]) == 2
    line = _error(capsys)
    assert "`server.args.tp-size` uses ${NOPE}" in line and str(child) in line and "description" not in line, line
    parent = proj / "recipes" / "demo" / "parent.toml"
    parent.write_text((proj / "recipes" / "demo" / "baseline.toml").read_text()
                      .replace('random-seed = 0', 'random-seed = "${NOPE}"'))
    child.write_text('extends = "demo/parent"\n')
    assert main(["show", "demo/child"]) == 2
    line = _error(capsys)
    assert "`server.args.random-seed` uses ${NOPE}" in line and str(parent) in line, line


def test_an_unknown_eval_is_refused_at_load_naming_the_allowed(tmp_path, monkeypatch, capsys):
    from toolkit.recipe.spec import EVALS
    from toolkit.run import gate, sgl_eval

    assert set(EVALS) == set(gate.EVAL_MODULES) == set(sgl_eval.BENCHMARKS)  # what load allows is what runs
    proj = demo_project(tmp_path, monkeypatch)
    (proj / "recipes" / "demo" / "mm.toml").write_text('extends = "demo/baseline"\n[quality]\neval = "mmlu"\n')
    assert main(["show", "demo/mm"]) == 2
    line = _error(capsys)
    assert "'mmlu'" in line and "gsm8k" in line and "quality.eval" in line, line


@pytest.mark.parametrize("text, words", [
    ("[1, 2, 3]", ["item 1", "1 is not a shape", "integer m, n, k", '{"m": 1']),
    ("", ["no shapes in it", "integer m, n, k"]),
    ('"m=1"\n', ["item 1", "is not a shape", "integer m, n, k"]),
])
def test_a_shapes_file_of_the_wrong_form_says_what_it_must_hold(text, words, home, tmp_path, capsys):
    shapes = tmp_path / "shapes.json"
    shapes.write_text(text)
    assert main(["kernels", "demo/baseline", "--op", "test.matmul", "--shapes", str(shapes)]) == 2
    line = _error(capsys)
    assert all(w in line for w in words), line


@pytest.mark.parametrize("value", ["0", "1.5", "often"])
def test_history_alpha_outside_0_1_is_refused(value, home, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["history", "demo/update", "--metric", "output_tok_s@1", "--alpha", value])
    assert exc.value.code == 2
    line = _error(capsys)
    assert "--alpha" in line and repr(value) in line and "between 0 and 1" in line, line


@pytest.mark.parametrize("argv, words", [
    (["attribute", "demo/fast", "--metric", "output_tok_s@7"], ["output_tok_s@7", "does not measure concurrency 7",
                                                                  "demo/fast"]),
    (["bisect", "demo/fast", "--metric", "output_tok_s@7"], ["output_tok_s@7", "does not measure concurrency 7"]),
    (["bisect", "demo/fast", "--metric", "decode_tok_s"], ["static batches", "driver 'serving'"]),
    (["bisect", "demo/fast", "--metric", "output_tok_s@1", "--threshold", "150"], ["cannot get worse by 150%"]),
    (["bisect", "demo/fast", "--metric", "output_tok_s@1", "--threshold", "-5"], ["must be above 0"]),
    (["bisect", "demo/fast", "--metric", "itl_ms_median@1", "--threshold", "100", "--direction", "better"],
     ["cannot get better by 100%"]),
])
def test_a_bisect_or_attribution_that_could_only_launch_for_nothing_is_refused(argv, words, home, capsys):
    """A point the recipe's benchmark does not measure, or a threshold no value can cross: refused
    before anything is built or launched."""
    assert main(argv) == 2
    line = _error(capsys)
    assert all(w in line for w in words), line
    assert not (home / "results.sqlite").exists() or not Store(home / "results.sqlite").runs()


def test_server_counts_of_a_recipe_are_checked(tmp_path, home, monkeypatch, capsys):
    proj = demo_project(tmp_path, monkeypatch)
    for bad, words in (("gpus = -1", "`server.gpus` = -1: input should be greater than or equal to 0"),
                       ("timeout_s = 0", "`server.timeout_s` must be a positive number"),
                       ("port = 70000", "`server.port` must be a TCP port")):
        (proj / "recipes/demo/bad.toml").write_text(f'extends = "demo/baseline"\n[server]\n{bad}\n')
        assert main(["show", "demo/bad"]) == 2
        assert words in _error(capsys)


def test_a_home_that_cannot_be_written_is_one_line_naming_it(home, capsys):
    (home / "live").write_text("not a directory")  # what a read-only home does to its first write (root ignores modes)
    assert main(["run", "demo/baseline", "--until", "apply"]) == 2
    line = _error(capsys)
    assert f"patchbench home {home}: cannot write {home / 'live'}" in line, line


@pytest.mark.parametrize("line, words", [
    ("num_prompts = 0", ["benchmark.num_prompts", "must be positive"]),
    ("timeout_s = -3", ["benchmark.timeout_s", "positive number of seconds", "-3"]),
])
def test_a_benchmark_value_that_cannot_run_is_refused_when_the_recipe_loads(line, words, tmp_path, monkeypatch, capsys):
    root = demo_project(tmp_path, monkeypatch)
    (root / "recipes" / "mine").mkdir()
    (root / "recipes" / "mine" / "bad.toml").write_text(f'extends = "demo/baseline"\n[benchmark]\n{line}\n')
    assert main(["show", "mine/bad"]) == 2
    text = _error(capsys)
    assert all(w in text for w in words) and "bad.toml" in text, text


def test_a_recipe_that_is_not_utf8_text_is_one_line(tmp_path, monkeypatch, capsys):
    root = demo_project(tmp_path, monkeypatch)
    (root / "recipes" / "mine").mkdir()
    (root / "recipes" / "mine" / "binary.toml").write_bytes(b'description = "\xff\xfe"\n')
    assert main(["show", "mine/binary"]) == 2
    assert "not a UTF-8 text file" in _error(capsys)


def test_a_home_a_store_path_or_a_store_config_that_cannot_be_used_is_one_line(home, tmp_path, monkeypatch, capsys):
    """A file where the home should be, a --store in a directory that does not exist (a typo, not a
    new empty store), a [store] url that is not a string: one line each, exit 2, nothing created."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert main(["results", "--home", str(blocker / "home")]) == 2
    assert "cannot create it as a directory" in _error(capsys)
    assert main(["results", "--store", str(tmp_path / "no" / "such" / "x.sqlite")]) == 2
    assert "no directory" in _error(capsys) and not (tmp_path / "no").exists()
    (home / "config.toml").write_text("[store]\nurl = 5\n")
    assert main(["results"]) == 2
    assert "[store] url must be a string" in _error(capsys)


@pytest.mark.parametrize("content, words", [
    ('{"output_throughput": 10.0, "max_concurrency": "x"}\n', ["max_concurrency", "'x'"]),
    ('{"output_throughput": "y", "max_concurrency": 4}\n', ["output_throughput must be a number"]),
    ('{"output_throughput": -5.0, "max_concurrency": 4}\n', ["cannot be measured"]),
])
def test_a_bench_serving_row_that_cannot_be_stored_is_one_line_and_stores_nothing(content, words, home, tmp_path,
                                                                                 capsys):
    src = tmp_path / "rows.jsonl"
    src.write_text(content)
    assert main(["import", str(src), "--recipe", "theirs"]) == 2
    line = _error(capsys)
    assert all(w in line for w in words), line
    assert not Store(home / "results.sqlite").runs()


def test_an_export_with_one_bad_run_imports_none_of_it(home, tmp_path, capsys):
    """A patchbench export whose second run has a sample value that is not a number: one line
    naming that run and sample, and the first run is not stored either (never half an import)."""
    sample = {"metric": "output_tok_s", "value": 10.0, "unit": "tok/s", "point": 1, "point_kind": "concurrency",
              "repeat": 0}
    doc = {"format": "patchbench-results", "schema_version": 1, "runs": [
        {"run_id": "aa" * 16, "recipe": "r", "status": "ok", "samples": [sample]},
        {"run_id": "bb" * 16, "recipe": "r", "status": "ok", "samples": [{**sample, "value": "abc"}]}]}
    from toolkit.results.exchange import EXPORT_FORMAT

    doc["format"] = EXPORT_FORMAT
    src = tmp_path / "export.json"
    src.write_text(json.dumps(doc))
    assert main(["import", str(src)]) == 2
    line = _error(capsys)
    assert "run 1 (bbbbbbbb)" in line and "sample 0" in line, line
    assert not Store(home / "results.sqlite").runs()


def test_a_bad_matrix_value_is_refused_by_show_naming_the_variant(tmp_path, monkeypatch, capsys):
    root = demo_project(tmp_path, monkeypatch)
    (root / "recipes" / "mine").mkdir()
    (root / "recipes" / "mine" / "m.toml").write_text(
        'extends = "demo/baseline"\n[matrix]\nbenchmark.input_len = [16, -4]\n')
    assert main(["show", "mine/m"]) == 2
    line = _error(capsys)
    assert "[matrix] variant mine/m[input_len=-4]" in line and "benchmark.input_len" in line, line


@pytest.mark.parametrize("flags", [["--min-repeats", "0"], ["--min-repeats", "9", "--max-repeats", "3"]])
def test_sequential_settings_that_cannot_hold_are_refused_before_anything_is_built(flags, home, capsys):
    assert main(["run", "demo/baseline", "demo/fast", "--until", "check", *flags]) == 2
    assert "--min-repeats/--max-repeats" in _error(capsys)
    assert not (home / "envs").exists() or not any((home / "envs").iterdir())


def test_a_bisect_cap_below_its_first_values_is_refused_before_anything_is_built(home, capsys):
    """`bisect --repeats 5 --max-repeats 3` would start each step at 5 values a side and state a cap of 3
    that does not hold (bisect_stack raises it to 5): refused, one line, nothing built."""
    assert main(["bisect", "demo/fast", "--metric", "output_tok_s@1", "--repeats", "5", "--max-repeats", "3"]) == 2
    line = _error(capsys)
    assert "--max-repeats 3 is below the 5 values a step starts with (--repeats)" in line, line
    assert not (home / "envs").exists() or not any((home / "envs").iterdir())


def test_an_unknown_option_is_named_by_its_verb_with_the_closest_one(home, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["run", "demo/fast", "--untl", "check"])
    assert exc.value.code == 2
    line = _error(capsys)
    assert "patchbench run: unrecognized arguments: --untl" in line and "did you mean --until?" in line, line


def test_a_model_config_with_a_size_that_is_not_a_number_is_one_line(tmp_path, capsys):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"hidden_size": "big", "num_hidden_layers": 2}))
    assert main(["roofline", "--model", str(cfg), "--gpu", "h100-sxm"]) == 2
    assert "a size field is not a number" in _error(capsys)
