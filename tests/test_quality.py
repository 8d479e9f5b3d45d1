"""The output check beside every speedup: [quality] recipes, the check in the same launch, the
answers' verdict against the reference's own variation (real servers, real stores through the
pipeline; the torch e2e is slow)."""

from __future__ import annotations

import json
import os
import re
import textwrap
from pathlib import Path

import pytest

from conftest import demo_project
from gate_project import GATE_BLOCK, gate_project, gsm8k_lines
from toolkit.analysis.answers_verdict import BROKEN, CHANGED, NOT_INFORMATIVE, SAME, TOO_FEW, Launch, judge
from toolkit.cli import main
from toolkit.results.store import Store


def _launch(rid, answers, degenerate=None, informative=True):
    return Launch(rid, tuple(tuple(a) for a in answers), tuple(degenerate or [None] * len(answers)), informative,
                  None if informative else "hash text")


def test_verdict_against_the_reference_floor():
    base = [[i, i + 1, i + 2] for i in range(40)]
    wobbly = [list(a) for a in base]
    for p in range(6):  # the reference's own launches differ on 6 prompts
        wobbly[p] = [999, p]
    ref = [_launch("r1", base), _launch("r2", wobbly)]
    # a candidate that differs exactly where the reference itself varies: same answers
    assert judge(16, ref, [_launch("c", wobbly)]).verdict == SAME
    # ... and one that departs on 20 prompts the reference never varied on (20 vs 6 discordant): changed
    changed = [list(a) for a in base]
    for p in range(14, 34):
        changed[p] = [7, 7, 8]
    v = judge(16, ref, [_launch("c", changed)])
    assert v.verdict == CHANGED and v.departs == 20 and v.varies == 6 and "20 of 40 prompts" in v.text
    # a degenerate answer wins over everything; text that does not depend on computation says so
    assert judge(16, ref, [_launch("c", base, ["one token repeated"] + [None] * 39)]).verdict == BROKEN
    v = judge(1, [_launch("r1", base, informative=False)] * 2, [_launch("c", base, informative=False)])
    assert v.verdict == NOT_INFORMATIVE and "hash text" in v.text
    assert judge(1, ref[:1], [_launch("c", base)]).verdict == TOO_FEW
    # answers to another max_tokens (or prompt set) never compare: not "answers changed", too few
    import dataclasses

    shorter = dataclasses.replace(_launch("c", [a[:2] for a in base]), key=("mixed", 6))
    v = judge(1, [dataclasses.replace(r, key=("mixed", 8)) for r in ref], [shorter])
    assert v.verdict == TOO_FEW and "2 more answered other prompts or another max_tokens" in v.text


def test_malformed_prompts_file_names_file_and_line(home, tmp_path, monkeypatch, capsys):
    proj = demo_project(tmp_path, monkeypatch)
    bad = proj / "recipes" / "demo" / "prompts.jsonl"
    bad.write_text('{"prompt": "one"}\n{"prompt": "two"}\n{"prompt": 3}\n')
    (proj / "recipes" / "demo" / "q.toml").write_text(textwrap.dedent("""\
        extends = "demo/baseline"
        [quality]
        prompts = "prompts.jsonl"
        """))
    assert main(["run", "demo/q"]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:3" in err and "prompt" in err
    bad.write_text('{"prompt": "one"}\nnot json\n')
    assert main(["run", "demo/q"]) == 2
    assert f"{bad}:2: not a JSON object" in capsys.readouterr().err


def test_hash_text_is_not_informative_and_a_failed_check_keeps_the_speed(home, tmp_path, monkeypatch, capsys):
    """The miniature without its torch step: answers stored, sane, but the verdict is 'not
    informative', never 'same answers'. A server that dies during the check: quality `failed`
    with the reason, the run `ok` with its speed samples."""
    proj = demo_project(tmp_path, monkeypatch)
    (proj / "recipes" / "demo" / "prompts8.jsonl").write_text(
        "".join(json.dumps({"id": f"p{i}", "prompt": f"question number {i} about topic {i * 7}"}) + "\n"
                for i in range(8)))
    small = """\
        extends = "demo/baseline"
        compare_to = "demo/qa"
        [benchmark]
        concurrency = [1, 4]
        num_prompts = 4
        output_len = 8
        warmup = 1
        repeats = 2
        [quality]
        prompts = "prompts8.jsonl"
        max_tokens = 6
        """
    (proj / "recipes" / "demo" / "qa.toml").write_text(textwrap.dedent(small).replace("repeats = 2", "repeats = 3"))
    (proj / "recipes" / "demo" / "qb.toml").write_text(textwrap.dedent(small)
                                                       + "[server.args]\nmini-step-base-ms = 11\n")
    assert main(["run", "demo/qa", "demo/qb", "--fixed"]) == 0
    store = Store(home / "results.sqlite")
    runs = store.runs(recipe="demo/qa", status="ok")
    assert len(runs) == 3
    q = runs[1].extra["quality"]
    assert q["status"] == "ok" and q["points"] == [1, 4] and q["informative"] is False
    art = json.loads(open(q["artifact"]).read())
    assert len(art["points"]["4"]) == 8 and all(len(r["ids"]) >= 1 for r in art["points"]["4"])
    assert q["reference_run"] == runs[0].run_id  # its own previous launch
    metrics = {(s.metric, s.point): s.value for s in store.samples([runs[1].run_id])}
    assert metrics[("output_sanity", 4)] == 1.0 and metrics[("answer_agreement", 4)] == 1.0
    # Answers belong to the configuration: the reference's third launch and the candidate's second
    # ask nothing (2 launches give the floor, 1 a candidate's answers); their speed numbers count.
    third = runs[2].extra["quality"]
    assert third["status"] == "skipped" and runs[0].run_id[:8] in third["reason"] and runs[1].run_id[:8] in third["reason"]
    assert any(s.metric == "output_tok_s" for s in store.samples([runs[2].run_id]))
    assert not any(s.metric == "output_sanity" for s in store.samples([runs[2].run_id]))
    cand = store.runs(recipe="demo/qb", status="ok")
    assert [r.extra["quality"]["status"] for r in cand] == ["ok", "skipped"]
    assert not any("rule" in r.extra["quality"] for r in cand)  # --fixed: the recipe's fixed rule, no sequential one
    assert main(["run", "demo/qa", "demo/qb", "--repeats", "1"]) == 0  # re-running asks nothing again
    again = store.runs(recipe="demo/qa", newest_first=True)[0]
    assert again.extra["quality"]["status"] == "skipped"
    assert [row[0] for row in again.extra["quality"]["answers_from"]] == [runs[0].run_id, runs[1].run_id]
    # ... and a selection of only those runs (one sweep) still carries the configuration's answers
    capsys.readouterr()
    assert main(["compare", "demo/qa", "demo/qb", "--group", again.group_id, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["runs"]["demo/qa"] == [again.run_id]
    assert {p: v["verdict"] for p, v in data["quality"]["demo/qb"].items()} == {"1": NOT_INFORMATIVE, "4": NOT_INFORMATIVE}
    capsys.readouterr()
    assert main(["compare", "demo/qa", "demo/qb"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "answers: demo/qa (against itself) c=1,4; demo/qb c=1,4: not informative: the miniature without its torch step" in out
    assert main(["compare", "demo/qa", "demo/qb", "--json"]) == 0
    verdicts = json.loads(capsys.readouterr().out)["quality"]["demo/qb"]
    assert {p: v["verdict"] for p, v in verdicts.items()} == {"1": NOT_INFORMATIVE, "4": NOT_INFORMATIVE}

    # A server that crashes during the check (after the benchmark's requests).
    (proj / "recipes" / "demo" / "qc.toml").write_text(textwrap.dedent(small).replace('compare_to = "demo/qa"', '')
                                                       + "[server.args]\nmini-crash-after-requests = 12\n")
    assert main(["run", "demo/qc", "--repeats", "1"]) == 0
    run = store.runs(recipe="demo/qc")[-1]
    assert run.status == "ok", run.error
    assert run.extra["quality"]["status"] == "failed" and run.extra["quality"]["reason"]
    assert any(s.metric == "output_tok_s" for s in store.samples([run.run_id]))


@pytest.mark.slow
def test_torch_answers_beside_speed(home, tmp_path, monkeypatch, capsys):
    """The torch miniature: its tokens are its computation. A launch of the baseline against the
    others: same answers; smaller experts: answers changed; the zeroing tile: faster, and broken output
    at c=16 (run invalid) while the same answers at c=1; compare, report and attribute say both."""
    proj = demo_project(tmp_path, monkeypatch)
    assert main(["run", "demo/torch-baseline", "demo/torch-zero-experts", "--fixed"]) == 1  # the zeroing runs: invalid
    assert main(["run", "demo/torch-small-experts", "--repeats", "1"]) == 0
    store = Store(home / "results.sqlite")
    base = store.runs(recipe="demo/torch-baseline", status="ok")
    # The reference answers in two launches (its floor); its other speed repeats ask nothing.
    assert [r.extra["quality"]["status"] for r in base] == ["ok", "ok", "skipped", "skipped"]
    zero = store.runs(recipe="demo/torch-zero-experts")
    assert zero and all(r.status == "invalid" and r.extra["quality"]["status"] == "broken" for r in zero)
    assert "broken output at concurrency 16" in zero[-1].error

    from toolkit.analysis.quality_runs import self_verdict

    # two launches: the floor, not a self-check (that needs a third)
    assert {p: v.verdict for p, v in self_verdict(base).items()} == {1: TOO_FEW, 16: TOO_FEW}

    capsys.readouterr()
    assert main(["compare", "demo/torch-baseline", "demo/torch-zero-experts"]) == 2  # broken: left out by default
    assert "--broken-output" in capsys.readouterr().err
    assert main(["compare", "demo/torch-baseline", "demo/torch-small-experts", "demo/torch-zero-experts",
                 "--broken-output", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    q = data["quality"]
    assert {p: v["verdict"] for p, v in data["quality_floor"]["demo/torch-baseline"].items()} == {"1": TOO_FEW, "16": TOO_FEW}
    assert q["demo/torch-small-experts"]["1"]["verdict"] == CHANGED
    assert q["demo/torch-small-experts"]["16"]["verdict"] == CHANGED
    assert q["demo/torch-zero-experts"]["1"]["verdict"] == SAME
    assert q["demo/torch-zero-experts"]["16"]["verdict"] == BROKEN
    tok = {r["recipe"]: r for r in data["rows"] if r["metric"] == "output_tok_s" and r["point"] == 16}
    zero = tok["demo/torch-zero-experts"]
    # Faster (it skips the expert GEMMs at c=16 and its steps cost 10 ms, not 12). On a machine whose
    # load swings several-fold between launches 4 vs 4 may not separate: then the gain must still show.
    assert zero["speedup"] > 1.0 and zero["verdict"] in ("faster", "not significant"), zero
    from toolkit.commands import common

    monkeypatch.setattr(common.console, "width", 400)  # one table row per line
    assert main(["compare", "demo/torch-baseline", "demo/torch-zero-experts", "--broken-output"]) == 0
    out = capsys.readouterr().out
    assert re.search(rf"output_tok_s .* {zero['verdict']}, broken output", out) and "exact exchangeability test" in out

    report = tmp_path / "report"
    assert main(["report", "demo/torch-baseline", "demo/torch-small-experts", "-o", str(report)]) == 0
    md = (report / "report.md").read_text()
    assert "### Answers (output check)" in md and "answers changed" in md
    assert ("**demo/torch-baseline (against itself)** at c=16: too few launches for a self-check (it needs a "
            "third): its own 2 launches differ on") in md
    assert "| prompt | demo/torch-baseline | demo/torch-small-experts |" in md
    assert "Answers (output check)" in (report / "report.html").read_text()

    capsys.readouterr()
    assert main(["attribute", "demo/torch-zero-experts", "--metric", "output_tok_s@16", "--repeats", "2"]) == 0
    out = capsys.readouterr().out
    assert "broken output" in out and "answers:" in out


def test_departures_where_the_reference_never_varies_are_a_change():
    """10 departures on prompts the reference never varied on, beside a floor of 6 varying prompts:
    answers changed (the reference's variation elsewhere does not excuse them); a candidate that
    varies only where the reference varies: same answers."""
    base = [[i, i + 1] for i in range(40)]
    wobbly = [[999, p] if p < 6 else list(a) for p, a in enumerate(base)]
    ref = [_launch("r1", base), _launch("r2", wobbly)]
    cand = [[7, 7] if 20 <= p < 30 else list(a) for p, a in enumerate(base)]
    v = judge(1, ref, [_launch("c", cand)])
    assert v.verdict == CHANGED and v.departs == 10 and v.varies == 6 and v.p_value < 0.05
    assert "10 of 40 prompts departed" in v.text
    like = [list(b) if p % 2 else list(w) for p, (b, w) in enumerate(zip(base, wobbly))]
    v = judge(1, ref, [_launch("c1", like), _launch("c2", wobbly)])
    assert v.verdict == SAME and v.departs == 0 and v.p_value > 0.05


def test_two_launches_are_a_floor_not_a_self_check():
    """A configuration with two launches cannot judge itself (each against both agrees by
    construction): it states its floor and that a self-check needs a third launch."""
    from toolkit.analysis.answers_verdict import floor

    base = [[i, i + 1] for i in range(40)]
    wobbly = [[999, p] if p < 6 else list(a) for p, a in enumerate(base)]
    v = floor(1, [_launch("r1", base), _launch("r2", wobbly)])
    assert v.verdict == TOO_FEW and v.varies == 6 and "needs a third" in v.text and "differ on 6 of 40" in v.text
    assert floor(1, [_launch("r1", base), _launch("r2", base, ["empty"] + [None] * 39)]).verdict == BROKEN
    pair = [_launch("r1", base), _launch("r2", wobbly)]
    assert judge(1, pair, pair).verdict == TOO_FEW  # the same launches as both sides: no test
    third = floor(1, [*pair, _launch("r3", base)])  # a third launch: the newest against the others
    assert third.verdict == SAME and "2 launches" not in third.text


def test_another_prompts_answer_only_when_long():
    """Two prompts sharing a short answer is what a real model does; sharing one of 16 tokens is not."""
    from toolkit.run.answers import SHARED_MIN_TOKENS, degenerate

    assert degenerate([[5, 6], [5, 6], [1, 2, 3]]) == [None, None, None]
    long = list(range(100, 100 + SHARED_MIN_TOKENS))
    assert degenerate([long, list(long), [1, 2, 3]]) == ["same as another prompt's"] * 2 + [None]
    assert degenerate([long[:-1], long[:-1]]) == [None, None]


def _eval(correct):
    return {"name": "gsm8k", "status": "ok", "accuracy": sum(correct) / len(correct), "correct": list(correct),
            "questions": len(correct)}


@pytest.mark.parametrize("accuracy", [0.80, 0.85, 0.90, 0.94, 0.95])
def test_gate_identical_results_pass_at_every_accuracy(accuracy):
    """The shipped baseline's settings (200 questions, max_drop 0.03): a candidate with the
    reference's per-question results passes, whatever the accuracy."""
    from toolkit.analysis.gate_verdict import PASSED, judge as judge_gate

    k = round(accuracy * 200)
    ref = _eval([1] * k + [0] * (200 - k))
    v = judge_gate(dict(ref), ref, max_drop=0.03)
    assert v.verdict == PASSED and v.p_value == 1.0 and v.drop_bound == 0.0, v.text
    assert "max_drop 0.03" not in v.text and "-0.03" in v.rule


def test_gate_fails_a_five_point_drop_and_passes_a_small_one():
    from toolkit.analysis.gate_verdict import FAILED, PASSED, judge as judge_gate

    ref = [1] * 170 + [0] * 30
    ten_worse = [0] * 10 + [1] * 160 + [0] * 30  # 0.85 -> 0.80 on 200 questions
    v = judge_gate(_eval(ten_worse), _eval(ref), max_drop=0.03)
    assert v.verdict == FAILED and "10 questions worse, 0 better" in v.text and "max_drop 0.03" in v.text
    assert v.drop_bound == pytest.approx(-0.05)
    # 3 worse, 3 better (the eval's own flips): passes; 5 worse, 0 better: significantly worse
    # (McNemar p = 0.03), but the drop is bounded at -0.025: within max_drop, it passes
    flips = [0, 0, 0] + [1] * 167 + [1, 1, 1] + [0] * 27
    assert judge_gate(_eval(flips), _eval(ref), max_drop=0.03).verdict == PASSED
    five = [0] * 5 + [1] * 165 + [0] * 30
    v = judge_gate(_eval(five), _eval(ref), max_drop=0.03)
    assert v.verdict == PASSED and v.p_value < 0.05 and -0.03 <= v.drop_bound < 0, v.text
    assert judge_gate(_eval(five), _eval(ref)).verdict == FAILED  # without max_drop: worse fails


def test_gate_without_a_reference_to_pair_with_says_so_and_never_passes_on_nothing():
    """A candidate 20 points below the reference fails the paired test; against a reference of another
    question count, a failed reference evaluation or none, the paired test cannot run: the verdict says
    so, and with no min_accuracy either nothing was tested, so it is "not judged", never "passed"."""
    from toolkit.analysis import quality_runs
    from toolkit.analysis.gate_verdict import FAILED, NOT_JUDGED, PASSED, judge as judge_gate

    cand = _eval([1] * 100 + [0] * 100)
    assert judge_gate(cand, _eval([1] * 190 + [0] * 10)).verdict == FAILED
    for ref, why in ((_eval([1] * 190 + [0] * 9), "199 questions against 200"),
                     ({"name": "gsm8k", "status": "failed", "reason": "timeout"}, "evaluation failed (timeout)"),
                     (None, "the reference has no evaluation"),
                     ({**_eval([1] * 200), "name": "mmlu"}, "another evaluation (name 'mmlu' against 'gsm8k')")):
        v = judge_gate(cand, ref, max_drop=0.03)
        assert v.verdict == NOT_JUDGED and why in v.text and "max_drop not applied" in v.text, v.text
        v = judge_gate(cand, ref, min_accuracy=0.4)  # the threshold alone is a test: passed, and says what was not
        assert v.verdict == PASSED and "not compared with the reference" in v.text, v.text
    assert "not judged" in judge_gate(cand, None).rule
    # the reference's newest evaluation failed: its older good one pairs
    good, failed = (type("R", (), {"extra": {"quality": {"eval": e}}})() for e in (_eval([1] * 190 + [0] * 10),
                                                                                   {"status": "failed"}))
    assert quality_runs.newest_eval([good, failed], ok=True)[1]["status"] == "ok"


def test_gate_runs_the_envs_evaluation(home, tmp_path, monkeypatch, capsys):
    """`eval = "gsm8k"`: the env's sglang.test.few_shot_gsm8k against the live server, with a local
    10-question file; the miniature's answers are words, so the accuracy is 0.0, parsed, and the
    gate's verdict says so. Without the dataset: bad input that says where to get it."""
    demo = gate_project(tmp_path, monkeypatch)
    recipe = 'extends = "demo/baseline"\n' + GATE_BLOCK + "min_accuracy = 0.5\n"
    (demo / "ga.toml").write_text(recipe.replace("min_accuracy = 0.5\n", "dataset = \"gsm10.jsonl\"\n"))
    (demo / "gb.toml").write_text(recipe + 'dataset = "gsm10.jsonl"\n')
    assert main(["run", "demo/ga", "demo/gb", "--fixed"]) == 0
    store = Store(home / "results.sqlite")
    run = store.runs(recipe="demo/gb", status="ok")[-1]
    ev = run.extra["quality"]["eval"]
    assert ev["status"] == "ok" and ev["module"] == "sglang.test.few_shot_gsm8k"
    assert ev["accuracy"] == 0.0 and ev["correct"] == [0] * 10
    assert {s.metric: s.value for s in store.samples([run.run_id])}["eval_accuracy"] == 0.0
    assert (home / "runs" / run.run_id / "eval" / "tmp_output_gsm8k.txt").is_file()
    capsys.readouterr()
    assert main(["compare", "demo/ga", "demo/gb", "--json"]) == 0
    gate = json.loads(capsys.readouterr().out)["gate"]["demo/gb"]
    assert gate["verdict"] == "gate failed" and "min_accuracy 0.5" in gate["text"] and gate["p_value"] == 1.0
    out = tmp_path / "report"
    assert main(["report", "demo/ga", "demo/gb", "-o", str(out)]) == 0  # the gate goes where the answers go
    md = next(out.glob("*.md")).read_text()
    assert "**demo/gb** accuracy gate: " in md and "min_accuracy 0.5" in md

    (demo / "gc.toml").write_text(recipe)  # no dataset, no $PATCHBENCH_DATA
    monkeypatch.delenv("PATCHBENCH_DATA", raising=False)
    assert main(["run", "demo/gc"]) == 2
    err = capsys.readouterr().err
    assert "no dataset" in err and "grade-school-math" in err


@pytest.mark.slow
def test_bisect_answer_agreement_finds_the_zeroing_patch(home, tmp_path, monkeypatch, capsys):
    """`bisect --metric answer_agreement@16` over [harmless, zeroing tile] names the tile."""
    proj = demo_project(tmp_path, monkeypatch)
    (proj / "patches" / "demo" / "harmless.patch").write_text(textwrap.dedent("""\
        Subject: harmless

        diff --git a/python/sglang/srt/extra_note.py b/python/sglang/srt/extra_note.py
        new file mode 100644
        --- /dev/null
        +++ b/python/sglang/srt/extra_note.py
        @@ -0,0 +1 @@
        +NOTE = 1
        """))
    (proj / "recipes" / "demo" / "bz.toml").write_text(textwrap.dedent("""\
        extends = "demo/torch-baseline"
        [patches]
        sglang = ["demo/harmless.patch", "demo/torch-zero-experts.patch"]
        """))
    assert main(["run", "demo/torch-baseline", "--repeats", "2"]) == 0
    capsys.readouterr()
    assert main(["bisect", "demo/bz", "--metric", "answer_agreement@16", "--repeats", "2", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["culprit"] == 2 and "torch-zero-experts" in data["culprit_label"], data


def test_malformed_dataset_names_file_and_line(home, tmp_path, monkeypatch, capsys):
    proj = demo_project(tmp_path, monkeypatch)
    demo = proj / "recipes" / "demo"
    (demo / "gsm-bad.jsonl").write_text(gsm8k_lines(1) + '{"question": "no answer here"}\n')
    (demo / "gd.toml").write_text('extends = "demo/baseline"\n[quality]\neval = "gsm8k"\ndataset = "gsm-bad.jsonl"\n')
    assert main(["run", "demo/gd"]) == 2
    assert f"{demo / 'gsm-bad.jsonl'}:2: not a GSM8K line" in capsys.readouterr().err


@pytest.mark.slow
def test_gate_runs_sglang_0_5_23s_evaluation(tmp_path):
    """sglang 0.5.23's own `sglang.test.few_shot_gsm8k` (the shipped baseline's tree, on a CPU
    interpreter) against the miniature with a 10-question local file: its accuracy parsed (0.0: the
    miniature answers in words), per-question results from its dump, the paired verdict computed."""
    from conftest import TEST_CACHE, mini_env, mini_tu
    from sglang_cpu import sglang_cpu_python
    from toolkit.analysis.gate_verdict import FAILED, judge as judge_gate
    from toolkit.recipe.load import load_recipe
    from toolkit.run import gate
    from toolkit.tree.applied import apply_recipe

    home = TEST_CACHE / "oea-home"
    home.mkdir(parents=True, exist_ok=True)
    trees = apply_recipe(load_recipe("baseline"), home, frozen=True, write_lock=False)
    tree = next(t for t, _ in trees if t.source == "sglang").project_dir
    py = sglang_cpu_python(tree)
    site = tmp_path / "site"  # torchvision's CUDA-linked operators declared before sglang imports it
    site.mkdir()
    (site / "sitecustomize.py").write_text("import torchvision_ops_placeholder\ntorchvision_ops_placeholder.install()\n")
    tests_dir = Path(__file__).resolve().parent
    environ = {**mini_env(), "PYTHONPATH": os.pathsep.join(map(str, (site, tests_dir, tree))),
               "CUDA_VISIBLE_DEVICES": "", "PYTHONPYCACHEPREFIX": str(TEST_CACHE / "pycache")}
    data = tmp_path / "gsm10.jsonl"
    data.write_text(gsm8k_lines(10))
    port = mini_tu.find_free_port()
    server = mini_tu.popen_launch_server("mini", f"http://127.0.0.1:{port}", 60, other_args=[], env=mini_env())
    try:
        module = gate.find_module(py, environ, "gsm8k")
        assert module == "sglang.test.few_shot_gsm8k"
        acc, correct = gate.evaluate(py, environ, module, questions=10, data=data, workdir=tmp_path / "eval",
                                     log=tmp_path / "eval.log", host="127.0.0.1", port=port, timeout_s=600)
    finally:
        mini_tu.kill_process_tree(server.pid)
    assert "DeprecationWarning" in (tmp_path / "eval.log").read_text()  # it is 0.5.23's module that ran
    assert acc == 0.0 and correct == [0] * 10
    record = {"name": "gsm8k", "status": "ok", "accuracy": acc, "correct": correct, "questions": 10}
    v = judge_gate(record, dict(record), min_accuracy=0.5)
    assert v.verdict == FAILED and v.p_value == 1.0 and v.lower_bound == 0.0


def test_references_answer_twice_candidates_once(tmp_path, monkeypatch):
    """How many launches of a configuration answer: two for a recipe that is compared against (its
    own variation is a floor), one for a candidate, `launches` when set (0: the check off)."""
    from toolkit.recipe.load import load_recipe
    from toolkit.run.quality import launches_needed

    proj = demo_project(tmp_path, monkeypatch)
    demo = proj / "recipes" / "demo"
    (demo / "mid.toml").write_text('extends = "demo/fast"\ncompare_to = "demo/baseline"\n')
    (demo / "top.toml").write_text('extends = "demo/mid"\ncompare_to = "demo/mid"\n')
    (demo / "off.toml").write_text('extends = "demo/fast"\n[quality]\nlaunches = 0\n')
    got = {n: launches_needed(load_recipe(f"demo/{n}")) for n in ("baseline", "fast", "mid", "top", "off")}
    assert got == {"baseline": 2, "fast": 1, "mid": 2, "top": 1, "off": 0}


def test_a_check_turned_off_is_off_for_the_base_of_the_stack_too(home, tmp_path, monkeypatch, capsys):
    """`[quality] launches = 0` on an attributed recipe: the base of its stack (prefix0, which otherwise
    answers twice as the prefixes' floor) asks nothing either, as `run` of the recipe would."""
    from toolkit.results.store import Store

    proj = demo_project(tmp_path, monkeypatch)
    demo = proj / "recipes" / "demo"
    (demo / "off.toml").write_text('extends = "demo/fast"\n[quality]\nlaunches = 0\n[benchmark]\ndriver = "serving"\n'
                                   'input_len = 16\noutput_len = 8\nconcurrency = [1]\nnum_prompts = 4\nwarmup = 1\n')
    assert main(["attribute", "demo/off", "--metric", "output_tok_s@1", "--repeats", "1", "--json"]) == 0
    capsys.readouterr()
    runs = Store(home / "results.sqlite").runs()
    assert len(runs) == 2
    assert all(r.extra["quality"]["status"] == "skipped" and "check is off" in r.extra["quality"]["reason"]
               for r in runs), [r.extra["quality"] for r in runs]


def test_sequential_answers_stop_when_settled(home, tmp_path, monkeypatch, capsys):
    """Sequential launches (the default): the torch miniature's candidate with the reference's
    computation (only slower) answers in its first launch and then stops asking; one whose patch
    changes the computation is called 'answers changed' from its one look; compare judges and
    prints the legend of the sequential rule (--fixed keeps the fixed rule: the test above)."""
    proj = demo_project(tmp_path, monkeypatch)
    demo = proj / "recipes" / "demo"
    small = textwrap.dedent("""\
        [benchmark]
        concurrency = [1]
        num_prompts = 4
        output_len = 4
        warmup = 1
        [quality]
        concurrency = [1]
        count = 16
        max_tokens = 6
        """)
    (demo / "tq-base.toml").write_text('extends = "demo/torch-baseline"\ncompare_to = "demo/tq-base"\n' + small)
    (demo / "tq-same.toml").write_text('extends = "demo/tq-base"\ncompare_to = "demo/tq-base"\n'
                                       "[server.args]\nmini-step-base-ms = 80\n")
    (demo / "tq-changed.toml").write_text('extends = "demo/torch-small-experts"\ncompare_to = "demo/tq-base"\n' + small)
    assert main(["run", "demo/tq-base", "demo/tq-same", "demo/tq-changed", "--max-repeats", "2"]) == 0
    store = Store(home / "results.sqlite")
    base = store.runs(recipe="demo/tq-base", status="ok")
    assert [r.extra["quality"]["status"] for r in base][:2] == ["ok", "ok"]  # the reference's floor: fixed
    same = store.runs(recipe="demo/tq-same", status="ok")
    assert len(same) >= 2 and [r.extra["quality"]["status"] for r in same] == ["ok"] + ["skipped"] * (len(same) - 1)
    assert "no more answers needed" in same[1].extra["quality"]["reason"]
    assert same[0].extra["quality"]["rule"]["sequential"]["max_looks"] == 4
    capsys.readouterr()
    assert main(["compare", "demo/tq-base", "demo/tq-same", "demo/tq-changed", "--json"]) == 0
    q = json.loads(capsys.readouterr().out)["quality"]
    assert q["demo/tq-same"]["1"]["verdict"] == SAME and q["demo/tq-same"]["1"]["looks"] == 1
    assert q["demo/tq-changed"]["1"]["verdict"] == CHANGED and q["demo/tq-changed"]["1"]["looks"] >= 1
    assert main(["compare", "demo/tq-base", "demo/tq-same", "demo/tq-changed"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "answers, looked at launch by launch" in out and "p < 0.0125" in out and "at look 1 of at most 4" in out


def test_attribute_asks_a_prefixs_answers_until_settled(home, tmp_path, monkeypatch, capsys):
    """attribute's sequential steps (the default): the base answers in its two launches (the floor),
    a prefix in its first launch only once its verdict against the base is settled (here 'not
    informative': the hash-text miniature); with --repeats the fixed rule (1 launch) holds as before."""
    proj = demo_project(tmp_path, monkeypatch)
    demo = proj / "recipes" / "demo"
    (demo / "prompts8.jsonl").write_text("".join(json.dumps({"id": f"p{i}", "prompt": f"question {i} about {i * 7}"})
                                                 + "\n" for i in range(8)))
    (demo / "fq.toml").write_text(textwrap.dedent("""\
        extends = "demo/fast"
        [benchmark]
        concurrency = [1]
        num_prompts = 4
        output_len = 8
        warmup = 1
        [quality]
        prompts = "prompts8.jsonl"
        max_tokens = 4
        """))
    assert main(["attribute", "demo/fq", "--metric", "output_tok_s@1", "--max-repeats", "3"]) == 0
    store = Store(home / "results.sqlite")
    whole = store.runs(recipe="demo/fq", status="ok")  # prefix 1 is the whole stack: the recipe's own runs
    assert len(whole) >= 2
    states = [r.extra["quality"]["status"] for r in whole]
    assert states == ["ok"] + ["skipped"] * (len(whole) - 1), states
    assert "no more answers needed (c=1: not informative after 1 look" in whole[1].extra["quality"]["reason"]
    out = capsys.readouterr().out
    assert "not informative" in out
