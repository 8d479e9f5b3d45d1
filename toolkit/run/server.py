"""Server lifecycle: launch `python -m sglang.launch_server` from an env, wait, inspect, tear down.

The server runs under toolkit/run/supervisor.py in its own process group (session) with its output in
a log file: the supervisor ends the group when patchbench dies, even by SIGKILL. Teardown kills the
whole group and any descendant that escaped it, on success, on errors and on Ctrl-C. A port in use
or a host that cannot be bound is found before the launch (`check_bindable`), and a crash is
summarised by the exception line of its log.
"""

from __future__ import annotations

import errno
import json
import os
import re
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import psutil

from toolkit.run import scratch as scratch_dir, supervisor
from toolkit.errors import PatchbenchError

CRASH_PATTERNS = re.compile(
    r"CUDA error|cudaError\w*|illegal memory access|out of memory|Traceback \(most recent call last\)|"
    r"Segmentation fault|core dumped|NCCL error",
)

# wait_ready asks /health_generate every READY_POLL_S for the first READY_FINE_S of a launch, then every
# supervisor.POLL_S (real sglang loads for a minute or more). The miniature is ready 0.1-0.3 s after its
# spawn: polled every 0.2 s from the start, a launch waited up to 0.2 s more than its server needed (0.1
# on average), in its "ready in" and before its benchmark. A refused connection costs well under a ms.
READY_POLL_S = 0.02
READY_FINE_S = 3.0


class ServerFailed(PatchbenchError):
    """The server exited, crashed or hung; carries the log tail."""

    def __init__(self, message: str, *, log: Path, tail: str, kind: str):
        super().__init__(message, log=log)
        self.tail = tail
        self.kind = kind  # exited | crashed | hung


# The last line of a Python traceback ("OSError: [Errno 98] Address already in use") or a CUDA line.
EXCEPTION_LINE = re.compile(r"^(?:[\w.]+\.)?\w*(?:Error|Exception|Interrupt|Exit)\b(?::.*)?$|CUDA error.*|NCCL error.*")


class BindError(PatchbenchError):
    """The server's host/port cannot be bound (in use, or not an address of this machine)."""


class PortTaken(ServerFailed):
    """Another process answered on the server's port before it could bind (a race for a free port)."""


def _bind(host: str, port: int) -> int:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise BindError(f"host {host} cannot be bound: {exc.strerror or exc}") from None
    family, _, _, _, addr = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers do: TIME_WAIT is no conflict
        try:
            s.bind(addr)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise BindError(f"port {port} on {host} is in use") from None
            raise BindError(f"host {host} cannot be bound: {exc.strerror or exc}") from None
        return s.getsockname()[1]


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on `host` now. Raises BindError when the host cannot be bound."""
    return _bind(host, 0)


def check_bindable(host: str, port: int) -> None:
    """Raise BindError ("port 30000 on 127.0.0.1 is in use") unless the server could bind there."""
    _bind(host, port)


def in_use_line(tail: str) -> str | None:
    """The log line saying the port was taken: Python's "OSError: [Errno 98] Address already in use" or
    uvicorn's "[Errno 98] error while attempting to bind on address (...): address already in use"."""
    return next((ln.strip() for ln in reversed(tail.splitlines()) if "address already in use" in ln.lower()), None)


def crash_line(tail: str) -> str | None:
    """The line that says why a server died: the last exception line of a traceback, else the last
    CUDA/NCCL error line, else None."""
    for line in reversed(tail.splitlines()):
        line = line.strip()
        if line and EXCEPTION_LINE.match(line):
            return line[:300]
    return None


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 64 * 1024))
            data = fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(data.splitlines()[-lines:])


@dataclass
class Server:
    argv: list[str]
    host: str
    port: int
    log: Path
    proc: subprocess.Popen
    started: float = field(default_factory=time.monotonic)
    scratch: Path | None = None  # the launch's temporary files (toolkit.run.scratch), removed by stop()
    _descendants: set = field(default_factory=set)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    # -------------------------------------------------------------------------------- lifecycle

    def _remember_children(self) -> set:
        """Add the server's descendants now to those seen; return them (psutil reads every process's
        /proc/PID/stat to find them: a few ms of CPU on a busy box)."""
        try:
            now = {child.pid for child in psutil.Process(self.proc.pid).children(recursive=True)}
        except psutil.Error:
            return set()
        self._descendants |= now
        return now

    def check_alive(self, wait: float = 0.0) -> None:
        """Raise ServerFailed if the server exited. With `wait` (after requests failed), give a
        dying server that long to exit, and count a crash line in its log as a crash even if the
        process is still tearing down: the client often sees the connection drop first."""
        if wait:
            try:
                self.proc.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                pass
        code = self.proc.poll()
        tail = log_tail(self.log)
        m = CRASH_PATTERNS.search(tail)
        if code is None and not (wait and m):
            return
        line = crash_line(tail)
        in_use = in_use_line(tail)
        if in_use:
            raise ServerFailed(f"port {self.port} on {self.host} is in use ({in_use})", log=self.log, tail=tail,
                               kind="exited")
        if m:
            raise ServerFailed(f"server crashed: {line or m.group(0)}", log=self.log, tail=tail, kind="crashed")
        why = f"exited with code {code}" + (f": {line}" if line else "")
        raise ServerFailed(f"server {why}", log=self.log, tail=tail, kind="exited")

    def wait_ready(self, timeout: float) -> float:
        """Poll /health_generate until 200 from this server; return seconds taken. Raise PortTaken
        when the answer came from another process listening on the port (it took the port between
        `free_port` and this server's bind, while this one was still loading), ServerFailed otherwise."""
        deadline = time.monotonic() + timeout
        scan = supervisor.Scan()  # the supervisor's schedule: real sglang loads for minutes, its tree settles early
        while time.monotonic() < deadline:
            self.check_alive()
            if scan.due(time.monotonic()):
                scan.scanned(time.monotonic(), self._remember_children())
            try:
                with urllib.request.urlopen(f"{self.url}/health_generate", timeout=10) as resp:
                    if resp.status == 200:
                        other = self.foreign_listener()
                        if other is not None:
                            raise PortTaken(f"port {self.port} on {self.host} answered from another process "
                                            f"(pid {other[0]} {other[1]}) while this server was starting",
                                            log=self.log, tail=log_tail(self.log), kind="port taken")
                        return time.monotonic() - self.started
            except (urllib.error.URLError, OSError, TimeoutError):
                pass
            elapsed = time.monotonic() - self.started
            time.sleep(READY_POLL_S if elapsed < READY_FINE_S else supervisor.POLL_S)
        raise ServerFailed(f"server not ready after {timeout:.0f} s (hang)", log=self.log,
                           tail=log_tail(self.log), kind="hung")

    def foreign_listener(self) -> tuple[int, str] | None:
        """(pid, name) of a process outside this server's tree listening on its port, or None (the
        listener is ours, or the listener's pid cannot be seen: another user's, no permission)."""
        self._remember_children()
        ours = {self.proc.pid, *self._descendants}
        try:
            pids = {c.pid for c in psutil.net_connections(kind="tcp")
                    if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == self.port}
        except (psutil.Error, OSError):
            return None
        known = sorted(p for p in pids if p is not None)
        if not known or set(known) & ours:
            return None
        try:
            name = psutil.Process(known[0]).name()
        except psutil.Error:
            name = "?"
        return (known[0], name)

    def server_info(self) -> dict:
        """GET /server_info, falling back to the old /get_server_info."""
        last = None
        for path in ("/server_info", "/get_server_info"):
            try:
                with urllib.request.urlopen(f"{self.url}{path}", timeout=30) as resp:
                    return json.loads(resp.read())
            except urllib.error.HTTPError as exc:
                last = f"{path}: HTTP {exc.code}"
            except (urllib.error.URLError, OSError, ValueError) as exc:
                last = f"{path}: {exc}"
        self.check_alive()
        raise PatchbenchError(f"server gave no server info ({last})", log=self.log)

    def stop(self, grace: float = 15.0) -> None:
        """Kill the process group and every descendant seen; wait until none is alive; remove the
        launch's scratch directory."""
        self._remember_children()
        procs = []
        for pid in {self.proc.pid, *self._descendants}:
            try:
                procs.append(psutil.Process(pid))
            except psutil.Error:
                pass
        supervisor.end_group(self.proc.pid, procs, grace)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        scratch_dir.remove(self.scratch)

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


PORT_TRIES = 3  # launches when another process takes the free port patchbench picked before the server binds it


def launch_ready(python: Path, args_for: Callable[[int], list[str]], *, host: str, port: int | None, log: Path,
                 environ: dict, timeout_s: float, started: Callable[[Server], None] | None = None,
                 retrying: Callable[[PortTaken], None] | None = None, scratch: Path | None = None) -> Server:
    """Launch the server on `port` (None: a free one) and wait until it is ready. When another
    process answers on a picked free port first (PortTaken: a race between two launches on one box),
    stop this server and launch again on a new free port, at most PORT_TRIES launches; a fixed
    `port` is not retried. `args_for(port)` gives the server's arguments, `started(server)` runs
    after each spawn (the caller's supervisor), `retrying(exc)` before another try. A server that
    fails to become ready is stopped; the error is raised."""
    for tries_left in range(PORT_TRIES - 1, -1, -1):
        picked = port or free_port(host)
        server = launch(python, args_for(picked), host=host, port=picked, log=log, environ=environ, scratch=scratch)
        try:
            if started is not None:
                started(server)
            server.wait_ready(timeout_s)
            return server
        except PortTaken as exc:
            server.stop()
            if port or not tries_left:
                raise
            if retrying is not None:
                retrying(exc)
        except BaseException:
            server.stop()
            raise
    raise AssertionError("unreachable")


def launch(python: Path, args: list[str], *, host: str, port: int, log: Path, environ: dict,
           scratch: Path | None = None) -> Server:
    """Start `python -m sglang.launch_server ARGS` under the supervisor (its own process group, ended
    when patchbench dies), output to `log`; `scratch` (the directory environ's TMPDIR names) is created
    and removed when the server stops or patchbench dies. Raises BindError first if host:port cannot be bound."""
    check_bindable(host, port)
    argv = [str(python), "-m", "sglang.launch_server", *args]
    log.parent.mkdir(parents=True, exist_ok=True)
    try:
        if scratch is not None:
            scratch_dir.prepare(scratch, environ)
        proc = supervisor.spawn(argv, log=log, environ=environ, scratch=scratch)
    except OSError as exc:
        scratch_dir.remove(scratch)
        raise PatchbenchError(f"cannot start the server: {exc}", log=log) from None
    return Server(argv=argv, host=host, port=port, log=log, proc=proc, scratch=scratch)
