"""Roofline efficiency compares like with like, on a real miniature run: decode-only tok/s (1000 / mean
TPOT at c=1, not the serving tok/s that includes prefill) over the decode roofline at the parallel
layout sglang resolved (/server_info: `--dp-size 2 --enable-dp-attention` is attention DP 2 inside
TP 2), with the basis and layout printed; a run without a stored resolved config says so."""

from __future__ import annotations

import json

from conftest import demo_project
from toolkit.cli import main
from toolkit.results.store import Store
from toolkit.roofline import theoretical_tok_s

# A prefill cost large enough that serving tok/s at c=1 is well below the decode rate.
RECIPE = """extends = "demo/baseline"
[benchmark]
concurrency = [1]
repeats = 1
num_prompts = 4
output_len = 16
[server.args]
tp-size = 2
dp-size = 2
enable-dp-attention = true
mini-prefill-base-ms = 60
[expect]
tp_size = 2
[roofline]
model = "qwen3-30b-a3b"
gpu = "h200"
weights = "all=bf16"
"""


def _export(tmp_path, capsys, *store) -> dict:
    out = tmp_path / "export.json"
    assert main(["results", "t/eff", "--export", "json", "-o", str(out), *store]) == 0
    capsys.readouterr()
    return json.loads(out.read_text())


def test_efficiency_is_decode_only_at_the_resolved_layout(tmp_path, home, monkeypatch, capsys):
    proj = demo_project(tmp_path, monkeypatch)
    (proj / "recipes/t").mkdir()
    (proj / "recipes/t/eff.toml").write_text(RECIPE)
    assert main(["run", "t/eff", "--fixed"]) == 0
    capsys.readouterr()
    data = _export(tmp_path, capsys)
    [run] = data["runs"]
    # sglang's resolution (the miniature's, as 0.5.23): attention DP 2 within TP 2, one replica
    assert (run["server_info"]["attn_dp_size"], run["server_info"]["dp_size"]) == (2, 1)
    at1 = {s["metric"]: s["value"] for s in run["samples"] if s["point"] == 1}
    decode, serving = 1e3 / at1["tpot_ms_mean"], at1["output_tok_s"]
    assert serving < 0.9 * decode  # the prefill is in the serving rate, not in the decode rate
    # the decode steps read the KV cache of a decoding sequence: input 64 + output 16 / 2 = 72 tokens
    theo = theoretical_tok_s("qwen3-30b-a3b", "h200", tp=2, ep=1, batch=1, context=72, weights="all=bf16", attn_dp=2)
    assert round(theo) != round(theoretical_tok_s("qwen3-30b-a3b", "h200", tp=2, ep=1, batch=1, context=72,
                                                  weights="all=bf16"))  # the layout changes the bound
    assert round(theo) != round(theoretical_tok_s("qwen3-30b-a3b", "h200", tp=2, ep=1, batch=1, context=0,
                                                  weights="all=bf16", attn_dp=2))  # and so does the context
    want = (f"decode {decode:.2f} of {theo:.0f} tok/s ({100 * decode / theo:.1f}% of the even-sharding bound; "
            f"1000/TPOT at c=1; TP2 attn-DP2 from /server_info, context 72); serving {serving:.2f} tok/s (includes "
            "prefill/TTFT, not compared)")

    assert main(["results", "t/eff"]) == 0
    assert _column(capsys.readouterr().out, "vs roofline") == want
    out = tmp_path / "report"
    assert main(["report", "t/eff", "-o", str(out)]) == 0
    capsys.readouterr()
    assert f"t/eff: {want} (vs the decode roofline of qwen3-30b-a3b on h200)" in (out / "report.md").read_text()

    # A run whose resolved config was not stored, live or static (an export of an older store): no guess.
    run["server_info"], run["extra"]["resolved_config"] = {}, {}
    old = tmp_path / "old.json"
    old.write_text(json.dumps(data))
    other = ["--store", str(tmp_path / "other.sqlite")]
    assert main(["import", str(old), *other]) == 0
    capsys.readouterr()
    assert main(["results", "t/eff", *other]) == 0
    text = _column(capsys.readouterr().out, "vs roofline")
    assert (f"decode {decode:.2f} tok/s (1000/TPOT at c=1); no roofline figure: no resolved server config stored "
            "(/server_info), so the GPUs sharing the weights are unknown") in text
    assert "% of the even-sharding bound" not in text


def test_a_narrow_terminal_still_shows_the_efficiency(tmp_path, home, monkeypatch, capsys):
    """`results` in a 100-column terminal (under 140 the table keeps one line per run and drops the
    "vs roofline" column): the efficiency follows the table, one line per run, word for word what the
    wide column says."""
    import os
    import subprocess
    import sys

    from conftest import REPO_ROOT

    proj = demo_project(tmp_path, monkeypatch)
    (proj / "recipes/t").mkdir()
    (proj / "recipes/t/eff.toml").write_text(RECIPE)
    assert main(["run", "t/eff", "--fixed", "--repeats", "1"]) == 0
    capsys.readouterr()
    assert main(["results", "t/eff"]) == 0  # the wide table (the tests' COLUMNS=200)
    wide = _column(capsys.readouterr().out, "vs roofline")
    assert "% of the even-sharding bound" in wide
    env = {**os.environ, "COLUMNS": "100", "PATCHBENCH_HOME": str(home), "PYTHONPATH": str(REPO_ROOT)}
    for argv in (["results", "t/eff"], ["results", "--selected", "t/eff"]):
        out = subprocess.run([sys.executable, "-m", "toolkit", *argv], cwd=proj, env=env, capture_output=True,
                             text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        assert max(len(line) for line in out.stdout.splitlines()) <= 100
        run_id = Store(home / "results.sqlite").runs()[0].run_id
        said = " ".join(out.stdout.split())
        assert f"vs roofline: {run_id[:8]} t/eff: {wide}" in said, out.stdout


def _column(table: str, name: str) -> str:
    """One column of a rich table, its folded lines joined."""
    lines = table.splitlines()
    head = next(line for line in lines if name in line and "┃" in line)
    idx = [cell.strip() for cell in head.split("┃")].index(name)
    cells = [line.split("│")[idx].strip() for line in lines if line.startswith("│")]
    return " ".join(c for c in cells if c)


def test_readme_example_is_what_the_tool_prints():
    from pathlib import Path

    from toolkit.analysis.efficiency import Efficiency

    theo = theoretical_tok_s("glm-5", "rtx-pro-6000", tp=8, ep=1, batch=1, context=1024 + 256 // 2,
                             weights="experts=nvfp4,rest=bf16")  # recipes/baseline.toml's benchmark
    text = Efficiency("tpot_ms_mean", 1e3 / 91.7, theo, "glm-5", "rtx-pro-6000", basis="1000/TPOT at c=1",
                      layout="TP8 from /server_info, context 1152", serving=10.36).text()
    for doc in ("README.md", "docs/CAMPAIGN.md"):
        assert text in " ".join((Path(__file__).parents[1] / doc).read_text().split()), doc


ONE_BATCH = RECIPE.replace("[benchmark]\nconcurrency = [1]\nrepeats = 1\nnum_prompts = 4\noutput_len = 16\n",
                           '[benchmark]\ndriver = "one-batch"\nbatch_sizes = [1]\ninput_len = 8\noutput_len = 8\n'
                           "repeats = 1\n")


def test_one_batch_runs_no_server_so_sglangs_static_resolution_gives_the_layout(tmp_path, home, monkeypatch, capsys):
    proj = demo_project(tmp_path, monkeypatch)
    (proj / "recipes/t").mkdir()
    (proj / "recipes/t/eff.toml").write_text(ONE_BATCH)
    assert main(["run", "t/eff", "--fixed"]) == 0
    capsys.readouterr()
    [run] = _export(tmp_path, capsys)["runs"]
    assert run["server_info"] == {} and run["extra"]["resolved_config"]["attn_dp_size"] == 2
    decode = next(s["value"] for s in run["samples"] if s["metric"] == "decode_tok_s" and s["point"] == 1)
    theo = theoretical_tok_s("qwen3-30b-a3b", "h200", tp=2, ep=1, batch=1, context=12, weights="all=bf16", attn_dp=2)
    assert main(["results", "t/eff"]) == 0
    assert _column(capsys.readouterr().out, "vs roofline") == (
        f"decode {decode:.2f} of {theo:.0f} tok/s ({100 * decode / theo:.1f}% of the even-sharding bound; "
        "decode_tok_s at b=1; TP2 attn-DP2 from sglang's static resolution, context 12)")
