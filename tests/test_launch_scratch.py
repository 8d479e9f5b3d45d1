"""A launch's temporary files live in a directory patchbench owns and removes when the launch ends,
whether the run finishes or patchbench is killed (toolkit/run/scratch.py). Real sglang 0.5.23 leaves
its prometheus counter directory, its ipc:// sockets and empty temp files in /tmp at every launch it
does not end cleanly; here the miniature's server stands in for it, the test writing what sglang would
into the TMPDIR and PROMETHEUS_MULTIPROC_DIR the server was given."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from conftest import REPO_ROOT, demo_project


def _start_run(proj: Path, home: Path, recipe: str, log: Path, systmp: Path) -> subprocess.Popen:
    """`patchbench run RECIPE --repeats 1` in its own process, the system temp dir at `systmp`."""
    with log.open("w") as out:
        return subprocess.Popen([sys.executable, "-m", "toolkit", "run", recipe, "--repeats", "1"], cwd=proj,
                                env={**os.environ, "PATCHBENCH_HOME": str(home), "PYTHONPATH": str(REPO_ROOT),
                                     "TMPDIR": str(systmp)},
                                stdout=subprocess.DEVNULL, stderr=out)


def _server_environ(home: Path, cli: subprocess.Popen, log: Path) -> tuple[psutil.Process, dict]:
    """The launched server (its process and environment), once its scratch directory exists."""
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and cli.poll() is None:
        for p in psutil.process_iter(["cmdline"]):
            cmd = " ".join(p.info["cmdline"] or [])
            if "sglang.launch_server" in cmd and str(home / "envs") in cmd and "supervisor.py" not in cmd:
                try:
                    env = p.environ()
                except psutil.Error:
                    continue
                if Path(env.get("TMPDIR", "/nonexistent")).is_dir():
                    return p, env
        time.sleep(0.1)
    raise AssertionError(f"no server seen: {log.read_text()}")


def _write_as_sglang(env: dict) -> Path:
    """What sglang 0.5.23 writes at a launch: a counter file in a TemporaryDirectory under
    PROMETHEUS_MULTIPROC_DIR, and an ipc:// file of NamedTemporaryFile(delete=False) in TMPDIR."""
    scratch = Path(env["TMPDIR"])
    counters = Path(env["PROMETHEUS_MULTIPROC_DIR"]) / "tmpcounters"
    counters.mkdir()
    (counters / "counter_4242.db").write_bytes(b"\0" * 64)
    (scratch / "tmpipcsocket").write_bytes(b"")
    return scratch


def _recipe(proj: Path, name: str, startup_s: int) -> None:
    (proj / "recipes" / "demo" / f"{name}.toml").write_text(
        f'extends = "demo/baseline"\n[server.args]\nmini-startup-s = {startup_s}\n[quality]\nlaunches = 0\n')


def test_a_launch_keeps_its_temporary_files_in_a_directory_it_removes(home, tmp_path, monkeypatch):
    proj = demo_project(tmp_path, monkeypatch)
    _recipe(proj, "scratch", 2)
    systmp = tmp_path / "systmp"
    systmp.mkdir()
    log = tmp_path / "run.log"
    cli = _start_run(proj, home, "demo/scratch", log, systmp)
    try:
        server, env = _server_environ(home, cli, log)
        scratch = _write_as_sglang(env)
        run_dir = next((home / "runs").iterdir())
        # the run's own tmp/, or (a long home: sockets must fit sun_path) patchbench-<run id> in the system temp dir
        assert scratch in (run_dir / "tmp", systmp / f"patchbench-{run_dir.name[:16]}"), (scratch, run_dir)
        assert Path(env["PROMETHEUS_MULTIPROC_DIR"]).parent == scratch
        # torch inductor's precompiled headers (gettempdir()/torchinductor_<user>) stay in the env's own cache
        link = next(scratch.glob("torchinductor_*"))
        assert link.resolve() == Path(env["TORCHINDUCTOR_CACHE_DIR"]).resolve()
        assert cli.wait(timeout=300) == 0, log.read_text()
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
    assert not scratch.exists(), sorted(p.name for p in scratch.rglob("*"))
    assert Path(env["TORCHINDUCTOR_CACHE_DIR"]).is_dir()  # the link went, not the env's cache
    assert (run_dir / "server.log").is_file()  # the run's own files stay
    assert not list(systmp.glob("patchbench-*")), list(systmp.iterdir())


def test_a_sigkilled_patchbench_leaves_no_temporary_files_of_its_launch(home, tmp_path, monkeypatch):
    proj = demo_project(tmp_path, monkeypatch)
    _recipe(proj, "scratchkill", 30)  # killed while the server starts
    systmp = tmp_path / "systmp"
    systmp.mkdir()
    log = tmp_path / "run.log"
    cli = _start_run(proj, home, "demo/scratchkill", log, systmp)
    try:
        server, env = _server_environ(home, cli, log)
        scratch = _write_as_sglang(env)
        os.kill(cli.pid, signal.SIGKILL)
        cli.wait()
        # the supervisor ends the group (SIGTERM, SIGKILL after its 2 s grace), then removes the directory
        deadline = time.monotonic() + 30
        while (scratch.exists() or server.is_running()) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
    assert "server ready" not in log.read_text()
    assert not server.is_running() or server.status() == psutil.STATUS_ZOMBIE
    assert not scratch.exists(), sorted(p.name for p in scratch.rglob("*"))


# A server's process that maps shared memory and holds a named semaphore, as sglang 0.5.23's scheduler
# does (/dev/shm/sglang_loads_<instance>.shm, srt/managers/load_snapshot.py:303; multiprocessing's
# sem.mp-* under the spawn context), and that is slow to exit on SIGTERM: killed before its own cleanup.
SERVER = r'''
import mmap, multiprocessing, os, signal, sys, time, uuid
crash = sys.argv[2] == "crash"
signal.signal(signal.SIGTERM, signal.SIG_IGN)
path = f"/dev/shm/sglang_loads_{uuid.uuid4().hex[:12]}_test.shm"
fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
os.ftruncate(fd, 4096)
mem = mmap.mmap(fd, 4096)
lock = multiprocessing.get_context("spawn").Lock()  # registered with its resource tracker, which unlinks it
sem = "/dev/shm/sem." + lock._semlock.name.lstrip("/")
open(sys.argv[1], "w").write(path + "\n" + sem)
if crash:  # dies a few seconds in, its shared memory left mapped to nobody (its loader crashed)
    time.sleep(4)
    os._exit(1)
time.sleep(600)
'''

PATCHBENCH = r'''
import sys, time
from toolkit.run import supervisor
supervisor.spawn([sys.executable, "-c", sys.argv[1], sys.argv[2], sys.argv[5]], log=sys.argv[3],
                 environ=dict(__import__("os").environ), scratch=sys.argv[4])
time.sleep(600)
'''


@pytest.mark.parametrize("how", ["killed", "crash"])
def test_a_launch_leaves_no_shared_memory_of_its_server(tmp_path, how):
    """Measured on real sglang 0.5.23 (cpu/baseline): a launch whose patchbench was SIGKILLed after the
    benchmark left /dev/shm/sglang_loads_<id>.shm and a sem.mp-* behind, a launch that crashed at model
    load (an fp8 KV cache on CPU) its sglang_loads file (~290 such files and semaphores had accumulated
    here); the supervisor now removes what the group had mapped and made, once the group is gone."""
    names, scratch = tmp_path / "names", tmp_path / "scratch"
    scratch.mkdir()
    owner = subprocess.Popen([sys.executable, "-c", PATCHBENCH, SERVER, str(names), str(tmp_path / "server.log"),
                              str(scratch), how], cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    try:
        deadline = time.monotonic() + 60
        while not (names.exists() and names.read_text()) and time.monotonic() < deadline:
            time.sleep(0.1)
        made = [Path(p) for p in names.read_text().split()]
        assert made and all(p.exists() for p in made), made
        assert any(p.name.startswith("sem.mp-") for p in made), made
        if how == "crash":  # the server exits by itself; patchbench (here: asleep) stops nothing
            deadline = time.monotonic() + 30
            while any(p.exists() for p in made) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert not [p for p in made if p.exists()], (tmp_path / "server.log").read_text()
    finally:
        owner.kill()  # patchbench dies: the supervisor ends the group
        owner.wait()
    deadline = time.monotonic() + 20
    while any(p.exists() for p in made) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in made if p.exists()], (tmp_path / "server.log").read_text()
    assert not scratch.exists()
