"""A directory built once and shared by concurrent callers: the mini releases, tool envs and the
test suite's cached venvs and trees.

`build_once(dest, build, complete=...)` takes a per-destination file lock (`.<name>.lock` beside
`dest`), returns `dest` at once when `complete(dest)` holds, and otherwise calls `build(tmp)` on an
empty `.tmp-<name>-<pid>` beside it and publishes that by one `os.rename`. A second caller waits on
the lock and reuses the first caller's build; a build killed half-way leaves only its `.tmp-` dir,
which no caller trusts and the next build removes. A venv built this way must be relocatable
(`uv venv --relocatable`): it is created under the temporary name.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

from filelock import FileLock


def lock_for(dest: Path) -> FileLock:
    """The lock every builder of `dest` takes (beside it, so it needs no other directory)."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(str(dest.parent / f".{dest.name}.lock"), thread_local=False)


def _clear_leftovers(dest: Path) -> None:
    """Temporary dirs of earlier builds of `dest` (their builders died: the lock is ours)."""
    mine = re.compile(rf"\.tmp-{re.escape(dest.name)}-\d+(-old)?")  # not another dest's (`NAME-x`)
    for stale in dest.parent.glob(f".tmp-{dest.name}-*"):
        if mine.fullmatch(stale.name):
            shutil.rmtree(stale, ignore_errors=True)


def build_once(dest: Path, build: Callable[[Path], None], *, complete: Callable[[Path], bool]) -> Path:
    """`dest`, built by `build(tmp)` unless `complete(dest)` already holds; see the module doc.
    `build` receives the temporary directory (created, empty) and must leave it complete; what it
    raises propagates, and nothing is published."""
    dest = Path(dest)
    with lock_for(dest):
        if dest.exists() and complete(dest):
            return dest
        _clear_leftovers(dest)
        tmp = dest.parent / f".tmp-{dest.name}-{os.getpid()}"
        tmp.mkdir(parents=True)
        try:
            build(tmp)
            if not complete(tmp):
                raise RuntimeError(f"building {dest} left it incomplete (in {tmp})")
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        if dest.exists():  # an incomplete or outdated earlier build: replace it
            old = dest.parent / f".tmp-{dest.name}-{os.getpid()}-old"
            os.rename(dest, old)
            os.rename(tmp, dest)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, dest)
        return dest
