"""A real, throwaway PostgreSQL cluster for the store tests (Debian's `postgresql` package).

`shared_server(root)` starts one cluster under `root` (initdb + pg_ctl, owned by a non-root user:
`postgres` when the tests run as root, else the current user) and hands every caller the same one:
pytest-xdist workers of one test run share it, counted under a file lock (toolkit/build_once's
lock), and the last one out stops it (`release`). It listens on a unix socket in its own directory
and on 127.0.0.1 (a free port, password auth: for the credentials tests); the socket trusts local
users. `new_database(server)` gives each test a database of its own.

`unavailable()` says why no cluster can start here (no binaries), so a fixture can skip outside CI
with that reason and fail in CI.
"""

from __future__ import annotations

import glob
import json
import os
import pwd
import shutil
import socket
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

from toolkit.build_once import lock_for

PASSWORD = "s3cret-pw"  # the `patchbench` role's, for the TCP listener (never a real one)


def bindir() -> Path | None:
    """The directory holding initdb/pg_ctl/postgres: PATH, else Debian's /usr/lib/postgresql/N/bin."""
    found = shutil.which("pg_ctl")
    if found and shutil.which("initdb"):
        return Path(found).resolve().parent
    for d in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if (Path(d) / "pg_ctl").is_file() and (Path(d) / "initdb").is_file():
            return Path(d)
    return None


def unavailable() -> str | None:
    if bindir() is None:
        return "PostgreSQL not installed (initdb/pg_ctl missing): apt-get install postgresql (.ci/run does)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no `postgres` user to own the test cluster"
    return None


@dataclass(frozen=True)
class Server:
    root: Path
    socket_dir: Path
    port: int
    user: str

    def url(self, database: str = "postgres", *, password: bool = False, tcp: bool = False) -> str:
        if tcp:
            auth = f"patchbench:{PASSWORD}" if password else "patchbench"
            return f"postgresql://{auth}@127.0.0.1:{self.port}/{database}"
        return f"postgresql://{self.user}@/{database}?host={self.socket_dir}&port={self.port}"


def _owner() -> tuple[str, dict]:
    """(user name, subprocess kwargs) of who owns and runs the cluster."""
    if os.geteuid() == 0:
        pw = pwd.getpwnam("postgres")
        return "postgres", {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}
    return pwd.getpwuid(os.geteuid()).pw_name, {}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(argv: list[str], kw: dict, cwd: Path) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=cwd, timeout=120, **kw)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:2])} failed: {(proc.stderr or proc.stdout).strip()[-2000:]}")


def _running(server: Server, kw: dict) -> bool:
    pg_isready = bindir() / "pg_isready"
    proc = subprocess.run([str(pg_isready), "-q", "-h", str(server.socket_dir), "-p", str(server.port)],
                          capture_output=True, timeout=30)
    return proc.returncode == 0


def _start(root: Path, durable: bool = False) -> Server:
    user, kw = _owner()
    data, sock = root / "data", root / "sock"
    meta = root / "server.json"
    bins = bindir()
    if not meta.is_file():
        shutil.rmtree(data, ignore_errors=True)
        for d in (root, sock):
            d.mkdir(parents=True, exist_ok=True)
            if kw:
                os.chown(d, kw["user"], kw["group"])
        pwfile = root / "pw"
        pwfile.write_text(PASSWORD + "\n")
        if kw:
            os.chown(pwfile, kw["user"], kw["group"])
        _run([str(bins / "initdb"), "-D", str(data), "-U", user, "--auth-local=trust", "--auth-host=reject",
              "-E", "UTF8", "--locale=C.UTF-8" if Path("/usr/lib/locale/C.utf8").exists() else "--locale=C",
              "--no-sync"], kw, root)
        port = _free_port()
        hba = data / "pg_hba.conf"
        hba.write_text("local all all trust\nhost all patchbench 127.0.0.1/32 scram-sha-256\n")
        with open(data / "postgresql.conf", "a") as f:
            f.write(f"\nport = {port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{sock}'\n"
                    "max_connections = 200\nshared_buffers = 64MB\n"
                    + ("" if durable else "fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n"))
        pwfile.unlink()
        server = Server(root, sock, port, user)
        meta.write_text(json.dumps({"port": port, "user": user, "users": 0}))
    info = json.loads(meta.read_text())
    server = Server(root, sock, info["port"], info["user"])
    if not _running(server, kw):
        _run([str(bins / "pg_ctl"), "-D", str(data), "-l", str(root / "server.log"), "-w", "-t", "60", "start"], kw, root)
        _setup_role(server)
    return server


def _setup_role(server: Server) -> None:
    import psycopg

    with psycopg.connect(server.url(), autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname = 'patchbench'").fetchone():
            conn.execute(f"CREATE ROLE patchbench LOGIN CREATEDB PASSWORD '{PASSWORD}'")


def shared_server(root: Path, *, durable: bool = False) -> Server:
    """The cluster under `root`, started if it is not running; counts this caller as a user.
    `durable`: fsync and synchronous commit on, as a real server runs (the tests turn them off)."""
    with lock_for(root):
        server = _start(root, durable)
        meta = root / "server.json"
        info = json.loads(meta.read_text())
        info["users"] = info.get("users", 0) + 1
        meta.write_text(json.dumps(info))
        return server


def release(server: Server) -> None:
    """One user fewer; the last stops the cluster (fast shutdown) and removes it."""
    root = server.root
    with lock_for(root):
        meta = root / "server.json"
        info = json.loads(meta.read_text())
        info["users"] = max(0, info.get("users", 1) - 1)
        meta.write_text(json.dumps(info))
        if info["users"] == 0:
            _, kw = _owner()
            subprocess.run([str(bindir() / "pg_ctl"), "-D", str(root / "data"), "-m", "fast", "-w", "stop"],
                           capture_output=True, timeout=120, cwd=root, **kw)
            shutil.rmtree(root, ignore_errors=True)


def new_database(server: Server, prefix: str = "t") -> str:
    """A fresh database (owned by the `patchbench` role); its socket URL."""
    import psycopg

    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server.url(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" OWNER patchbench')
    return server.url(name)
