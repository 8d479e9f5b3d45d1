"""The gate tier through the sgl-eval harness (`[quality] eval_harness = "sgl-eval"`): its own env,
run through the pipeline against the miniature's OpenAI chat API (slow: the env is built once per
test cache), and the recipe key's bad input."""

from __future__ import annotations

import json

import pytest

from conftest import TEST_CACHE
from gate_project import GATE_BLOCK, gate_project
from toolkit.cli import main
from toolkit.results.store import Store
from toolkit.run import sgl_eval

RECIPE = 'extends = "demo/baseline"\n' + GATE_BLOCK + 'eval_harness = "sgl-eval"\ndataset = "gsm10.jsonl"\n'


def test_unknown_harness_is_bad_input(home, tmp_path, monkeypatch, capsys):
    demo = gate_project(tmp_path, monkeypatch, questions=12)
    (demo / "sx.toml").write_text(RECIPE.replace('"sgl-eval"', '"sgl_eval"'))
    assert main(["run", "demo/sx"]) == 2
    err = capsys.readouterr().err.strip()
    assert "`quality.eval_harness` must be one of sglang, sgl-eval" in err and "did you mean `sgl-eval`" in err
    assert "Traceback" not in err


@pytest.mark.slow
def test_gate_runs_the_sgl_eval_harness(home, tmp_path, monkeypatch, capsys):
    """`eval_harness = "sgl-eval"`: sgl-eval 0.1.3 from its own env (shared through the test cache)
    against the live miniature's /v1/chat/completions with a local 10-question file (of 12): the
    miniature answers in words, so the accuracy is 0.0; each question's result is stored in order,
    and compare gives the gate's paired verdict."""
    monkeypatch.setenv("PATCHBENCH_SGL_EVAL_ENV", str(TEST_CACHE / "sgl-eval-0.1.3"))
    try:
        sgl_eval.ensure_env(home)
    except Exception as exc:  # no PyPI (or its mirror) here: nothing this test can check
        pytest.skip(f"sgl-eval not installable here: {exc}")
    demo = gate_project(tmp_path, monkeypatch, questions=12)
    (demo / "sa.toml").write_text(RECIPE)
    (demo / "sb.toml").write_text(RECIPE + "min_accuracy = 0.5\n")
    assert main(["run", "demo/sa", "demo/sb", "--fixed"]) == 0  # one launch each (repeats = 1)
    store = Store(home / "results.sqlite")
    run = store.runs(recipe="demo/sb", status="ok")[-1]
    ev = run.extra["quality"]["eval"]
    assert ev["status"] == "ok", ev
    assert ev["harness"] == "sgl-eval" and ev["module"] == "sgl-eval"
    assert ev["accuracy"] == 0.0 and ev["correct"] == [0] * 10
    assert {s.metric: s.value for s in store.samples([run.run_id])}["eval_accuracy"] == 0.0
    eval_dir = home / "runs" / run.run_id / "eval"
    asked = [json.loads(line) for line in (eval_dir / "dataset.jsonl").read_text().splitlines()]
    assert len(asked) == 10 and asked[0]["expected_answer"] == "5"  # the label after ####
    preds = [json.loads(line) for p in eval_dir.glob("sgl_eval_gsm8k_*/output-rs0.jsonl")
             for line in p.read_text().splitlines()]
    assert len(preds) == 10 and all(p["finish_reason"] in ("stop", "length") for p in preds)
    assert "sgl-eval run gsm8k" in (home / "runs" / run.run_id / "eval.log").read_text()
    capsys.readouterr()
    assert main(["compare", "demo/sa", "demo/sb", "--json"]) == 0
    gate = json.loads(capsys.readouterr().out)["gate"]["demo/sb"]
    assert gate["verdict"] == "gate failed" and "min_accuracy 0.5" in gate["text"] and gate["p_value"] == 1.0

    # Questions longer than the server's context: every request is refused (400), the harness scores
    # them as errors; the evaluation is `failed` with the reason, never accuracy 0, the speed kept.
    (demo / "sc.toml").write_text(RECIPE.replace("output_len = 4", "output_len = 4\ninput_len = 8")
                                  + "[server.args]\ncontext-length = 24\n")
    assert main(["run", "demo/sc"]) == 0
    run = store.runs(recipe="demo/sc")[-1]
    assert run.status == "ok", run.error
    ev = run.extra["quality"]["eval"]
    assert ev["status"] == "failed" and "100% of the requests failed" in ev["reason"], ev
    metrics = {s.metric for s in store.samples([run.run_id])}
    assert "output_tok_s" in metrics and "eval_accuracy" not in metrics
