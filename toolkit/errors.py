"""Errors that reach the user as one line and an exit code, never a traceback (and `plural`, for
counts in those lines)."""

from __future__ import annotations

from pathlib import Path


class PatchbenchError(Exception):
    """A failure the user can act on. Exit code 1 (an operation failed)."""

    exit_code = 1

    def __init__(
        self,
        message: str,
        *,
        recipe: str | None = None,
        step: str | None = None,
        where: str | None = None,
        log: Path | str | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.recipe = recipe
        self.step = step
        self.where = where
        self.log = log
        self.hint = hint

    def located(self, *, recipe: str | None = None, step: str | None = None) -> "PatchbenchError":
        """Fill in the recipe/step if the raiser did not know them; returns self."""
        self.recipe = self.recipe or recipe
        self.step = self.step or step
        return self

    def __str__(self) -> str:
        parts = []
        if self.recipe:
            parts.append(f"recipe {self.recipe}")
        if self.step:
            parts.append(f"step {self.step}")
        if self.where:
            parts.append(str(self.where))
        head = ": ".join(parts)
        line = f"{head}: {self.message}" if head else self.message
        if self.hint:
            line += f" ({self.hint})"
        if self.log:
            line += f" [log: {self.log}]"
        return line


class BadInput(PatchbenchError):
    """The user's input (recipe, patch, revision, flag) is wrong. Exit code 2."""

    exit_code = 2


class NoGPU(PatchbenchError):
    """The pipeline reached a step that needs a CUDA GPU on a machine without one."""

    exit_code = 3


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT) inside a step that knows where it was. Still a KeyboardInterrupt, so nothing
    that catches failures to go on with the next recipe catches it; it only adds the recipe, the step
    and the log kept for the one line the command ends with (exit 130)."""

    def __init__(self, *, recipe: str | None = None, step: str | None = None, log: Path | str | None = None):
        super().__init__()
        self.recipe, self.step, self.log = recipe, step, log

    def __str__(self) -> str:
        where = ": ".join(x for x in (f"recipe {self.recipe}" if self.recipe else "",
                                      f"step {self.step}" if self.step else "") if x)
        return f"interrupted{' at ' + where if where else ''}" + (f" [log kept: {self.log}]" if self.log else "")


_PLURALS = {"patch": "patches", "match": "matches", "batch": "batches", "family": "families"}


def plural(n: int, word: str, many: str | None = None) -> str:
    """`1 patch`, `2 patches`, `0 runs`: a count in a message, with its noun in the right number."""
    return f"{n} {word if n == 1 else (many or _PLURALS.get(word) or word + 's')}"


def disk_error(exc: OSError, home: Path | None = None) -> PatchbenchError | None:
    """A file operation the disk refused (no permission, a read-only file system, no space left) as a
    one-line error naming the path and what to do (exit 2 for a home this user cannot write, 1 for a
    full disk); None for any other OSError (a bug's, reported as one). `home`: the workspace (a path in it
    is the home's to fix)."""
    import errno

    space = exc.errno in (errno.ENOSPC, errno.EDQUOT)
    if not space and exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
        return None
    path = exc.filename
    where = f"{exc.strerror or exc}: {path}" if path else str(exc.strerror or exc)
    in_home = path is not None and home is not None and (Path(path) == Path(home) or Path(home) in Path(path).parents)
    if space:
        hint = ("free space on that disk (`patchbench env gc` removes unused envs) or point PATCHBENCH_HOME "
                "(or --home) at another disk")
        return PatchbenchError(where, hint=hint)
    hint = ("point PATCHBENCH_HOME (or --home) at a directory this user can write" if in_home or path is None
            else "this user needs to be able to write it")
    return BadInput(where, hint=hint)


def raise_refused(exc: OSError, *, home: Path | None = None, recipe: str | None = None,
                  step: str | None = None) -> None:
    """Raise `disk_error(exc, home)` located at the recipe and step, else `exc` itself (a bug's)."""
    refused = disk_error(exc, home)
    if refused is None:
        raise exc
    raise refused.located(recipe=recipe, step=step) from None
