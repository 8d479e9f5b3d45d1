"""Which kernels FlashInfer's autotuner chose in each launch, kept with the run and compared
(toolkit.run.autotune_record, toolkit.analysis.tactics).

sglang tunes FlashInfer at start on a CUDA box and, with patchbench's per-launch setting, writes each
launch's winners to a fresh file whose path it logs. The files here were written by FlashInfer 0.7.2's
own AutoTuner.save_configs (tests/data/flashinfer_tuned.py; the slow test writes them afresh and reads
sglang's installed source for the log line); through `run` the miniature stands in for sglang's
start-up tuning (upstream/minisglang .../start_tuning.py), since nothing tunes on a CPU."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from toolkit.analysis import tactics
from toolkit.run.autotune_record import collect

DATA = Path(__file__).resolve().parent / "data"
FRESH = ("[2026-12-05 10:00:00 TP{rank}] Running FlashInfer autotune (cache reuse DISABLED via "
         "SGLANG_FLASHINFER_AUTOTUNE_CACHE=0); writing fresh result to: {path}\n")


def _launch(tmp_path: Path, name: str, files: dict[int, str]) -> dict:
    """One launch's log naming a fresh result file per rank (copies of `files`), collected."""
    runs = tmp_path / name / "sglang-cache" / "runs"
    runs.mkdir(parents=True)
    log = ""
    for rank, data in files.items():
        path = runs / f"rank_tp{rank}_pp0_dp0.20261205_100000.{name}.json"
        shutil.copyfile(DATA / data, path)
        log += FRESH.format(rank=rank, path=path)
    return collect(log, tmp_path / name / "run")


def test_a_launch_keeps_the_tactics_its_log_names_and_compare_reads_them(tmp_path):
    rec = _launch(tmp_path, "one", {0: "flashinfer-tuned-a.json", 1: "flashinfer-tuned-a.json"})
    assert rec["mode"] == "fresh" and rec["ranks"] == 2 and rec["ranks_agree"] is True
    assert len(rec["choices"]) == 6 and (tmp_path / "one" / "run" / rec["files"][0]).is_file()
    first = rec["choices"][0]
    assert first["op"] == "trtllm::fused_moe::gemm1" and first["runner"] == "MoERunner"
    assert first["shapes"][0] == [1, 3072] and first["tactic"] == 3
    ranks_apart = _launch(tmp_path, "apart", {0: "flashinfer-tuned-a.json", 1: "flashinfer-tuned-b.json"})
    assert ranks_apart["ranks_agree"] is False
    assert collect("no tuning on this box\n", tmp_path / "cpu") is None
    gone = collect(FRESH.format(rank=0, path=tmp_path / "gone.json"), tmp_path / "gone")
    assert gone["choices"] == [] and "gone.json" in gone["missing"][0]

    # a baseline's two launches agree; the variant's two do not at one shape (a close race)
    run = lambda rec: SimpleNamespace(extra={"autotune": rec})  # noqa: E731
    base = [run(_launch(tmp_path, f"base{i}", {0: "flashinfer-tuned-a.json"})) for i in range(2)]
    variant = [run(_launch(tmp_path, f"var{i}", {0: f"flashinfer-tuned-{x}.json"})) for i, x in enumerate("bab")]
    lines = tactics.lines({"base": base, "variant": variant})
    assert lines[0] == "base: 6 tuned shapes, the same tactics in all 2 launches"
    assert lines[1].startswith("variant: its 3 launches chose differently at 1 of 6 tuned shapes")
    assert "trtllm::fused_moe::gemm1 at 8x3072: MoERunner 8 in 2, MoERunner 3 in 1" in lines[1]
    assert lines[2] == ("base -> variant: different tactics at 1 of 6 shapes both tuned: "
                        "trtllm::fused_moe::gemm1 at 8x3072: MoERunner 3 -> MoERunner 8")
    assert tactics.lines({"a": [SimpleNamespace(extra={})], "b": [SimpleNamespace(extra=None)]}) == []
    # a variant built from another FlashInfer tree: its ids index another candidate list (a tile patch's)
    patched = [SimpleNamespace(extra=r.extra, tree_hashes={"flashinfer": "b0c1"}) for r in variant]
    assert "a tactic is an index into its build's candidate list" in tactics.lines({"base": base, "tile": patched})[2]
    # a recipe that reuses sglang's tactic cache: its launches agree because the later ones loaded the first's
    cache = tmp_path / "shared" / "rank_tp0_pp0_dp0.json"
    cache.parent.mkdir()
    shutil.copyfile(DATA / "flashinfer-tuned-a.json", cache)
    kept = collect(f"[TP0] Running FlashInfer autotune with cache: {cache}\n", tmp_path / "reuse")
    assert kept["mode"] == "reused" and len(kept["choices"]) == 6
    said = tactics.lines({"base": base, "reuse": [run(kept), run(kept)]})
    assert said[1].startswith("reuse: tactics from a reused cache") and "by construction" in said[1]


def test_run_stores_each_launchs_tactics_and_compare_names_where_the_variant_differs(tmp_path, home, monkeypatch,
                                                                                       capsys):
    from conftest import demo_project
    from toolkit.cli import main
    from toolkit.results.store import Store

    proj = demo_project(tmp_path, monkeypatch)
    (proj / "recipes/t").mkdir()
    short = '[benchmark]\nconcurrency = [1]\nrepeats = 1\nnum_prompts = 4\noutput_len = 8\n'
    for name in "ab":
        (proj / f"recipes/t/{name}.toml").write_text(
            f'extends = "demo/baseline"\n[server.env]\nSGLANG_MINI_TUNED = "{DATA / f"flashinfer-tuned-{name}.json"}"\n'
            + short)
    assert main(["run", "t/a", "t/b", "--repeats", "2"]) == 0
    runs = Store(home / "results.sqlite").runs()
    assert len(runs) == 4
    for r in runs:
        rec = r.extra["autotune"]
        assert rec["mode"] == "fresh" and len(rec["choices"]) == 6
        copy = Path(r.log_paths["server"]).parent / rec["files"][0]
        assert json.loads(copy.read_text())["_metadata"]["flashinfer_version"] == "0.7.2"
    capsys.readouterr()
    assert main(["compare", "t/a", "t/b", "--json"]) == 0
    lines = json.loads(capsys.readouterr().out)["tactics"]
    assert "t/a: 6 tuned shapes, the same tactics in all 2 launches" in lines
    assert ("t/a -> t/b: different tactics at 1 of 6 shapes both tuned: trtllm::fused_moe::gemm1 at 8x3072: "
            "MoERunner 3 -> MoERunner 8") in lines


@pytest.mark.slow
def test_the_files_and_the_log_line_are_flashinfers_and_sglangs_own(tmp_path):
    """FlashInfer 0.7.2's writer, run now, writes what the committed copies hold; sglang 0.5.23's
    start-up tuning logs the two lines autotune_record reads."""
    from sglang_server import real_env_python

    python = real_env_python()
    out = tmp_path / "tuned-b.json"
    subprocess.run([str(python), str(DATA / "flashinfer_tuned.py"), str(out), "3", "8"], check=True,
                   capture_output=True, cwd=tmp_path)
    written = {k: v for k, v in json.loads(out.read_text()).items() if not k.startswith("_")}
    kept = {k: v for k, v in json.loads((DATA / "flashinfer-tuned-b.json").read_text()).items()
            if not k.startswith("_")}
    assert written == kept
    source = subprocess.run([str(python), "-c", "import importlib.util as u; "
                             "print(u.find_spec('sglang.srt.model_executor.runner.flashinfer_autotune').origin)"],
                            check=True, capture_output=True, text=True).stdout.strip()
    text = Path(source).read_text()
    assert "writing fresh result to: %s" in text and '"Running FlashInfer autotune with cache: %s"' in text
