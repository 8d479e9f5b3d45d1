"""GPU state through the real pipeline on the miniature, with the pynvml double installed in
sys.modules (patchbench samples in its own process): results, compare and report show the flags,
`--strict-box` stores a throttled run `invalid`, and without NVML every output says "no GPU state"."""

from __future__ import annotations

import json
import re
import sys

from conftest import MINI_SERVED, demo_project
from nvml_double import FakeNvml, gpu
from toolkit.cli import main

RECIPE = """description = "{name}"
""" + MINI_SERVED + """[server.args]
tp-size = 1
[benchmark]
driver = "serving"
input_len = 8
output_len = 8
concurrency = [1]
num_prompts = 3
warmup = 1
repeats = 2
"""

STEADY = {"gpus": [gpu(0, sm=2400), gpu(1, sm=2400)]}
# the recipes are tp-size 1: only GPU 0 is theirs (the job on GPU 1 is someone else's business)
THROTTLED = {"gpus": [gpu(0, sm=2400, reasons=[0x4, 0x4, 0, 0]), gpu(1, sm=2400)],
             "processes": [(0, 999_999_1, 1500), (1, 999_999_2, 1500)]}
SLOW_CLOCKS = {"gpus": [gpu(0, sm=2200, name="NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", limit_w=300.0),
                        gpu(1, sm=2200, name="NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", limit_w=300.0)]}


def _project(tmp_path, monkeypatch):
    proj = demo_project(tmp_path, monkeypatch)
    (proj / "recipes" / "box").mkdir()
    for name in ("a", "b"):
        (proj / "recipes" / "box" / f"{name}.toml").write_text(RECIPE.format(name=name))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return proj


def test_gpu_state_flows_from_the_run_to_results_compare_and_report(tmp_path, home, monkeypatch, capsys):
    _project(tmp_path, monkeypatch)
    # one recorded session per run, in the sweep's order: a0 b0 a1 b1
    fake = FakeNvml(sessions=[STEADY, STEADY, THROTTLED, SLOW_CLOCKS])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert main(["run", "box/a", "box/b", "--fixed"]) == 0  # flags do not fail a run without --strict-box
    assert fake.inits == 4
    capsys.readouterr()

    assert main(["results", "--export", "json"]) == 0
    runs = json.loads(capsys.readouterr().out)["runs"]
    a1 = next(r for r in runs if r["recipe"] == "box/a" and r["repeat"] == 1)
    state = a1["extra"]["gpu_state"]
    assert state["available"] and state["metrics"]["gpu_power_throttled_share"] >= 0.25
    assert state["metrics"]["gpu_foreign_processes"] == 1 and "sw_power_cap" in state["reasons_seen"]
    assert {s["metric"] for s in a1["samples"]} >= {"gpu_sm_clock_mhz_median", "gpu_power_throttled_share"}
    series = json.loads(open(a1["log_paths"]["gpu_state"]).read())
    assert len(series["t"]) >= 1 and [g["index"] for g in series["gpus"]] == [0]

    from toolkit.commands.common import console

    monkeypatch.setattr(console, "width", 200)  # the wide table (the 80-column one is tested with evidence)
    assert main(["results"]) == 0
    table = capsys.readouterr().out
    assert re.search(r"power \d+%, foreign 1", table), table
    assert "clock -8.3%" in table  # b1 ran at 2200 MHz against 2400 for the others of its sweep

    assert main(["compare", "box/a", "box/b", "--metric", "output_tok_s", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    box = "\n".join(out["box"])
    assert "power-throttled" in box and "foreign process" in box and "SM clock 2200 MHz" in box, box
    diffs = out["differences"][0]
    assert "GPU model/edition" in diffs and "Max-Q" in diffs and "power limit (W): 600.0 -> 300.0" in diffs, diffs
    assert "median SM clock: 2400 -> 2200 MHz" in diffs

    assert main(["report", "box/a", "box/b", "--metric", "output_tok_s", "-o", str(tmp_path / "r")]) == 0
    md = (tmp_path / "r" / "report.md").read_text()
    assert "box: box/a run" in md and "power-throttled" in md and "median SM clock" in md
    capsys.readouterr()


def test_strict_box_makes_flagged_runs_invalid_and_no_nvml_says_no_gpu_state(tmp_path, home, monkeypatch, capsys):
    _project(tmp_path, monkeypatch)
    # --strict-box: a steady run stays ok; one throttled at lower clocks than its sweep is stored invalid
    throttled_slow = {"gpus": [gpu(0, sm=2200, reasons=0x4), gpu(1, sm=2200)]}
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(sessions=[STEADY, throttled_slow]))
    assert main(["run", "box/a", "--repeats", "2", "--strict-box", "--json"]) == 1
    ids = [rid for _, rid in json.loads(capsys.readouterr().out)["runs"]]
    assert main(["results", "--export", "json"]) == 0
    strict = {r["run_id"]: r for r in json.loads(capsys.readouterr().out)["runs"]}
    assert strict[ids[0]]["status"] == "ok"
    bad = strict[ids[1]]
    assert bad["status"] == "invalid" and "--strict-box" in bad["error"], bad["error"]
    assert "power-throttled 100% of the window" in bad["error"] and "SM clock 2200 MHz, -8.3%" in bad["error"]

    # no NVML: nothing sampled, "no GPU state", no gpu_* sample (never zeros)
    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert main(["run", "box/b", "--repeats", "1", "--json"]) == 0
    rid = json.loads(capsys.readouterr().out)["runs"][0][1]
    assert main(["results", "--export", "json"]) == 0
    plain = next(r for r in json.loads(capsys.readouterr().out)["runs"] if r["run_id"] == rid)
    assert plain["extra"]["gpu_state"] == {"available": False, "reason": "nvidia-ml-py (pynvml) is not installed"}
    assert not [s for s in plain["samples"] if s["metric"].startswith("gpu_")]
    assert main(["results", "box/b", "--limit", "1"]) == 0
    assert "no GPU state" in capsys.readouterr().out
