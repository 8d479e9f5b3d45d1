"""The static check, remembered: a repeat with the same env, server arguments and target is free.

`sglang_args.check_recipe` imports the env's sglang to parse, validate and resolve the recipe's
arguments for its `[target]` (minutes for a real sglang on a small machine). Its outcome is a
function of the env (its key names every package in it), the argument vector, the recipe's
`[server.env]` (set for the probe as for the server: sglang reads variables such as
SGLANG_ENABLE_SPEC_V2 while resolving), the expectations, the model's config, the target's facts,
the device, and the programs that judge (the probe, the moved-value expectations, the model-shape
and release rules); the sha256 of those
is the cache key, and the outcome is stored as JSON under `PATCHBENCH_HOME/checks/<key[:32]>.json`.
A check that raises (sglang refuses, a shape rule breaks, a broken env) or that could not resolve
(outcome `unresolved: ...`) is not stored: it runs again next time and says why again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path

from toolkit.digest import sha256_file
from toolkit.envs import Env
from toolkit.run.sglang_args import PROBE, StaticCheck, check_recipe, recipe_args, stand_in_model
from toolkit.recipe.spec import canonical_json

SCHEMA = 3  # 3: outcome (unresolved is not a pass), [server.env] in the key
_HERE = Path(__file__).resolve().parent
# Every program that judges: the probe, the expectations sglang moves or divides (sglang_args), the
# model-shape rules, the release rules, and the layout both read.
_JUDGES = (PROBE, _HERE / "sglang_args.py", _HERE / "model_shape.py", _HERE / "release_rules.py",
           _HERE / "parallel_layout.py")


def _file_sha256(path: Path) -> str | None:
    try:
        return sha256_file(path)
    except OSError:
        return None


def check_key(env: Env, recipe, model: str | None, *, device: str | None) -> str:
    """What the check's outcome depends on. The model enters by its config.json's content (the
    check runs against a stand-in directory at a temporary path)."""
    from toolkit.recipe.target import target_facts

    config = _file_sha256(Path(model) / "config.json") if model and Path(model).is_dir() else None
    doc = {
        "schema": SCHEMA,
        "env": env.key,
        "args": recipe_args(recipe.server),
        "server_env": dict(recipe.server.env),
        "model": config or model,
        "expect": dict(recipe.expect),
        "target": target_facts(recipe.target) if recipe.target else None,
        "weights": recipe.roofline.get("weights"),
        "device": device,
        "judges": [_file_sha256(p) for p in _JUDGES],
    }
    return hashlib.sha256(canonical_json(doc).encode()).hexdigest()


def probe_environ(env: Env, recipe) -> dict:
    """The probe's environment: the env's, plus the recipe's `[server.env]` (what the server gets)."""
    return {**env.run_environ(), **{str(k): str(v) for k, v in dict(recipe.server.env).items()}}


def cached_check_recipe(env: Env, recipe, workdir: Path, home: Path, *,
                        device: str | None = None) -> tuple[StaticCheck, bool]:
    """`check_recipe` in `env`, or its stored outcome for the same inputs. Returns (check, reused)."""
    model, _ = stand_in_model(recipe, workdir)
    path = Path(home) / "checks" / f"{check_key(env, recipe, model, device=device)[:32]}.json"
    try:
        return StaticCheck(**json.loads(path.read_text())), True
    except (OSError, ValueError, TypeError):
        pass
    check = check_recipe(env.python, recipe, workdir, environ=probe_environ(env, recipe), device=device)
    if check.unresolved:
        return check, False  # not a pass: never remembered as one
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(dataclasses.asdict(check), indent=1, sort_keys=True, default=str) + "\n")
    os.replace(tmp, path)
    return check, False
