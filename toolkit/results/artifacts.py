"""A run's files kept beside the database: logs, answers, GPU series, traces (issue 31).

With `[store] artifacts = "/shared/dir"` in the user config (toolkit/results/engine.StoreConfig),
every file of a finished run's directory is copied to `DIR/<run id>/<its relative path>` and the
store records its path, sha256 and size (`artifacts` table). Reading them back is checked: a file
that is gone is `missing`, one whose bytes no longer hash to what was stored is `altered`; neither
is trusted. `vouch(store, runs)`: the runs a verdict uses, their answers read only from bytes with
the stored sha256 (the kept copy, else the run's own directory when it still holds the same bytes;
neither: the answers are not used), and one line per verdict file (`VERDICT_FILES`) that is not
ok; `VouchedStore(store)` reads every run a verdict asks for that way. Effects: file copies (keep), file reads (check, vouch).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

ANSWERS = "quality.json"  # the answers (toolkit/run/quality.py ARTIFACT)
GPU_SERIES = "gpu_state.json"  # the GPU state series (toolkit/run/gpustate/record.py ARTIFACT)
VERDICT_FILES = (ANSWERS, GPU_SERIES)  # the kept files a verdict stands on: checked where it is given


@dataclass(frozen=True)
class Artifact:
    run_id: str
    name: str  # the file's path relative to the run's directory
    path: str  # where it is kept
    sha256: str
    size: int
    state: str = "unchecked"  # ok | missing | altered (after `check`)


_HASHED: dict[tuple, str] = {}  # (path, device, inode, size, mtime, ctime) -> sha256, this process's


def sha256_of(path: Path) -> str:
    """The file's sha256. Remembered for this process while the file's inode, size, mtime and ctime
    stay the same (any write changes its ctime, which no user can set back), so a command whose
    verdicts read the same runs many times (sweep, attribute, bisect: `VouchedStore.runs` per look)
    hashes each kept file once."""
    st = os.stat(path)
    key = (str(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    if key in _HASHED:
        return _HASHED[key]
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    if len(_HASHED) > 100_000:
        _HASHED.clear()
    _HASHED[key] = h.hexdigest()
    return _HASHED[key]


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
    return [_state(a) for a in store.artifacts(run_ids)]


def _state(a: Artifact) -> Artifact:
    p = Path(a.path)
    if not p.is_file():
        return replace(a, state="missing")
    ok = p.stat().st_size == a.size and sha256_of(p) == a.sha256
    return replace(a, state="ok" if ok else "altered")


def _same_bytes(path, a: Artifact) -> bool:
    try:
        p = Path(path)
        return p.is_file() and p.stat().st_size == a.size and sha256_of(p) == a.sha256
    except (OSError, TypeError):
        return False


def vouch(store, runs: Sequence) -> tuple[list, list[str]]:
    """(`runs` with each answers path, `extra.quality.artifact` and `answers_from`, pointing at bytes
    that hash to the store's sha256, or None; one line per kept verdict file of these runs, or of
    the earlier launches answering for them, that is missing or altered, naming the run and the
    file). A run with no kept answers keeps its path (there is no sha256 to hold it to)."""
    runs = list(runs)
    quality = [((r.extra or {}).get("quality") or {}) for r in runs]
    local = {}  # run id -> the answers path its record names (in its run directory)
    for r, q in zip(runs, quality):
        if q.get("artifact"):
            local.setdefault(r.run_id, q["artifact"])
        for f in q.get("answers_from") or []:
            if f and len(f) > 1 and f[1]:
                local.setdefault(f[0], f[1])
    ids = list(dict.fromkeys([r.run_id for r in runs] + list(local)))
    kept = {(a.run_id, a.name): _state(a) for a in store.artifacts(ids) if a.name in VERDICT_FILES} if ids else {}
    if not kept:
        return runs, []
    answers_at = {}  # run id -> where its answers are read (None: nowhere trusted)
    for (rid, name), a in kept.items():
        if name == ANSWERS:
            answers_at[rid] = a.path if a.state == "ok" else (local[rid] if _same_bytes(local.get(rid), a) else None)
    recipe_of = {r.run_id: r.recipe for r in runs}
    lines = []
    for (rid, name), a in kept.items():
        if a.state == "ok":
            continue
        who = f"run {rid[:8]}" + (f" ({recipe_of[rid]})" if rid in recipe_of else "")
        if name == ANSWERS:
            use = ("its answers not used" if answers_at[rid] is None
                   else f"its answers read from {answers_at[rid]} (the stored sha256)")
        else:
            use = "the box flags are its stored summary's"
        why = ", sha256 not the stored one" if a.state == "altered" else ""
        lines.append(f"artifact: {who}: {name} {a.state} ({a.path}{why}): {use}")
    out = []
    for r, q in zip(runs, quality):
        new = dict(q)
        if q.get("artifact") and r.run_id in answers_at:
            new["artifact"] = answers_at[r.run_id]
        if q.get("answers_from"):
            new["answers_from"] = [[f[0], answers_at[f[0]], *f[2:]] if f and f[0] in answers_at else f
                                   for f in q["answers_from"]]
        out.append(replace(r, extra={**r.extra, "quality": new}) if new != q else r)
    return out, lines


class VouchedStore:
    """`store` read through `vouch` where a verdict reads its runs (sweep, attribute, bisect):
    `runs(...)` returns them vouched; `notes` holds each missing/altered line once, for the command
    to print. Every other attribute is the store's own."""

    def __init__(self, store):
        self._store = store
        self.notes: list[str] = []

    def runs(self, *args, **kwargs) -> list:
        runs, lines = vouch(self._store, self._store.runs(*args, **kwargs))
        self.notes += [line for line in lines if line not in self.notes]
        return runs

    def __getattr__(self, name):
        return getattr(self._store, name)

