"""The lock file beside a recipe (`NAME.lock.json`): what a recipe resolved to, byte for byte.

It records each source's resolved commit (or content hash / artifact sha256), each patch's
sha256 and the resulting tree hash. `--frozen` compares a fresh resolution with it and refuses any
drift: a moved tag, a changed artifact, a patch edited since the lock.

Portable: a local source (a `path`, or a `git` repository given as a directory) inside the project
is recorded relative to the lock's own folder, as recipes write it (`../../upstream/minisglang`), so a
lock committed in one clone passes `--frozen` in a clone at another path. The project is the nearest
folder above the lock holding `.git` or `pyproject.toml`; a local source outside it keeps its
absolute path. Locks written with absolute paths are still read (and compared the same way).
"""

from __future__ import annotations

import json
import os
from pathlib import Path, PurePosixPath

from toolkit.errors import BadInput
from toolkit.errors import plural

LOCK_VERSION = 1


class FrozenDrift(BadInput):
    """`--frozen` refused: the sources or patches differ from the lock (never a configuration sglang
    refused: a sweep stops on it instead of pruning the variant)."""


def read_lock(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise BadInput(f"{path}: unreadable lock file: {exc}") from None
    if data.get("version") != LOCK_VERSION:
        raise BadInput(f"{path}: lock version {data.get('version')} is not {LOCK_VERSION}")
    return data


def project_root(lock_path: Path) -> Path | None:
    """The project a lock belongs to: the nearest folder above it holding .git or pyproject.toml."""
    for folder in Path(os.path.realpath(lock_path)).parents:
        if (folder / ".git").exists() or (folder / "pyproject.toml").is_file():
            return folder
    return None


def portable_location(lock_path: Path, kind: str, location: str) -> str:
    """`location` as a lock records it: a local directory inside the project relative to the lock's
    folder (POSIX separators), anything else (a URL, a PyPI requirement, a path outside) as it is."""
    if kind not in ("git", "path") or not os.path.isabs(location):
        return location
    root = project_root(lock_path)
    folder = Path(os.path.realpath(lock_path)).parent
    target = Path(os.path.realpath(location))
    if root is None or not (target == root or root in target.parents):
        return location
    return PurePosixPath(*Path(os.path.relpath(target, folder)).parts).as_posix()


def source_entry(base, patches: list, tree_hash: str | None) -> dict:
    entry = {
        "kind": base.kind,
        "location": base.location,
        "rev": base.rev,
        "resolved": base.resolved,
        "patches": [{"name": p.name, "sha256": p.sha256} for p in patches],
    }
    if base.artifact:
        entry["artifact"] = {k: base.artifact[k] for k in ("filename", "sha256", "url")}
    if tree_hash:
        entry["tree_hash"] = tree_hash
    return entry


def check_frozen(lock: dict | None, lock_path: Path, source: str, entry: dict) -> None:
    """Raise BadInput naming the first difference between the lock and a fresh resolution."""
    old = _locked_base(lock, lock_path, source, entry)
    old_p = [(p["name"], p["sha256"]) for p in old.get("patches", [])]
    new_p = [(p["name"], p["sha256"]) for p in entry["patches"]]
    for (on, osha), (nn, nsha) in zip(old_p, new_p):
        if on != nn:
            raise FrozenDrift(f"--frozen: source {source}: patch stack changed ({on} -> {nn})")
        if osha != nsha:
            raise FrozenDrift(
                f"--frozen: patch {nn} changed since the lock (sha256 {osha[:12]} -> {nsha[:12]})"
            )
    if len(old_p) != len(new_p):
        raise FrozenDrift(f"--frozen: source {source}: patch stack has {plural(len(new_p), 'patch')}, the lock {len(old_p)}")


def check_frozen_variant(lock: dict | None, lock_path: Path, source: str, entry: dict, variant: str) -> None:
    """`--frozen` for a [matrix] variant (a `patches.SOURCE` axis adds patches to the recipe's stack):
    its source must be the locked one and each of its patches one the lock records, the recipe's own
    stack or its [matrix] patches (`matrix_patches`, written with the recipe's lock), with the sha256
    recorded; a patch the lock never recorded has no content to hold it to: refused, naming it."""
    old = _locked_base(lock, lock_path, source, entry)
    locked = {p["name"]: p["sha256"] for p in [*old.get("patches", []), *old.get("matrix_patches", [])]}
    for p in entry["patches"]:
        if p["name"] not in locked:
            raise FrozenDrift(f"--frozen: [matrix] variant {variant} applies {p['name']} to {source}, a patch "
                              f"{lock_path.name} does not record (it records {', '.join(locked) or 'no patches'})",
                              hint="run the recipe once without --frozen: its lock records its [matrix] patches")
        if locked[p["name"]] != p["sha256"]:
            raise FrozenDrift(f"--frozen: patch {p['name']} changed since the lock "
                              f"(sha256 {locked[p['name']][:12]} -> {p['sha256'][:12]})")


def _locked_base(lock: dict | None, lock_path: Path, source: str, entry: dict) -> dict:
    """The lock's entry of `source`, after checking the source itself (location, kind, resolution)."""
    if lock is None:
        raise FrozenDrift(f"--frozen: no lock file {lock_path}", hint="run once without --frozen to create it")
    old = lock.get("sources", {}).get(source)
    if old is None:
        raise FrozenDrift(f"--frozen: source {source} is not in {lock_path}")
    now = portable_location(lock_path, entry["kind"], entry["location"])
    then = portable_location(lock_path, old.get("kind", ""), old.get("location", ""))
    if then != now or old.get("kind") != entry["kind"]:
        raise FrozenDrift(f"--frozen: source {source} now comes from {now}, the lock says {then}")
    if old.get("resolved") != entry["resolved"]:
        what = {"git": f"rev `{entry['rev']}` moved", "path": "local tree changed",
                "pypi": "artifact changed"}[entry["kind"]]
        raise FrozenDrift(
            f"--frozen: source {source}: {what}: locked {old.get('resolved', '')[:12]}, "
            f"now {entry['resolved'][:12]}"
        )
    return old


def write_lock(path: Path, recipe: str, sources: dict[str, dict]) -> bool:
    """Write the lock if it changed (local paths made portable); return True when written."""
    sources = {name: {**entry, "location": portable_location(path, entry["kind"], entry["location"])}
               for name, entry in sources.items()}
    data = {"version": LOCK_VERSION, "recipe": recipe, "sources": sources}
    text = json.dumps(data, indent=2, sort_keys=True) + "\n"
    try:
        if path.read_text() == text:
            return False
    except OSError:
        pass
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return True
