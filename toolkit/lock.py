"""The lock file beside a recipe (`NAME.lock.json`): what a recipe resolved to, byte for byte.

It records each source's resolved commit (or content hash / artifact sha256), each patch's
sha256 and the resulting tree hash. `--frozen` compares a fresh resolution with it and refuses any
drift: a moved tag, a changed artifact, a patch edited since the lock.
"""

from __future__ import annotations

import json
from pathlib import Path

from toolkit.errors import BadInput

LOCK_VERSION = 1


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
    if lock is None:
        raise BadInput(f"--frozen: no lock file {lock_path}", hint="run once without --frozen to create it")
    old = lock.get("sources", {}).get(source)
    if old is None:
        raise BadInput(f"--frozen: source {source} is not in {lock_path}")
    if old.get("location") != entry["location"] or old.get("kind") != entry["kind"]:
        raise BadInput(f"--frozen: source {source} now comes from {entry['location']}, the lock says {old.get('location')}")
    if old.get("resolved") != entry["resolved"]:
        what = {"git": f"rev `{entry['rev']}` moved", "path": "local tree changed",
                "pypi": "artifact changed"}[entry["kind"]]
        raise BadInput(
            f"--frozen: source {source}: {what}: locked {old.get('resolved', '')[:12]}, "
            f"now {entry['resolved'][:12]}"
        )
    old_p = [(p["name"], p["sha256"]) for p in old.get("patches", [])]
    new_p = [(p["name"], p["sha256"]) for p in entry["patches"]]
    for (on, osha), (nn, nsha) in zip(old_p, new_p):
        if on != nn:
            raise BadInput(f"--frozen: source {source}: patch stack changed ({on} -> {nn})")
        if osha != nsha:
            raise BadInput(
                f"--frozen: patch {nn} changed since the lock (sha256 {osha[:12]} -> {nsha[:12]})"
            )
    if len(old_p) != len(new_p):
        raise BadInput(f"--frozen: source {source}: patch stack has {len(new_p)} patches, the lock {len(old_p)}")


def write_lock(path: Path, recipe: str, sources: dict[str, dict]) -> bool:
    """Write the lock if it changed; return True when written."""
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
