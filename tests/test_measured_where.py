"""Where a number was measured is part of it, and a number beyond the roofline is an error of the
roofline's inputs: on real miniature runs, an evidence-derived metric carries "from N eager calls,
outside CUDA graphs" into compare and report, and an efficiency above 100% is flagged, not printed."""

from __future__ import annotations

import json
import re

from conftest import demo_project
from toolkit.cli import main
from toolkit.results.store import Store

SHORT = '[benchmark]\nconcurrency = [1]\nrepeats = 1\nnum_prompts = 4\noutput_len = 8\n'
# The miniature logs one "Prefill batch. #new-seq: N" line per prefill: a stand-in for OEA's log
# line, read as an evidence metric.
PROOF = ('[evidence."demo/faster-decode.patch"]\n'
         "log = 'Prefill batch. #new-seq: (?P<distinct_experts>\\d+)'\n")
# A roofline that cannot be this run's: a GLM-5-sized model on one GPU, far slower than the miniature.
WRONG_ROOFLINE = '[roofline]\nmodel = "glm-5"\ngpu = "rtx-pro-6000"\nweights = "all=bf16"\n'


def test_evidence_metric_says_where_and_a_roofline_beaten_is_flagged(tmp_path, home, monkeypatch, capsys):
    proj = demo_project(tmp_path, monkeypatch)
    (proj / "recipes/t").mkdir()
    (proj / "recipes/t/base.toml").write_text('extends = "demo/fast"\n' + SHORT + PROOF + WRONG_ROOFLINE
                                              + '[server.args]\nmini-step-base-ms = 10\n')
    (proj / "recipes/t/fast.toml").write_text('extends = "demo/fast"\n' + SHORT + PROOF + '[target]\ngpu = "h100"\n')
    assert main(["run", "t/base", "t/fast", "--fixed"]) == 0
    assert "(1 patch)" in capsys.readouterr().err  # not "1 patches"
    store = Store(home / "results.sqlite")
    for run in store.runs(recipe="t/fast"):
        n = len(re.findall(r"Prefill batch\. #new-seq: \d+", open(run.log_paths["server"]).read()))
        assert n > 0
        assert run.extra["evidence_metrics_source"] == {
            "distinct_experts": f"from {n} eager calls, outside CUDA graphs"}
    capsys.readouterr()
    # the target facts the static check presented to sglang travel with the run's export
    export = tmp_path / "export.json"
    assert main(["results", "t/fast", "--export", "json", "-o", str(export)]) == 0
    assert "exported 1 run to" in capsys.readouterr().out
    [exported] = json.loads(export.read_text())["runs"]
    assert exported["extra"]["static_check_outcome"] == "ok"
    assert exported["extra"]["target"]["key"] == "h100-sxm" and exported["extra"]["target"]["capability"] == [9, 0]
    assert exported["extra"]["static_check_presented"]["target"]["memory_mib"] == 81559

    assert main(["compare", "t/base", "t/fast", "--metric", "distinct_experts", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert re.fullmatch(r"from \d+ eager calls, outside CUDA graphs", data["measured_where"]["t/fast:distinct_experts"])
    assert main(["compare", "t/base", "t/fast", "--metric", "distinct_experts"]) == 0
    words = set(re.findall(r"\w+", capsys.readouterr().out))  # the table wraps the cell: its words are there
    assert {"eager", "calls", "outside", "CUDA", "graphs"} <= words

    out = tmp_path / "report"
    assert main(["report", "t/base", "t/fast", "-o", str(out), "--metric", "distinct_experts",
                 "--metric", "output_tok_s"]) == 0
    report = (out / "report.md").read_text()
    assert "outside CUDA graphs)" in report
    assert "the roofline inputs do not describe this run" in report  # t/base's efficiency: not a percentage

    # t/base declares a roofline its runs beat many times over: no percentage, the inputs are wrong
    assert main(["results", "t/base"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "roofline inputs do not" in text and "%" not in text.split("roofline inputs")[0][-40:]
    assert main(["compare", "t/base", "t/fast"]) == 0
    assert "t/base: the roofline inputs do not describe this run" in capsys.readouterr().out

    # a point that was not measured: the points that were
    assert main(["compare", "t/base", "t/fast", "--metric", "output_tok_s@64"]) == 2
    assert "output_tok_s measured at concurrency 1" in " ".join(capsys.readouterr().err.split())
