"""`nox -s tests` keeps bytecode, in its own folder: on a box with PYTHONDONTWRITEBYTECODE=1 every test
worker and every Python the tests start compiled its sources afresh (collection: 11 CPU-s a worker
instead of 3.3), and nothing may appear in the source trees the tests hash."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import REPO_ROOT


def _noxfile():
    pytest.importorskip("nox")
    spec = importlib.util.spec_from_file_location("project_noxfile_bytecode", REPO_ROOT / "noxfile.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_tests_session_writes_bytecode_to_its_own_folder_not_beside_the_sources(tmp_path, monkeypatch):
    venv = tmp_path / "venv"
    prefix = venv / "pycache"
    uv_cache = Path("/var/cache/patchbench-test-uv")  # only its mirror under the prefix is made
    monkeypatch.setenv("UV_CACHE_DIR", str(uv_cache))
    kept = prefix / "work" / "repo" / "__init__.cpython-311.pyc"  # the repository's own: kept
    stale = prefix / Path(tempfile.gettempdir()).resolve().relative_to("/") / "old-scratch" / "m.pyc"
    # setuptools in a `uv build`'s isolated env, under a new name in uv's cache at every build: dropped
    build_env = prefix / uv_cache.relative_to("/") / "builds-v0" / ".tmpAbC123" / "setuptools" / "dist.cpython-311.pyc"
    uv_kept = prefix / uv_cache.relative_to("/") / "archive-v0" / "x" / "m.cpython-311.pyc"
    for f in (kept, stale, build_env, uv_kept):
        f.parent.mkdir(parents=True)
        f.write_bytes(b"x")

    env = _noxfile()._bytecode_cache(SimpleNamespace(virtualenv=SimpleNamespace(location=str(venv))))

    assert env == {"PYTHONPYCACHEPREFIX": str(prefix), "PYTHONDONTWRITEBYTECODE": ""}
    assert kept.is_file() and not stale.exists()  # the last session's scratch trees are never seen again
    assert not build_env.exists() and uv_kept.is_file()  # nor uv's build envs, each used once
    src = tmp_path / "src"
    src.mkdir()
    (src / "mod.py").write_text("X = 1\n")
    proc = subprocess.run([sys.executable, "-c", "import sys, mod; print(sys.dont_write_bytecode)"],
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(src), **env},
                          capture_output=True, text=True, cwd=src)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"
    assert list(prefix.rglob("mod.*.pyc")), "no bytecode under the session's folder"
    assert not (src / "__pycache__").exists(), "bytecode written beside the sources"
