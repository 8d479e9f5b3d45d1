"""Where patchbench keeps things: `$PATCHBENCH_HOME` (default ~/.cache/patchbench).

  mirrors/    bare git mirrors, one per URL
  artifacts/  PyPI downloads by sha256 (+ index.json)
  trees/      patched source trees, one per (base, stack) key
  envs/       isolated envs, one per env key
  runs/       logs of server launches and benchmarks, one directory per run
  results.sqlite  the results store (overridable with --store / PATCHBENCH_STORE)
"""

from __future__ import annotations

import os
from pathlib import Path


def default_home() -> Path:
    env = os.environ.get("PATCHBENCH_HOME")
    return Path(env).expanduser().resolve() if env else Path.home() / ".cache" / "patchbench"


def resolve_home(arg: str | os.PathLike | None) -> Path:
    home = Path(arg).expanduser().resolve() if arg else default_home()
    try:
        home.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a file in the way, a path under /proc, no permission: one line naming it
        from toolkit.errors import BadInput

        what = "--home" if arg else ("$PATCHBENCH_HOME" if os.environ.get("PATCHBENCH_HOME") else "the home")
        raise BadInput(f"patchbench home {home} ({what}): cannot create it as a directory "
                       f"({exc.strerror or exc})") from None
    return home


def user_config_path(home: Path) -> Path:
    """The user config: `HOME/config.toml` when it exists, else `~/.config/patchbench/config.toml`
    (`$XDG_CONFIG_HOME` honoured). Its `[cluster]` table: toolkit/executors/config.py; `[store]`:
    toolkit/results/engine.py."""
    local = home / "config.toml"
    if local.is_file():
        return local
    base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return base / "patchbench" / "config.toml"
