"""Built wheels cached by the content of what produced them, shared by every env.

A tree's wheel is a function of the tree's content (its tree hash and project directory), the
build settings that reach the build's environment (arch lists, `build.env`), the interpreter
(version, implementation), nvcc, uv and the package sources its isolated build resolves from.
The sha256 of that document is the wheel's key; `PATCHBENCH_HOME/wheels/<key[:24]>/` holds the
wheel once built, published by one rename, so an env that needs the same build (a second env that
differs only in another source's patch, say) installs it without building: FlashInfer's wheel
costs 43-58 s to build and nothing to reuse.

Only isolated builds (`uv build` of a tree) are cached: sgl-kernel builds against the env's own
torch (--no-build-isolation), and a re-packed wheel tree costs less to zip than to look up.

    wheels/<key24>/<name>.whl     a published wheel
    wheels/<key24>/wheel.json     the key document it was built from
    wheels/.locks/<key24>.lock    concurrent builds of one wheel wait, then reuse
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from filelock import FileLock

from toolkit.envs.steps.context import BuildContext
from toolkit.envs.steps.steps import version_of
from toolkit.recipe.spec import canonical_json
from toolkit.tree.applied import AppliedTree

SCHEMA = 1
KEY_LEN = 24


def wheel_key_inputs(ctx: BuildContext, tree: AppliedTree) -> dict:
    """Everything an isolated `uv build` of `tree` depends on (and nothing an env adds)."""
    spec, py = ctx.spec, ctx.toolchain.python
    return {
        "schema": SCHEMA,
        "builder": "uv build",
        "tree": {"tree_hash": tree.tree_hash, "package_dir": tree.package_dir,
                 "layout": tree.layout},
        "build": {"arch": list(spec.arch), "env": [list(p) for p in spec.env]},
        "python": {"version": py["version"], "implementation": py["implementation"]},
        "nvcc": ctx.toolchain.nvcc_version,
        "uv": version_of([ctx.uv, "--version"]),
        "sources": ctx.sources.identity(),
    }


def wheel_key(ctx: BuildContext, tree: AppliedTree) -> str:
    return hashlib.sha256(canonical_json(wheel_key_inputs(ctx, tree)).encode()).hexdigest()


def _dir(home: Path, key: str) -> Path:
    return Path(home) / "wheels" / key[:KEY_LEN]


def _published(path: Path) -> Path | None:
    wheels = sorted(path.glob("*.whl")) if (path / "wheel.json").is_file() else []
    return wheels[0] if len(wheels) == 1 else None


def lock(home: Path, key: str) -> FileLock:
    locks = Path(home) / "wheels" / ".locks"
    locks.mkdir(parents=True, exist_ok=True)
    return FileLock(str(locks / f"{key[:KEY_LEN]}.lock"), thread_local=False)


def cached_wheel(home: Path, key: str) -> Path | None:
    """The published wheel of this key, or None."""
    return _published(_dir(home, key))


def publish_wheel(home: Path, key: str, inputs: dict, wheel: Path) -> Path:
    """Copy a freshly built wheel into the cache (call under `lock(home, key)`); return its path
    there. The directory appears complete or not at all."""
    final = _dir(home, key)
    tmp = final.parent / f".tmp-{final.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    shutil.copy2(wheel, tmp / wheel.name)
    (tmp / "wheel.json").write_text(json.dumps(inputs, indent=1, sort_keys=True) + "\n")
    if final.exists():  # a damaged entry (no wheel.json): replace it
        shutil.rmtree(final)
    os.rename(tmp, final)
    return final / wheel.name
