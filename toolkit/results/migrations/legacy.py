"""Schema 1..3, as the releases before Alembic migrated a SQLite store (their SQL is
toolkit/results/schema.py, never edited): run on a file older than schema 3 before Alembic
takes it on from revision 0003."""

from __future__ import annotations

import json
from dataclasses import fields

import sqlalchemy as sa

from toolkit.results.identity import identity_of
from toolkit.results.records import RUN_FIELDS, RunRow
from toolkit.results.schema import MIGRATIONS

JSON_FIELDS = frozenset({
    "recipe_resolved", "lock", "tree_hashes", "arch_list", "bench_params", "server_argv",
    "server_info", "verification", "machine", "env_vars", "timings", "log_paths", "extra",
})
JSON_DEFAULTS = {f.name: f.default_factory for f in fields(RunRow) if f.name in JSON_FIELDS}  # type: ignore[misc]


# Provenance columns many runs of one listing share word for word (their recipe, lock, machine):
# parsed once per listing (`decode_json(..., shared=)`); nothing mutates a stored run's values.
SHARED_JSON = frozenset({"recipe_resolved", "lock", "tree_hashes", "arch_list", "bench_params", "server_argv",
                         "server_info", "machine", "env_vars"})


def decode_json(d: dict, shared: dict | None = None) -> dict:
    """A stored row's JSON text columns parsed (absent or empty ones get the field's default).
    `shared`: a cache (text -> value) for the SHARED_JSON columns, kept by the caller for one listing."""
    for k in JSON_FIELDS & set(d):
        text = d.get(k)
        if not text:
            d[k] = JSON_DEFAULTS[k]()
        elif shared is not None and k in SHARED_JSON:
            got = shared.get(text)
            d[k] = got if got is not None else shared.setdefault(text, json.loads(text))
        else:
            d[k] = json.loads(text)
    return d


def stored_version(conn: sa.Connection) -> int:
    """The `schema_version` row (0 for a store without one)."""
    if not sa.inspect(conn).has_table("schema_version"):
        return 0
    row = conn.execute(sa.text("SELECT version FROM schema_version")).fetchone()
    return int(row[0]) if row else 0


def to_schema3(conn: sa.Connection) -> None:
    """Bring a SQLite store at schema 0 (new), 1 or 2 to schema 3, in the caller's transaction."""
    raw = conn.connection.dbapi_connection
    conn.exec_driver_sql("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
    current = stored_version(conn)
    for v in range(current + 1, 4):
        for stmt in MIGRATIONS[v].split(";"):
            if stmt.strip():
                raw.execute(stmt)  # PRAGMA writable_schema and friends: the driver's own cursor
    if 0 < current < 3:
        _backfill_identities(conn)
    if current == 0:
        conn.exec_driver_sql("INSERT INTO schema_version (version) VALUES (3)")
    else:
        conn.exec_driver_sql("UPDATE schema_version SET version = 3")


def _backfill_identities(conn: sa.Connection) -> None:
    cols = [c for c in RUN_FIELDS if c != "identity"]
    rows = conn.exec_driver_sql(f"SELECT {', '.join(f'{chr(34)}{c}{chr(34)}' for c in cols)} FROM runs").fetchall()
    for r in rows:
        d = decode_json(dict(zip(cols, r)))
        conn.exec_driver_sql("UPDATE runs SET identity = ? WHERE run_id = ?", (identity_of(d), d["run_id"]))
