"""The files a `patchbench publish` wrote into its output directory, kept as its manifest
(`.patchbench-site`, JSON: each file's path relative to the site and sha256), so that the next
publish removes the pages and plots of pairs, recipes, histories and sweeps that no longer exist,
and nothing else: a file it did not write, or one changed since it wrote it, stays. Effects: reads
and writes the manifest, removes those files (and the folders they leave empty) under the site."""

from __future__ import annotations

import json
import os
from pathlib import Path

from toolkit.digest import sha256_file

MANIFEST = ".patchbench-site"


def read(site: Path) -> dict[str, str]:
    """{relative path: sha256} of the files the last publish wrote; {} for none, a marker of a publish
    before the manifest (plain text) or a manifest that does not parse: then nothing is removed."""
    try:
        files = json.loads((site / MANIFEST).read_text()).get("files")
    except (OSError, ValueError, AttributeError):
        return {}
    return {str(k): str(v) for k, v in files.items()} if isinstance(files, dict) else {}


def files_of(site: Path, written: set[Path]) -> dict[str, str]:
    """{relative path: sha256} of the files written (absolute paths) under `site`."""
    root = site.resolve()
    return {str(p.relative_to(root)): sha256_file(p) for p in sorted(written)
            if p.is_relative_to(root) and p.is_file() and p.name != MANIFEST}


def save(site: Path, files: dict[str, str]) -> dict[str, str]:
    """Write the manifest (atomically); returns `files`."""
    tmp = site / f"{MANIFEST}.tmp{os.getpid()}"
    tmp.write_text(json.dumps({"written_by": "patchbench publish", "files": files}, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, site / MANIFEST)
    return files


def remove_stale(site: Path, before: dict[str, str], now: dict[str, str]) -> list[str]:
    """Remove what the last publish wrote and this one did not, where it is still the file written
    (a regular file with the sha256 recorded, inside the site); the folders that leaves empty go too.
    Returns the relative paths removed."""
    root, removed = site.resolve(), []
    for rel, digest in sorted(before.items()):
        path = site / rel
        if rel in now or path.is_symlink() or not path.is_file() or not path.resolve().is_relative_to(root):
            continue
        if sha256_file(path) != digest:  # changed since: not ours to remove
            continue
        path.unlink()
        removed.append(rel)
        parent = path.parent
        while parent.resolve() != root and parent.is_dir() and not any(parent.iterdir()):
            parent.rmdir()
            parent = parent.parent
    return removed
