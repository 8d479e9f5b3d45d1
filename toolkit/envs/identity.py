"""An env's identity: the canonical document (`key_inputs`) of everything that can change what runs
in it, and its sha256, the env key. Same key: the env is reused with zero work; any difference: a
new env. Also the settings check that runs before any work."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Mapping, Sequence

from toolkit.tree import gitrepo
from toolkit.envs.steps.arch import parse_arch
from toolkit.envs.steps.pipconf import PipSources, pip_sources
from toolkit.envs.steps.probe import Toolchain
from toolkit.errors import BadInput
from toolkit.recipe.spec import BuildSpec, canonical_json
from toolkit.tree.applied import AppliedTree

SCHEMA = 1
KEY_LEN = 16  # directory names use key[:16]; the manifest holds the full key


def validate_spec(spec: BuildSpec, trees: Sequence[AppliedTree]) -> None:
    """Reject settings that cannot build, before any work (BadInput, exit 2)."""
    if spec.mode not in ("full", "overlay"):
        raise BadInput(f"build.mode must be 'full' or 'overlay', not {spec.mode!r}")
    if spec.mode == "overlay" and not spec.base_python:
        raise BadInput("build.mode = 'overlay' needs build.base_python (the interpreter to overlay)")
    for a in spec.arch:
        parse_arch(a)
    names = [t.source for t in trees]
    if len(set(names)) != len(names):
        raise BadInput(f"two trees share a source name: {names}")
    for name in spec.install or ():
        if name not in names:
            raise BadInput(f"build.install names {name!r}, which is not a source of this recipe",
                           hint=f"sources: {', '.join(names) or 'none'}")
    for name, patterns in spec.cuda:
        if name not in names:
            raise BadInput(f"build.cuda names {name!r}, which is not a source of this recipe")
        if not patterns:
            raise BadInput(f"build.cuda for {name!r} has no glob patterns")
    if (spec.cuda or spec.kernels) and not spec.arch:
        raise BadInput("build.cuda / build.kernels need build.arch (e.g. arch = [\"12.0a\"])")
    if spec.jobs is not None and spec.jobs < 1:
        raise BadInput(f"build.jobs must be >= 1, not {spec.jobs}")


# --------------------------------------------------------------------------------------------
# pip's configured sources, handed to uv (uv does not read pip's configuration)
# --------------------------------------------------------------------------------------------


def _dir_identity(path: Path) -> dict:
    """A pre-seeded source directory: its git tree hash (+ whether the work tree is dirty)."""
    path = Path(path).expanduser().resolve()
    out = gitrepo.run(path, "rev-parse", "HEAD^{tree}", check=False)
    if out.returncode != 0:
        return {"path": str(path), "tree_hash": None}
    dirty = gitrepo.run(path, "status", "--porcelain", check=False).stdout.strip() != ""
    return {"path": str(path), "tree_hash": out.stdout.strip(), "dirty": dirty}


def key_inputs(trees: Sequence[AppliedTree], spec: BuildSpec, toolchain: Toolchain,
               sources: PipSources | None = None, *,
               fetchcontent: Mapping[str, Path] | None = None) -> dict:
    """The canonical document whose sha256 is the env key (also stored in the manifest)."""
    sources = pip_sources() if sources is None else sources
    d = {
        "schema": SCHEMA,
        "trees": {t.source: {"tree_hash": t.tree_hash, "layout": t.layout,
                             "package_dir": t.package_dir} for t in trees},
        "build": spec.identity(),
        "toolchain": toolchain.identity(spec.mode),
        "dependencies": {"packages": list(spec.packages), "sources": sources.identity()},
    }
    if fetchcontent:  # sgl-kernel's pre-seeded FetchContent sources are compiled into it
        d["fetchcontent"] = {k: _dir_identity(v) for k, v in sorted(fetchcontent.items())}
    return d


def env_key(trees: Sequence[AppliedTree], spec: BuildSpec, toolchain: Toolchain,
            sources: PipSources | None = None, *,
            fetchcontent: Mapping[str, Path] | None = None) -> str:
    """sha256 (hex) of the canonical JSON of `key_inputs`."""
    inputs = key_inputs(trees, spec, toolchain, sources, fetchcontent=fetchcontent)
    return hashlib.sha256(canonical_json(inputs).encode()).hexdigest()
