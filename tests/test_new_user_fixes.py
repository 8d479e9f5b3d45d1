"""What a new user hit, fixed (issue 18, item 7): help text, metric typos, a child recipe's
description in `nox -l`, `nox -s recipe-X -- --until STEP` without a compare, speedup colours."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys

import pytest

from conftest import REPO_ROOT, demo_project
from toolkit.cli import main
from toolkit.errors import BadInput
from toolkit.recipe.load import load_recipe
from toolkit.results import metrics


def test_compare_help_prints_percent_once(capsys):
    with pytest.raises(SystemExit):
        main(["compare", "--help"])
    out = capsys.readouterr().out
    assert "95% CI" in out and "%%" not in out


def test_metric_typos_get_a_did_you_mean(capsys):
    with pytest.raises(BadInput) as exc:
        metrics.get("output_toks")
    assert exc.value.hint.startswith("did you mean `output_tok_s`? (known metrics: ")
    assert main(["compare", "a", "b", "--metric", "output_toks"]) == 2
    assert "did you mean `output_tok_s`?" in capsys.readouterr().err


def _noxfile(root):
    spec = importlib.util.spec_from_file_location("project_noxfile", root / "noxfile.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_child_recipe_says_what_it_adds(tmp_path, monkeypatch):
    proj = demo_project(tmp_path, monkeypatch)
    shutil.copy(REPO_ROOT / "noxfile.py", proj / "noxfile.py")
    (proj / "recipes/mine").mkdir()
    (proj / "recipes/mine/quick.toml").write_text(
        'extends = "demo/baseline"\n[patches]\nsglang = ["demo/faster-decode.patch"]\n'
        '[benchmark]\nconcurrency = [1, 8, 32]\n')
    want = "demo/baseline + mine/quick: +demo/faster-decode.patch; benchmark.concurrency = [1, 8, 32]"
    assert load_recipe("mine/quick").description == want
    assert load_recipe("demo/fast").description.startswith("Demo:")  # its own words are kept
    pytest.importorskip("nox")
    proc = subprocess.run([sys.executable, "-m", "nox", "-l", "-f", str(proj / "noxfile.py")],
                          capture_output=True, text=True, cwd=proj)
    assert proc.returncode == 0, proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if "recipe-mine-quick" in ln)
    assert want in line and "as it is" not in line


def test_a_nox_recipe_session_stopped_before_store_skips_the_compare():
    pytest.importorskip("nox")
    nf = _noxfile(REPO_ROOT)
    assert nf._stops_before_store(["--until", "check"]) and nf._stops_before_store(["--until=verify"])
    assert not nf._stops_before_store(["--until", "store"]) and not nf._stops_before_store(["--repeats", "2"])


def test_false_unsets_an_inherited_valued_flag(tmp_path, monkeypatch, home, capsys):
    """`random-seed = false` drops demo/baseline's `--random-seed 0` (false omits a flag): the check expected
    the field to read False and refused the recipe ("random_seed: expected False, ... parser says 593683230");
    sglang's default is what it gets, and the launch verifies. A boolean flag set false is still expected False."""
    proj = demo_project(tmp_path, monkeypatch)
    (proj / "recipes" / "demo" / "seed.toml").write_text(
        'extends = "demo/baseline"\n[server.args]\nrandom-seed = false\nenable-metrics = false\n')
    assert main(["run", "demo/seed", "--until", "verify"]) == 0, capsys.readouterr().err[-1500:]
    from toolkit.results.store import Store

    (run,) = Store(home / "results.sqlite").runs()
    assert run.status == "ok" and run.config_verified and run.server_info["enable_metrics"] is False
    assert "--random-seed" not in " ".join(run.server_argv)
