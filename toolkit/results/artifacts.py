"""A run's files kept beside the database: logs, answers, GPU series, traces (issue 31).

With `[store] artifacts = "/shared/dir"` in the user config (toolkit/results/engine.StoreConfig),
every file of a finished run's directory is copied to `DIR/<run id>/<its relative path>` and the
store records its path, sha256 and size (`artifacts` table). Reading them back is checked: a file
that is gone is `missing`, one whose bytes no longer hash to what was stored is `altered`; neither
is trusted. Effects: file copies (keep), file reads (check).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Artifact:
    run_id: str
    name: str  # the file's path relative to the run's directory
    path: str  # where it is kept
    sha256: str
    size: int
    state: str = "unchecked"  # ok | missing | altered (after `check`)


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def keep(store, run_id: str, run_dir: Path, root: Path) -> list[Artifact]:
    """Copy every file under `run_dir` to `root/<run_id>/` (each by an atomic rename) and record
    them in `store`. Returns what was recorded."""
    dest_dir = Path(root) / run_id
    out = []
    for src in sorted(p for p in Path(run_dir).rglob("*") if p.is_file()):
        name = str(src.relative_to(run_dir))
        dest = dest_dir / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.tmp{os.getpid()}")
        shutil.copyfile(src, tmp)
        os.replace(tmp, dest)
        out.append(Artifact(run_id, name, str(dest), sha256_of(dest), dest.stat().st_size))
    store.add_artifacts(out)
    return out


def check(store, run_ids: list[str]) -> list[Artifact]:
    """The artifacts of `run_ids` as stored, each with its state now: ok, missing or altered."""
    out = []
    for a in store.artifacts(run_ids):
        p = Path(a.path)
        if not p.is_file():
            state = "missing"
        elif p.stat().st_size != a.size or sha256_of(p) != a.sha256:
            state = "altered"
        else:
            state = "ok"
        out.append(Artifact(a.run_id, a.name, a.path, a.sha256, a.size, state))
    return out
