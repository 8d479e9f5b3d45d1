"""The miniature follows real sglang: the probes of tests/contract_probes.py (every route patchbench
calls, the fields it reads, streaming framing, /start_profile with and without num_steps, the
internal_states shape) run against every server in SERVERS. The miniature is always there; a real
sglang 0.5.23 CPU server is added as another entry (a factory with the same signature), so the same
probes judge both, and a probe that passes on one and fails on the other is a difference to fix."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import contract_probes as probes
from conftest import MINI_PY, base_torch_python, mini_env, mini_tu
from sglang_server import real_server_url

# One worker runs them all, so each server launches once (a real sglang launch takes minutes).
pytestmark = pytest.mark.xdist_group("server-contract")


def miniature(tmp_path: Path, python: Path | None = None, package: Path = MINI_PY):
    """A miniature server in an env with torch (its profiler records torch traces); yields the base URL."""
    python = python or base_torch_python()
    port = mini_tu.find_free_port()
    base = f"http://127.0.0.1:{port}"
    proc = mini_tu.popen_launch_server("/models/mini", base, 60, other_args=["--log-level", "info", "--enable-metrics"],
                                       env=mini_env(package), log_path=str(tmp_path / "server.log"),
                                       python=str(python), package_root=str(package))
    try:
        yield base
    finally:
        mini_tu.kill_process_tree(proc.pid)


# name -> factory(tmp_path) yielding a base URL. The real tier registers its server here.
SERVERS = {"miniature": miniature, "real-sglang-cpu": real_server_url}


@pytest.fixture(scope="module", params=sorted(SERVERS))
def base_url(request, tmp_path_factory):
    yield from SERVERS[request.param](tmp_path_factory.mktemp(f"contract-{request.param}"))


@pytest.mark.parametrize("probe", sorted(probes.PROBES))
def test_route(base_url, probe):
    probes.PROBES[probe](base_url)


@pytest.mark.parametrize("probe", sorted(probes.PROFILE_PROBES))
def test_profile_route(base_url, probe, tmp_path):
    probes.PROFILE_PROBES[probe](base_url, tmp_path)


def test_the_probe_sees_a_start_profile_that_blocks(tmp_path):
    """The probe is a check: a miniature whose /start_profile waits for the trace (as it used to, and
    as sglang 0.5.23 does not) fails it."""
    pkg = tmp_path / "python"
    shutil.copytree(MINI_PY, pkg, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"))
    server = pkg / "sglang" / "srt" / "entrypoints" / "http_server.py"
    text = server.read_text()
    old = "            self.scheduler.profiler.configure(req)\n"
    assert old in text
    server.write_text(text.replace(old, old + "            while self.scheduler.profiler.in_progress and req.num_steps:\n"
                                              "                await asyncio.sleep(0.01)\n"))
    gen = miniature(tmp_path, package=pkg)
    base = next(gen)
    try:
        with pytest.raises(AssertionError, match="must answer at once"):
            probes.start_profile_num_steps(base, tmp_path / "traces")
    finally:
        gen.close()
