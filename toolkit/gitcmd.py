"""git as a subprocess with argv lists and a fixed identity, so commits are reproducible."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from toolkit.errors import PatchbenchError

# Fixed author/committer/date: the same base and the same patches give the same commit SHAs.
_FIXED_ENV = {
    "GIT_AUTHOR_NAME": "patchbench",
    "GIT_AUTHOR_EMAIL": "patchbench@localhost",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00+0000",
    "GIT_COMMITTER_NAME": "patchbench",
    "GIT_COMMITTER_EMAIL": "patchbench@localhost",
    "GIT_COMMITTER_DATE": "2000-01-01T00:00:00+0000",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_CONFIG_NOSYSTEM": "1",
    "LC_ALL": "C",
}
_CONFIG = [
    "-c", "core.autocrlf=false",
    "-c", "core.hooksPath=/dev/null",
    "-c", "commit.gpgsign=false",
    "-c", "tag.gpgsign=false",
    "-c", "init.defaultBranch=main",
    "-c", "advice.detachedHead=false",
    "-c", "gc.auto=0",
]


def git(
    cwd: Path | str | None,
    *args: str,
    check: bool = True,
    input: str | None = None,
    what: str | None = None,
) -> subprocess.CompletedProcess:
    """Run `git ARGS` in `cwd`; raise PatchbenchError naming `what` on failure when `check`."""
    env = {**os.environ, **_FIXED_ENV}
    proc = subprocess.run(
        ["git", *_CONFIG, *args],
        cwd=cwd,
        env=env,
        input=input,
        capture_output=True,
        text=True,
    )
    if check and proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        msg = detail[-1] if detail else f"exit {proc.returncode}"
        raise PatchbenchError(f"{what or 'git ' + args[0]} failed: {msg}")
    return proc


def out(cwd: Path | str | None, *args: str, what: str | None = None) -> str:
    return git(cwd, *args, what=what).stdout.strip()


def tree_hash(repo: Path) -> str:
    return out(repo, "rev-parse", "HEAD^{tree}")


def head(repo: Path) -> str:
    return out(repo, "rev-parse", "HEAD")


def is_clean(repo: Path) -> bool:
    return git(repo, "status", "--porcelain", "--untracked-files=all", check=False).stdout == ""


def commit_all(repo: Path, message: str) -> str:
    """Stage everything (ignoring nothing) and commit; returns the new commit SHA."""
    git(repo, "add", "-A", "-f", ".", what="git add")
    git(repo, "commit", "-q", "--allow-empty", "--no-verify", "-m", message, what="git commit")
    return head(repo)
