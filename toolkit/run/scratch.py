"""A launch's temporary files: one directory patchbench owns per server (or one-batch engine) launch,
removed when the launch ends, by patchbench after it stops the group or by the supervisor when
patchbench is gone (toolkit/run/supervisor.py `--scratch`).

sglang 0.5.23 writes into the system temp directory at every launch and removes it only at a clean
interpreter exit, which a server ended by signals never has: set_prometheus_multiproc_dir makes a
TemporaryDirectory of counter_*/gauge_*/histogram_*.db files (srt/utils/common.py:2825-2840), the ZMQ
endpoints are `ipc://` files of NamedTemporaryFile(delete=False) (srt/server_args.py:781-812,
srt/entrypoints/http_server.py:265), and torch's inductor writes precompiled headers under
gettempdir()/torchinductor_<user> whatever TORCHINDUCTOR_CACHE_DIR says (torch/_inductor/codecache.py
_HEADER_DIR). Measured here: ~10 entries in /tmp a launch (4 directories, 3 sockets, empty files).

So the launch gets TMPDIR (Python's tempfile reads it first) and PROMETHEUS_MULTIPROC_DIR in this
directory: an ambient PROMETHEUS_MULTIPROC_DIR shared by two servers would also mix their counters in
each one's /metrics (prometheus_client's multiprocess collector reads every file of the directory).
Inductor's header directory is linked to the env's own inductor cache: a per-env compile cache, as
before, not rebuilt at every launch.

The directory is the run's `tmp/` where that path is short enough for a Unix socket path under it
(sun_path holds 107 bytes: "ipc://<dir>/tmpXXXXXXXX" must fit), else `patchbench-<run id>` in the
system temp directory.
"""

from __future__ import annotations

import getpass
import os
import shutil
import tempfile
from pathlib import Path
from typing import Mapping

MAX_LEN = 80  # a socket under it ("/tmp" + 8 random characters) stays well inside sun_path's 107 bytes
PROMETHEUS = "prometheus"


def path_for(run_dir: Path) -> Path:
    """The launch's scratch directory: `run_dir/tmp`, or `<system temp>/patchbench-<run id>` when that is
    too long for the sockets sglang makes in it."""
    own = Path(run_dir).absolute() / "tmp"
    if len(str(own)) <= MAX_LEN:
        return own
    return Path(tempfile.gettempdir()) / f"patchbench-{Path(run_dir).name[:16]}"


def variables(path: Path) -> dict[str, str]:
    """The launch's variables that point into its scratch directory."""
    return {"TMPDIR": str(path), "PROMETHEUS_MULTIPROC_DIR": str(Path(path) / PROMETHEUS)}


def _user(environ: Mapping[str, str]) -> str:
    """getpass.getuser() as the server will compute it from its environment."""
    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        if environ.get(name):
            return environ[name]
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid_{os.getuid()}"


def prepare(path: Path, environ: Mapping[str, str]) -> None:
    """Create the scratch directory (again, for a relaunch) with its prometheus/ and the link of
    inductor's header directory to the env's inductor cache (TORCHINDUCTOR_CACHE_DIR, when set)."""
    path = Path(path)
    (path / PROMETHEUS).mkdir(parents=True, exist_ok=True)
    inductor = environ.get("TORCHINDUCTOR_CACHE_DIR")
    link = path / f"torchinductor_{_user(environ)}"
    if inductor and not link.is_symlink():
        Path(inductor).mkdir(parents=True, exist_ok=True)
        link.symlink_to(Path(inductor).absolute(), target_is_directory=True)


def remove(path: Path | None) -> None:
    """Remove the scratch directory and all in it (links are removed, never followed)."""
    if path is not None:
        shutil.rmtree(path, ignore_errors=True)
