"""A lease on a name in the results store, held by one process at a time (a sweep being measured):
on PostgreSQL a session advisory lock on a connection kept for the lease, on SQLite a file lock
beside the database. Two people sharing a store, or two terminals, never continue one sweep at once."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import sqlalchemy as sa


@contextmanager
def hold(engine: sa.Engine, engine_name: str, path: object, key: str) -> Iterator[bool]:
    """Yields whether this process holds `key` (False: another holds it now; nothing waits)."""
    if engine_name == "postgresql":
        conn = engine.connect()
        args = {"k": f"patchbench:{key}"}
        try:
            got = bool(conn.execute(sa.text("SELECT pg_try_advisory_lock(hashtext(:k))"), args).scalar())
            conn.commit()
            yield got
            if got:
                conn.execute(sa.text("SELECT pg_advisory_unlock(hashtext(:k))"), args)
                conn.commit()
        finally:
            conn.close()
        return
    from filelock import FileLock, Timeout

    where = Path(str(path)).parent / "locks"
    where.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(where / f"{key.replace('/', '_')}.lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        yield False
        return
    try:
        yield True
    finally:
        lock.release()
