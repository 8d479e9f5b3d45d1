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


def test_a_verb_starts_with_its_own_module_only_and_every_verb_stays_listed(home):
    """`patchbench show` loads the show verb and what it imports, not the other verbs' modules (the
    run pipeline, the store, SQLAlchemy: half a CPU-second of every start); the verb list, the
    help of each verb and an unknown verb's error still name every verb."""
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys; from toolkit.cli import main; rc = main(['show', 'demo/baseline']); "
            "print(rc, sorted(m for m in sys.modules if m.startswith(('toolkit.commands.', 'toolkit.run.pipeline', "
            "'toolkit.results.store', 'sqlalchemy')) and m.count('.') < 3))")
    out = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1], capture_output=True,
                         text=True, check=True).stdout.splitlines()[-1]
    assert out == "0 ['toolkit.commands.common', 'toolkit.commands.show']", out
    from toolkit.cli import VERBS, build_parser

    listed = build_parser().format_help()
    assert all(verb in listed for verb in VERBS) and "run recipes end to end" in listed
    # `patchbench --help` lists every verb with its help, read from the verb modules' sources, none loaded
    import importlib

    code = ("import sys, contextlib, io; from toolkit.cli import main\n"
            "buf = io.StringIO()\n"
            "with contextlib.redirect_stdout(buf):\n"
            "    try: main(['--help'])\n"
            "    except SystemExit: pass\n"
            "print(sorted(m for m in sys.modules if m.startswith('toolkit.commands.')))")
    loaded = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1], capture_output=True,
                            text=True, check=True).stdout.splitlines()[-1]
    assert loaded == "[]", loaded
    for verb, module in VERBS.items():
        first = importlib.import_module(f"toolkit.commands.{module}").HELP.split()[:3]
        assert " ".join(first) in " ".join(listed.split()), (verb, first)
    bad = subprocess.run([sys.executable, "-m", "toolkit", "nosuchverb"], cwd=Path(__file__).resolve().parents[1],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and all(f"'{verb}'" in bad.stderr for verb in VERBS)
