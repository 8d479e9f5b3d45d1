"""Every shipped recipe applies to the real PyPI artifacts, builds its env (the CPU part) and passes
the static config check with the pinned sglang's own parser; the OEA tests pass against the patched
sglang installed in the `oea` recipe's env. Slow: full sglang envs (uv, ~41 s first, then hardlinks)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO_ROOT
from toolkit.cli import main

pytestmark = pytest.mark.slow

SHARED_HOME = Path(os.environ.get("PATCHBENCH_TEST_HOME", Path.home() / ".cache" / "patchbench-test"))
SHIPPED = ["baseline", "ep8", "sbo", "oea", "tiles", "arch-120f", "full-stack", "sglang-0.5.10"]


def test_every_shipped_recipe_is_tested():
    names = sorted(p.stem for p in (REPO_ROOT / "recipes").glob("*.toml"))
    assert names == sorted(SHIPPED)


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_recipe_passes_static_check(name, capsys):
    SHARED_HOME.mkdir(parents=True, exist_ok=True)
    # --frozen: the committed lock (artifact sha256s, patch sha256s) still describes what is built
    assert main(["run", name, "--until", "check", "--frozen", "--home", str(SHARED_HOME)]) == 0, capsys.readouterr().err
    assert main(["patches", "check", name, "--home", str(SHARED_HOME), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["patches"]
    assert all(r["status"] == "applies" for r in rows)


def test_oea_tests_pass_against_the_recipe_env(tmp_path, capsys):
    """tests/test_oea.py, run by the `oea` env's own interpreter on the sglang installed there."""
    from toolkit.pipeline import prepare
    from toolkit.recipe import load_recipe

    p = prepare(load_recipe("oea"), SHARED_HOME, until="build")
    site = subprocess.run([str(p.env.python), "-c", "import sglang, os; print(os.path.dirname(os.path.dirname(sglang.__file__)))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    assert (Path(site) / "sglang/srt/layers/moe/oea.py").is_file(), "the env's sglang lacks the OEA module"
    # pytest for the env's interpreter, outside the env (the env itself stays as built).
    tools = tmp_path / "pytest-site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--target", str(tools), "pytest"], check=True)
    env = {**p.env.run_environ(), "PYTHONPATH": str(tools), "PATCHBENCH_OEA_TREE": site}
    proc = subprocess.run([str(p.env.python), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           str(REPO_ROOT / "tests" / "test_oea.py")], capture_output=True, text=True, env=env,
                          cwd=REPO_ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and " skipped" not in proc.stdout.splitlines()[-1], proc.stdout[-500:]
