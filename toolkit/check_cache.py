"""The static check, remembered: a repeat with the same env, server arguments and target is free.

`sglang_args.static_check` imports the env's sglang to parse the recipe's arguments (40-70 s for a
real sglang). Its outcome is a function of the env (its key names every package in it), the
argument vector, the expectations, the model's config, the target device and the probe program
itself; the sha256 of those is the cache key, and the outcome is stored as JSON under
`PATCHBENCH_HOME/checks/<key[:32]>.json`. A check that raises (unknown flags, a broken env) is
not stored: it runs again next time and says why again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path

from toolkit.envs import Env
from toolkit.sglang_args import PROBE, StaticCheck, recipe_args, static_check
from toolkit.spec import canonical_json

SCHEMA = 1


def _file_sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def check_key(env: Env, server, expect: dict, *, model: str | None, device: str | None) -> str:
    """What the check's outcome depends on. The model enters by its config.json's content (the
    check may run against a stand-in directory at a temporary path)."""
    config = _file_sha256(Path(model) / "config.json") if model and Path(model).is_dir() else None
    doc = {
        "schema": SCHEMA,
        "env": env.key,
        "args": recipe_args(server),
        "model": config or model,
        "expect": expect,
        "device": device,
        "probe": _file_sha256(PROBE),
    }
    return hashlib.sha256(canonical_json(doc).encode()).hexdigest()


def cached_static_check(env: Env, server, expect: dict, home: Path, *, model: str | None = None,
                        device: str | None = None, timeout: float = 300) -> tuple[StaticCheck, bool]:
    """`static_check` in `env`, or its stored outcome for the same inputs. Returns (check, reused)."""
    path = Path(home) / "checks" / f"{check_key(env, server, expect, model=model, device=device)[:32]}.json"
    try:
        return StaticCheck(**json.loads(path.read_text())), True
    except (OSError, ValueError, TypeError):
        pass
    check = static_check(env.python, server, expect, environ=env.run_environ(), model=model,
                         device=device, timeout=timeout)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(dataclasses.asdict(check), indent=1, sort_keys=True, default=str) + "\n")
    os.replace(tmp, path)
    return check, False
