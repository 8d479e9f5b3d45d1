"""The verbs a user types, on the shipped demo recipes: build twice, import sglang JSONL."""

from __future__ import annotations

import json

import pytest

from toolkit.cli import main
from toolkit.results.store import Store


def test_build_twice_reuses_and_patch_byte_makes_new_env(home, capsys, tmp_path, monkeypatch):
    assert main(["build", "demo/baseline", "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["reused"] is False
    assert main(["build", "demo/baseline", "--json"]) == 0
    second = json.loads(capsys.readouterr().out)
    assert second["reused"] is True and second["key"] == first["key"]
    assert main(["build", "demo/fast", "--json"]) == 0
    fast = json.loads(capsys.readouterr().out)
    assert fast["key"] != first["key"]
    assert main(["env", "list"]) == 0
    assert first["key"][:16] in capsys.readouterr().out


def test_import_sglang_jsonl(home, capsys, tmp_path):
    one_batch = tmp_path / "one_batch.jsonl"
    one_batch.write_text("\n".join(json.dumps(r) for r in [
        {"run_name": "before", "batch_size": 1, "input_len": 1024, "output_len": 256, "prefill_latency": 0.095,
         "median_decode_latency": 0.0965, "median_decode_throughput": 10.36, "total_latency": 24.8},
        {"run_name": "before", "batch_size": 16, "input_len": 1024, "output_len": 256, "prefill_latency": 0.9,
         "median_decode_latency": 0.11, "median_decode_throughput": 145.2, "total_latency": 29.0},
    ]) + "\n")
    serving = tmp_path / "serving.jsonl"
    serving.write_text(json.dumps({"backend": "sglang", "dataset_name": "random", "max_concurrency": 4,
                                   "random_input_len": 1024, "random_output_len": 256, "completed": 16,
                                   "output_throughput": 40.1, "mean_ttft_ms": 120.0, "median_itl_ms": 95.0,
                                   "p99_itl_ms": 130.0, "mean_tpot_ms": 96.0}) + "\n")
    assert main(["import", str(one_batch), "--recipe", "seed-tp8"]) == 0
    assert main(["import", str(serving), "--recipe", "seed-tp8-serving"]) == 0
    assert main(["import", str(tmp_path / "nope.jsonl"), "--recipe", "x"]) == 2
    capsys.readouterr()
    store = Store(home / "results.sqlite")
    [run] = store.runs(recipe="seed-tp8")
    values = {(s.metric, s.point): s.value for s in store.samples([run.run_id])}
    assert values[("decode_tok_s", 1)] == 10.36 and values[("decode_tok_s", 16)] == 145.2
    assert run.config_verified is False  # imported numbers never pass for verified ones
    [srv] = store.runs(recipe="seed-tp8-serving")
    assert {(s.metric, s.point) for s in store.samples([srv.run_id])} >= {("output_tok_s", 4), ("itl_ms_median", 4)}
    assert main(["results", "seed-tp8"]) == 0
    assert "decode_tok_s" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["--help"]] + [[v, "--help"] for v in
                                                 ("apply", "patches", "build", "env", "run", "results", "import",
                                                  "compare", "attribute", "bisect", "report", "roofline", "doctor")])
def test_every_help_page_renders(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 0
    assert "usage: patchbench" in capsys.readouterr().out
