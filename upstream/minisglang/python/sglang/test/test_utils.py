"""Launch helpers for tests (same names as sglang's sglang/test/test_utils.py). Stdlib only.

    proc = popen_launch_server("/models/x", f"http://127.0.0.1:{port}", timeout=30,
                               other_args=["--ep-size", "2"], log_path="server.log")
    ...
    kill_process_tree(proc.pid)

The server runs in its own session (process group), with this miniature on PYTHONPATH, and the
helper waits for GET /health_generate to answer 200.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Optional, Sequence

PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the directory that holds sglang/


def find_free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _split_url(base_url: str):
    rest = base_url.split("://", 1)[-1].rstrip("/")
    host, _, port = rest.rpartition(":")
    return host, int(port)


def wait_ready(base_url: str, timeout: float, proc: Optional[subprocess.Popen] = None,
               log_path: Optional[str] = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            tail = Path(log_path).read_text()[-2000:] if log_path else ""
            raise RuntimeError(f"server exited with {proc.returncode} before it was ready\n{tail}")
        try:
            with urllib.request.urlopen(base_url + "/health_generate", timeout=5) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, OSError):
            pass
        time.sleep(0.05)
    raise TimeoutError(f"server at {base_url} not ready after {timeout} s")


def popen_launch_server(model: str, base_url: str, timeout: float,
                        other_args: Sequence[str] = (), env: Optional[dict] = None,
                        log_path: Optional[str] = None, python: str = sys.executable,
                        wait: bool = True,
                        package_root: Optional[str] = None) -> subprocess.Popen:
    """Start `python -m sglang.launch_server` in its own session (process group).

    `package_root` goes first on PYTHONPATH: None means this miniature's python/ directory, ""
    adds nothing (for a `python` whose env has sglang installed). Waits for /health_generate to
    answer 200 unless wait=False.
    """
    host, port = _split_url(base_url)
    cmd = [python, "-m", "sglang.launch_server", "--model-path", model, "--host", host,
           "--port", str(port), *other_args]
    env = dict(os.environ if env is None else env)
    root = str(PACKAGE_ROOT) if package_root is None else str(package_root)
    parts = [p for p in (root, env.get("PYTHONPATH", "")) if p]
    if parts:
        env["PYTHONPATH"] = os.pathsep.join(parts)
    out = open(log_path, "ab") if log_path else subprocess.DEVNULL
    try:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
    finally:
        if log_path:
            out.close()
    if wait:
        try:
            wait_ready(base_url, timeout, proc, log_path)
        except BaseException:
            kill_process_tree(proc.pid)
            raise
    return proc


def kill_process_tree(pid: int, grace_s: float = 5.0) -> None:
    """SIGTERM the process group led by `pid`, then SIGKILL what is left after `grace_s`."""
    try:
        pgid = os.getpgid(pid)
    except ProcessLookupError:
        return
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            break
        try:  # reap our own child so the group can empty
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        time.sleep(0.05)
    else:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass
