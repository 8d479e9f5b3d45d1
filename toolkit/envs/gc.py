"""Published envs listed (most recently used first), their disk usage (each inode once), and garbage
collection of envs nobody needs plus every stale build directory."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable, Sequence

from filelock import FileLock, Timeout

from toolkit.envs.manifest import key_lock, read_manifest, remove_tree


def disk_usage(paths: Iterable[Path], seen: set | None = None) -> int:
    """Bytes on disk under `paths`, each inode counted once (hardlinks shared across envs and
    with uv's cache are not counted twice); symlinks are not followed."""
    seen = set() if seen is None else seen
    total = 0
    for root in paths:
        root = Path(root)
        if not root.exists():
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            for n in dirnames + filenames:
                try:
                    st = os.lstat(os.path.join(dirpath, n))
                except OSError:
                    continue
                ident = (st.st_dev, st.st_ino)
                if ident in seen:
                    continue
                seen.add(ident)
                total += st.st_blocks * 512
    return total


def unique_usage(path: Path) -> int:
    """Bytes only this env holds: files with a single link (what removing the env frees)."""
    total = 0
    for dirpath, _dirnames, filenames in os.walk(path):
        for n in filenames:
            try:
                st = os.lstat(os.path.join(dirpath, n))
            except OSError:
                continue
            if st.st_nlink == 1:
                total += st.st_blocks * 512
    return total


@dataclass
class EnvInfo:
    """One row of `env list`."""

    name: str
    path: Path
    manifest: dict = field(repr=False)

    @property
    def key(self) -> str:
        return self.manifest.get("key", self.name)

    @property
    def recipes(self) -> list[str]:
        return list(self.manifest.get("recipes", []))

    def last_used(self) -> datetime | None:
        for k in ("last_used_at", "published_at", "created_at"):
            if self.manifest.get(k):
                try:
                    return datetime.fromisoformat(self.manifest[k])
                except ValueError:
                    pass
        return None

    def packages_of_note(self) -> list[str]:
        note = ("torch", "sglang", "flashinfer-python", "sgl-kernel", "flashinfer-jit-cache")
        out = []
        pkgs = list(self.manifest.get("packages", []))
        if self.manifest.get("base"):
            pkgs += [p + " (base)" for p in self.manifest["base"].get("packages", [])]
        for line in pkgs:
            name = re.split(r"[=@ ]", line, maxsplit=1)[0].strip().lower().replace("_", "-")
            if name in note:
                out.append(line.split(" @ ")[0] if " @ " not in line else f"{name} (local)")
        return out


def list_envs(home: Path) -> list[EnvInfo]:
    """Published envs (directories with a manifest), most recently used first."""
    envs_dir = Path(home) / "envs"
    if not envs_dir.is_dir():
        return []
    out = []
    for p in envs_dir.iterdir():
        if p.name.startswith(".") or not p.is_dir():
            continue
        manifest = read_manifest(p)
        if manifest is not None:
            out.append(EnvInfo(p.name, p, manifest))
    epoch = datetime.fromtimestamp(0, timezone.utc)
    return sorted(out, key=lambda e: e.last_used() or epoch, reverse=True)


@dataclass
class GcResult:
    removed: list[str] = field(default_factory=list)  # env names
    kept: list[str] = field(default_factory=list)
    in_use: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)  # .tmp-/.failed-/.trash- dirs removed
    freed_bytes: int = 0


def _processes_using(paths: Sequence[Path]) -> set[Path]:
    """Envs that a running process was started from (its argv names a file inside the env)."""
    try:
        import psutil
    except ImportError:  # pragma: no cover - psutil is a dependency
        return set()
    prefixes = [(p, str(p) + os.sep) for p in paths]
    busy: set[Path] = set()
    me = os.getpid()
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if proc.info["pid"] == me:
            continue
        for arg in proc.info.get("cmdline") or ():
            for p, pre in prefixes:
                if arg.startswith(pre):
                    busy.add(p)
    return busy


def gc_envs(home: Path, *, older_than_days: float | None = None,
            keep_recipes: Sequence[str] = (), dry_run: bool = False,
            now: datetime | None = None) -> GcResult:
    """Remove envs nobody needs, and every stale build directory.

    An env is removed when it is not protected (used by a recipe in `keep_recipes`) and expired:
    with `older_than_days`, unused for that long; otherwise, with `keep_recipes`, any env those
    recipes do not use; with neither, only envs that no recipe ever used. Envs a running process
    was launched from are kept. `.tmp-*` dirs whose key's lock is free (no build running) and
    `.failed-*`/`.trash-*` dirs are removed.
    """
    home = Path(home).expanduser().resolve()
    envs_dir = home / "envs"
    result = GcResult()
    if not envs_dir.is_dir():
        return result
    now = now or datetime.now(timezone.utc)
    keep = set(keep_recipes)

    for p in sorted(envs_dir.iterdir()):
        m = re.match(r"^\.(tmp|failed|trash)-([0-9a-f]+)-", p.name)
        if not m:
            continue
        if m.group(1) == "tmp":
            lock = FileLock(str(envs_dir / ".locks" / f"{m.group(2)}.lock"), thread_local=False)
            try:
                lock.acquire(timeout=0)
            except (Timeout, RuntimeError):  # RuntimeError: held in this very thread
                continue  # a build of that key is running: its .tmp dir is live
            try:
                result.freed_bytes += unique_usage(p)
                if not dry_run:
                    remove_tree(p)
            finally:
                lock.release()
        else:
            result.freed_bytes += unique_usage(p)  # what removing it frees (a dry run says it)
            if not dry_run:
                remove_tree(p)
        result.stale.append(p.name)

    infos = list_envs(home)
    busy = _processes_using([i.path for i in infos])
    for info in infos:
        recipes = set(info.recipes)
        if recipes & keep:
            result.kept.append(info.name)
            continue
        if older_than_days is not None:
            last = info.last_used()
            expired = last is None or (now - last).total_seconds() > older_than_days * 86400
        elif keep:
            expired = True
        else:
            expired = not recipes
        if not expired:
            result.kept.append(info.name)
            continue
        if info.path in busy:
            result.in_use.append(info.name)
            continue
        if dry_run:
            result.freed_bytes += unique_usage(info.path)
        else:
            lock = key_lock(home, info.key)
            try:
                lock.acquire(timeout=0)
            except (Timeout, RuntimeError):
                result.in_use.append(info.name)
                continue
            try:
                trash = envs_dir / f".trash-{info.name}-{os.getpid()}"
                os.rename(info.path, trash)  # unpublish atomically, then delete
                result.freed_bytes += unique_usage(trash)
                remove_tree(trash)
            finally:
                lock.release()
        result.removed.append(info.name)
    return result
