"""What a database error means to a user of the results store: one line with the hint that fits
(toolkit.results.store turns every DBAPIError into one of these)."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from toolkit.errors import PatchbenchError
from toolkit.results.engine import BUSY_TIMEOUT_MS, connection_hint, is_disconnect


class StoreUnavailable(PatchbenchError):
    """The database server cannot be reached (stopped, network cut): nothing of the transaction stays."""


class RunExists(PatchbenchError):
    """A run id the store already holds (also when another writer stored it a moment before)."""


def first_line(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None) or exc
    return (str(orig).strip().splitlines() or [type(orig).__name__])[0]


def store_error(e: sa.exc.DBAPIError, where: object, engine_name: str) -> PatchbenchError:
    """The one-line error for `e`, raised by the store at `where` (its display name) on `engine_name`."""
    line = first_line(e)
    if isinstance(e, sa.exc.IntegrityError) and ("runs_pkey" in line or "runs.run_id" in line):
        return RunExists(f"results store {where}: {line}")
    if is_disconnect(e) or isinstance(e, sa.exc.OperationalError) and engine_name == "postgresql":
        return StoreUnavailable(f"results store {where}: {line}", hint=connection_hint(line))
    if "locked" in line:
        return PatchbenchError(f"results store {where}: {line}",
                               hint=f"another writer held it for {BUSY_TIMEOUT_MS // 1000} s")
    if engine_name == "sqlite" and ("unable to open" in line or "readonly" in line):
        return PatchbenchError(f"results store {where}: {line}",
                               hint=f"can this user write {Path(str(where)).parent}? (a read-only PATCHBENCH_HOME "
                                    "cannot hold the store's lock and journal; point PATCHBENCH_HOME or --store elsewhere)")
    return PatchbenchError(f"results store {where}: {line}")
