"""git through GitPython, with a fixed identity, dates and config: the only module that runs git.

Every commit patchbench makes has the same author, committer and dates, so the same base and the
same patches give the same commit SHAs on any machine. No user or system git config (hooks, signing,
autocrlf, default branch) can change what a command does. Failures raise PatchbenchError naming the
step (`what`) and git's last line of complaint.

Callers use the named operations below; `run` is the escape hatch for the few porcelain commands
that have no name here (it still goes through the fixed environment).
"""

from __future__ import annotations

import contextlib
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import git

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
_CONFIG = (
    "core.autocrlf=false",
    "core.hooksPath=/dev/null",
    "commit.gpgsign=false",
    "tag.gpgsign=false",
    "init.defaultBranch=main",
    "advice.detachedHead=false",
    "gc.auto=0",
)


@dataclass(frozen=True)
class Result:
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def _cmd(cwd: Path | str | None) -> git.Git:
    g = git.Git(str(cwd) if cwd is not None else None)
    g.update_environment(**_FIXED_ENV)
    g.set_persistent_git_options(c=list(_CONFIG))
    return g


def _failure(what: str, stderr: str, stdout: str, status: int) -> PatchbenchError:
    detail = (stderr or stdout).strip().splitlines()
    return PatchbenchError(f"{what} failed: {detail[-1] if detail else f'exit {status}'}")


def run(cwd: Path | str | None, *args: str, check: bool = True, what: str | None = None) -> Result:
    """`git ARGS` in `cwd` (fixed identity and config); raise PatchbenchError naming `what` when
    `check` and git fails, else return the exit status and both outputs."""
    sub = getattr(_cmd(cwd), args[0].replace("-", "_"))  # GitPython: rev_parse -> `git rev-parse`
    try:
        status, stdout, stderr = sub(*args[1:], with_extended_output=True, with_exceptions=False,
                                     strip_newline_in_stdout=False)
    except git.GitCommandNotFound as exc:  # no git, or `cwd` does not exist
        status, stdout, stderr = 127, "", str(exc)
    if check and status != 0:
        raise _failure(what or f"git {args[0]}", stderr, stdout, status)
    return Result(status, stdout, stderr)


def out(cwd: Path | str | None, *args: str, what: str | None = None) -> str:
    return run(cwd, *args, what=what).stdout.strip()


# ----------------------------------------------------------------------------------- repositories


def init(path: Path) -> None:
    run(path, "init", "-q", what="git init")


def clone(src: Path | str, dest: Path, *, mirror: bool = False, shared: bool = False,
          no_checkout: bool = False, what: str | None = None) -> None:
    """`git clone` of `src` (a URL or a local repo) into `dest`."""
    flags = ["--mirror"] * mirror + ["--shared"] * shared + ["--no-checkout"] * no_checkout
    run(None, "clone", "-q", *flags, str(src), str(dest), what=what or "git clone")


def fetch(mirror: Path, *, what: str | None = None) -> None:
    """Bring a mirror up to date with its origin (branches and tags, pruned, forced)."""
    run(mirror, "fetch", "-q", "--prune", "--force", "origin", what=what or "git fetch")


def checkout(repo: Path, sha: str, *, branch: str = "patchbench") -> None:
    run(repo, "checkout", "-q", "-B", branch, sha, what="git checkout")


# ------------------------------------------------------------------------------------- revisions


def rev_parse(repo: Path, rev: str) -> str | None:
    """The commit SHA `rev` names in `repo`, or None when it names none (or `repo` is no repo)."""
    proc = run(repo, "rev-parse", "--verify", "-q", f"{rev}^{{commit}}", check=False)
    return proc.stdout.strip() if proc.ok else None


def head(repo: Path) -> str:
    return out(repo, "rev-parse", "HEAD")


def tree_hash(repo: Path, rev: str = "HEAD") -> str:
    return out(repo, "rev-parse", f"{rev}^{{tree}}")


def first_parent_commits(repo: Path, good: str, bad: str) -> list[str] | None:
    """Commits after `good` up to `bad` on the first-parent line, oldest first (None on error)."""
    proc = run(repo, "rev-list", "--first-parent", "--reverse", f"{good}..{bad}", check=False)
    return proc.stdout.split() if proc.ok else None


# ------------------------------------------------------------------------------------ work trees


def is_clean(repo: Path) -> bool:
    """No staged, unstaged or untracked (not ignored) change; False when `repo` is no repository."""
    proc = run(repo, "status", "--porcelain", "--untracked-files=all", check=False)
    return proc.ok and proc.stdout == ""


def ls_files(root: Path) -> list[str] | None:
    """Tracked and untracked, not ignored, paths of a work tree; None when `root` is no work tree."""
    proc = run(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard", check=False)
    return [f for f in proc.stdout.split("\0") if f] if proc.ok else None


def commit_all(repo: Path, message: str) -> str:
    """Stage everything (ignoring nothing) and commit; returns the new commit SHA."""
    run(repo, "add", "-A", "-f", ".", what="git add")
    return commit(repo, message, what="git commit")


def commit(repo: Path, message: str, *, what: str = "git commit") -> str:
    """Commit the index (empty commits allowed, no hooks); returns the new commit SHA."""
    run(repo, "commit", "-q", "--allow-empty", "--no-verify", "-m", message, what=what)
    return head(repo)


# ------------------------------------------------------------------------------------------ patches


def apply_check(repo: Path, patch: Path, *, strip: int = 1, reverse: bool = False) -> Result:
    """`git apply --check` with zero fuzz: would `patch` apply (or, `reverse`, un-apply)?
    `strip` is git's -p: leading path components removed from every name in the patch."""
    return run(repo, *_apply_args(patch, strip, reverse=reverse), "--check", "--verbose", check=False)


def apply(repo: Path, patch: Path, *, strip: int = 1, what: str | None = None) -> None:
    """Apply `patch` to the work tree and the index, zero fuzz (`strip`: git's -p)."""
    run(repo, *_apply_args(patch, strip), "--index", what=what or f"git apply {patch.name}")


def _apply_args(patch: Path, strip: int, *, reverse: bool = False) -> list[str]:
    return ["apply", "--whitespace=nowarn", f"-p{strip}", *(["--reverse"] if reverse else []), str(patch)]


# ------------------------------------------------------------------------------------------- export


@contextlib.contextmanager
def _archive(repo: Path, treeish: str, what: str) -> Iterator[tuple[git.Repo, tarfile.TarFile]]:
    """`git archive` of `treeish` as an open tar (in a temporary file); errors as PatchbenchError."""
    r = git.Repo(repo)
    r.git.update_environment(**_FIXED_ENV)
    try:
        with tempfile.TemporaryFile() as fh:
            r.archive(fh, treeish, format="tar")
            fh.seek(0)
            with tarfile.open(fileobj=fh, mode="r:") as tar:
                yield r, tar
    except (git.GitCommandError, ValueError) as exc:
        raise PatchbenchError(f"git archive {treeish} of {repo} failed: {exc}") from None
    except tarfile.TarError as exc:
        raise PatchbenchError(f"cannot {what} tree {treeish} of {repo}: {exc}") from None
    finally:
        r.close()


def export(repo: Path, treeish: str, dest: Path) -> list[str]:
    """Write the committed content of `treeish` (no untracked files, no .git) into `dest`.

    Returns the paths of submodules (gitlinks), which an archive leaves empty."""
    with _archive(repo, treeish, "export") as (r, tar):
        tar.extractall(dest, filter="tar")
        obj = r.rev_parse(treeish)
        tree = obj.tree if obj.type == "commit" else git.Tree(r, obj.binsha, path="")
        return [item.path for item in tree.traverse() if item.type == "submodule"]


def tree_files(repo: Path, treeish: str, keep=lambda name: True) -> dict[str, tuple[bytes, int]]:
    """The committed regular files of `treeish` that `keep(path)` accepts: path -> (bytes, mode)."""
    with _archive(repo, treeish, "read") as (_, tar):
        return {m.name: (tar.extractfile(m).read(), m.mode) for m in tar if m.isfile() and keep(m.name)}
