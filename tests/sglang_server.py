"""Real sglang 0.5.23 serving on this CPU, as a pytest fixture: `real_sglang_url` yields the base URL
of a server launched once per module on patchbench's tiny GLM-4-MoE.

The env is recipes/cpu/baseline's, built by patchbench itself into the shared test home (its env
builder locks and publishes by rename, so concurrent sessions share one build); the model is
toolkit.models.tiny's (same guarantee). Launch to ready takes 40-140 s on 2 shared cores. A probe
that takes a base URL (tests/contract_probes.py) can be parametrized over this and the miniature.
"""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from conftest import TEST_CACHE  # noqa: E402

SHARED_HOME = TEST_CACHE  # conftest: one shared cache for every test
RECIPE = "cpu/baseline"
MODEL = "tiny-glm4-moe"
READY_TIMEOUT_S = 1800
ARGS = ("--device", "cpu", "--attention-backend", "torch_native", "--max-total-tokens", "8192",
        "--random-seed", "0")


def real_env_python(home: Path = SHARED_HOME) -> Path:
    """The python of recipes/cpu/baseline's env (built on first use)."""
    from toolkit.cli import main

    home.mkdir(parents=True, exist_ok=True)
    out = io.StringIO()
    with redirect_stdout(out):
        rc = main(["build", RECIPE, "--json", "--home", str(home)])
    if rc != 0:
        pytest.fail(f"patchbench build {RECIPE} failed (exit {rc})")
    return Path(json.loads(out.getvalue())["env"]) / "bin" / "python"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health_generate", timeout=30) as r:
            return r.status == 200
    except OSError:
        return False


class RealServer:
    def __init__(self, python: Path, model: Path, log: Path, env: dict[str, str] | None = None,
                 extra_args: tuple[str, ...] = ()):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        environ = {**os.environ, "SGLANG_USE_CPU_ENGINE": "1", **(env or {})}
        from toolkit.run import supervisor

        # under patchbench's supervisor (its own process group, ended when this test process dies, even by
        # SIGKILL): a pytest worker killed mid-test left its real sglang serving, a core busy, for good
        self.proc = supervisor.spawn([str(python), "-m", "sglang.launch_server", "--model-path", str(model), *ARGS,
                                      *extra_args, "--host", "127.0.0.1", "--port", str(self.port)],
                                     log=log, environ=environ)

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> float:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout_s:
            if self.proc.poll() is not None:
                pytest.fail(f"real sglang exited ({self.proc.returncode}) before ready; log {self.log}:\n"
                            + self.log.read_text(errors="replace")[-2000:])
            if _healthy(self.url):
                return time.monotonic() - t0
            time.sleep(2)
        self.stop()
        pytest.fail(f"real sglang not ready within {timeout_s} s; log {self.log}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def _fidelity_metrics_args() -> tuple[str, ...]:
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "client_fidelity.py"
    spec = importlib.util.spec_from_file_location("client_fidelity_for_fixture", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return tuple(mod.SERVER_METRICS_ARGS)


@pytest.fixture(scope="module")
def real_sglang(tmp_path_factory):
    """A started RealServer (url, log) on the tiny MoE, its metrics on as benchmarks/client_fidelity.py
    --real launches it; stopped after the module."""
    from toolkit.models import tiny

    python = real_env_python()
    model = tiny.ensure(MODEL, SHARED_HOME)
    server = RealServer(python, model, tmp_path_factory.mktemp("real-sglang") / "server.log",
                        extra_args=_fidelity_metrics_args())
    server.ready_s = server.wait_ready()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def real_sglang_url(real_sglang) -> str:
    return real_sglang.url


def real_server_url(tmp_path: Path):
    """A factory for tests/test_server_contract.py's SERVERS: real sglang on the tiny MoE, yielding
    its base URL. Skipped unless PATCHBENCH_SLOW=1 (the env is ~2 GB and a launch takes minutes)."""
    if os.environ.get("PATCHBENCH_SLOW") != "1":
        pytest.skip("real sglang on CPU: set PATCHBENCH_SLOW=1 (CI does)")
    from toolkit.models import tiny

    server = RealServer(real_env_python(), tiny.ensure(MODEL, SHARED_HOME), tmp_path / "server.log",
                        extra_args=("--enable-metrics",))
    try:
        server.wait_ready()
        yield server.url
    finally:
        server.stop()
