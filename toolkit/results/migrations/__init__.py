"""Schema migrations of the store (Alembic, run from inside patchbench: no alembic.ini, no CLI).

`ensure_schema(engine, name)` brings the store at `engine` to `SCHEMA_VERSION` in one transaction
(SQLite: BEGIN IMMEDIATE; PostgreSQL: under an advisory lock), so processes opening one store at
once migrate it once:
- a brand-new store gets the tables of toolkit/results/tables.py and is stamped at the head;
- a SQLite store of the releases before Alembic (a `schema_version` row, 1..3, no
  `alembic_version`) is taken to schema 3 by their own SQL (legacy.py), stamped at revision 0003
  and upgraded from there;
- a store at the head costs one query; one newer than this code is refused.
Revisions live in versions/ (r<NNNN>_*.py, `revision` = the schema version as 4 digits).
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from toolkit.errors import PatchbenchError
from toolkit.results.migrations.legacy import stored_version
from toolkit.results.tables import SCHEMA_VERSION, metadata

HERE = Path(__file__).resolve().parent
HEAD = f"{SCHEMA_VERSION:04d}"
_PG_LOCK = 0x70617463  # pg_advisory_xact_lock key of the store's migrations ("patc")


def _alembic(conn: sa.Connection, verb: str, rev: str) -> None:
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(HERE))
    cfg.attributes["connection"] = conn
    getattr(command, verb)(cfg, rev)


def _refuse_newer(version: int, name: str) -> None:
    if version > SCHEMA_VERSION:
        raise PatchbenchError(f"results store {name} has schema version {version}, newer than this "
                              f"patchbench understands ({SCHEMA_VERSION})", hint="upgrade patchbench")


def ensure_schema(engine: sa.Engine, name: str) -> None:
    """See the module doc. `name`: the store as messages show it (password masked)."""
    if engine.dialect.name == "postgresql":  # the fast path: one read, no lock (SQLite: the
        with engine.connect() as conn:       # write lock is taken at once, as the releases before did)
            version = stored_version(conn)
            conn.rollback()
            _refuse_newer(version, name)
            if version == SCHEMA_VERSION:
                return
    with engine.connect() as conn, conn.execution_options(patchbench_write=True).begin():
        if conn.dialect.name == "postgresql":
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_LOCK})
        version = stored_version(conn)
        _refuse_newer(version, name)
        if version == SCHEMA_VERSION:
            return
        insp = sa.inspect(conn)
        if version == 0 and not insp.has_table("runs"):
            metadata.create_all(conn)
            conn.execute(sa.text("INSERT INTO schema_version (version) VALUES (:v)"), {"v": SCHEMA_VERSION})
            _alembic(conn, "stamp", HEAD)
            return
        if not insp.has_table("alembic_version"):
            if conn.dialect.name != "sqlite":
                raise PatchbenchError(f"results store {name}: tables without a schema version; not a patchbench store?")
            _alembic(conn, "upgrade", "0003")  # legacy.to_schema3, then stamped 0003
        _alembic(conn, "upgrade", "head")
