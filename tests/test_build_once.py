"""Shared state built once for concurrent callers (toolkit.build_once): the mini releases the demos
and the history/bisect tests share, and every cached venv or tree of the test suite."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO_ROOT

MINI_RELEASES = REPO_ROOT / "upstream" / "mini_releases.py"

# A build that records who ran it, then takes long enough for a second caller to arrive meanwhile.
BUILDER = """
import os, sys, time
from pathlib import Path
from toolkit.build_once import build_once
dest, log, hold = Path(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3])
def build(tmp):
    with log.open("a") as fh:
        fh.write(f"{os.getpid()}\\n")
    (tmp / "part").write_text("half")
    time.sleep(hold)  # the build's own work, as slow as a real one, so the callers overlap
    (tmp / "done").write_text("complete")
out = build_once(dest, build, complete=lambda d: (d / "done").is_file())
print(out, (out / "done").read_text(), flush=True)
"""


def _builder(dest: Path, log: Path, hold: float) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", BUILDER, str(dest), str(log), str(hold)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT)


def test_two_processes_build_one_destination_once(tmp_path):
    dest, log = tmp_path / "shared", tmp_path / "builders.log"
    procs = [_builder(dest, log, 1.5) for _ in range(2)]
    outs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert {o[0].strip() for o in outs} == {f"{dest} complete"}
    assert len(log.read_text().split()) == 1  # the second caller waited and reused the first's build
    assert sorted(p.name for p in tmp_path.iterdir()) == [".shared.lock", "builders.log", "shared"]


def test_a_killed_build_leaves_nothing_a_later_caller_trusts(tmp_path):
    dest, log = tmp_path / "shared", tmp_path / "builders.log"
    first = _builder(dest, log, 60)
    deadline = time.monotonic() + 30
    while not any(tmp_path.glob(".tmp-shared-*/part")):
        assert time.monotonic() < deadline and first.poll() is None, first.communicate()
        time.sleep(0.05)
    first.send_signal(signal.SIGKILL)
    first.wait()
    assert not dest.exists()  # the half-made build was never published
    second = _builder(dest, log, 0)
    out, err = second.communicate(timeout=60)
    assert second.returncode == 0, err
    assert out.strip() == f"{dest} complete"
    assert len(log.read_text().split()) == 2  # rebuilt, not trusted
    assert not list(tmp_path.glob(".tmp-*"))  # and the dead builder's leftovers are gone


def test_a_failed_build_publishes_nothing(tmp_path):
    from toolkit.build_once import build_once

    def build(tmp: Path) -> None:
        (tmp / "part").write_text("half")
        raise RuntimeError("compiler crashed")

    with pytest.raises(RuntimeError, match="compiler crashed"):
        build_once(tmp_path / "shared", build, complete=lambda d: (d / "done").is_file())
    assert sorted(p.name for p in tmp_path.iterdir()) == [".shared.lock"]


def test_mini_releases_built_by_two_processes_at_once_are_one_complete_build(tmp_path):
    dest = tmp_path / "releases"
    argv = [sys.executable, str(MINI_RELEASES), str(dest), "--plant", "regression", "--at", "0.1.1",
            "--releases", "3"]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
    metas = [json.loads(o[0]) for o in outs]
    assert metas[0] == metas[1]
    meta = metas[0]
    assert meta["repo"] == str(dest / "repo") and meta["versions"] == ["0.1.0", "0.1.1", "0.1.2"]
    tags = subprocess.run(["git", "tag"], cwd=dest / "repo", capture_output=True, text=True, check=True).stdout
    assert tags.split() == meta["tags"]
    wheels = sorted(p.name for p in (dest / "dist").glob("*.whl"))
    assert wheels == [f"sglang-{v}-py3-none-any.whl" for v in meta["versions"]]
    page = (dest / "index" / "sglang" / "index.html").read_text()
    assert all(w in page for w in wheels)
    assert not list(tmp_path.glob(".tmp-*"))
