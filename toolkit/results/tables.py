"""The store's tables, defined once (SQLAlchemy Core) for both engines: SQLite and PostgreSQL.

This is the layout at the newest schema (`SCHEMA_VERSION`); toolkit/results/migrations/ brings an
older store to it. Text that is sorted or compared (recipe names, timestamps, ids) is bytewise on
both engines (PostgreSQL's `COLLATE "C"`), so a listing's order never depends on the engine.
JSON columns are canonical JSON text on both (toolkit/results/records.canonical_json).

- `runs`: one row per run with its full provenance (toolkit/results/records.RunRow), plus three
  columns the store derives for indexed look-ups: `seq` (insertion order), `imported_file_sha256`
  / `imported_rows_sha256` (an import's content hashes) and `track_recipe` (`track`'s recipe).
- `samples`: one row per measured value.
- `artifacts`: a run's files outside the database (logs, answers, GPU series, traces): path,
  sha256, size, so a missing or altered file is reported, not trusted.
- `schema_version`: the version as a number, read also by patchbench releases before Alembic
  (they refuse a store newer than they understand).
"""

from __future__ import annotations

import sqlalchemy as sa

SCHEMA_VERSION = 4
STATUSES = ("running", "ok", "failed", "invalid", "interrupted")
POINT_KINDS = ("batch", "concurrency")

# Text compared bytewise on PostgreSQL too (SQLite's default BINARY collation already is).
Key = sa.Text().with_variant(sa.Text(collation="C"), "postgresql")
# Insertion order: SQLite's INTEGER is 64-bit; PostgreSQL needs BIGINT for an identity column.
Seq = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

metadata = sa.MetaData()


def _json(name: str, default: str = "{}") -> sa.Column:
    return sa.Column(name, sa.Text, nullable=False, server_default=default)


runs = sa.Table(
    "runs", metadata,
    sa.Column("run_id", Key, primary_key=True),
    sa.Column("recipe", Key, nullable=False),
    sa.Column("status", Key, nullable=False),
    _json("recipe_resolved"), _json("lock"), _json("tree_hashes"),
    sa.Column("env_key", Key),
    sa.Column("sglang_version", sa.Text),
    sa.Column("flashinfer_version", sa.Text),
    _json("arch_list", "[]"),
    sa.Column("bench_driver", sa.Text),
    _json("bench_params"),
    sa.Column("bench_key", Key),
    _json("server_argv", "[]"), _json("server_info"),
    sa.Column("config_verified", sa.Integer),
    _json("verification", "[]"), _json("machine"),
    sa.Column("gpu_key", Key, nullable=False, server_default="none"),
    _json("env_vars"),
    sa.Column("repeat", sa.Integer, nullable=False, server_default="0"),
    sa.Column("group_id", Key),
    sa.Column("started_at", Key),
    sa.Column("finished_at", Key),
    _json("timings"),
    sa.Column("error", sa.Text),
    _json("log_paths"),
    sa.Column("log_tail", sa.Text),
    sa.Column("pid", sa.Integer),
    sa.Column("host", sa.Text),
    sa.Column("pid_started", sa.Double),
    _json("extra"),
    sa.Column("identity", Key),
    # schema 4: derived by the store, never part of a RunRow
    sa.Column("seq", Seq, sa.Identity(), nullable=False),
    sa.Column("imported_file_sha256", Key),
    sa.Column("imported_rows_sha256", Key),
    sa.Column("track_recipe", Key),
    sa.CheckConstraint(f"status IN ({', '.join(repr(s) for s in STATUSES)})", name="runs_status"),
)
sa.Index("runs_recipe", runs.c.recipe, runs.c.status)
sa.Index("runs_env_key", runs.c.env_key)
sa.Index("runs_group", runs.c.group_id)
sa.Index("runs_identity", runs.c.identity)
sa.Index("runs_order", runs.c.started_at, runs.c.seq)
sa.Index("runs_seq", runs.c.seq)  # SQLite numbers a new run MAX(seq) + 1 (store.py)
sa.Index("runs_imported_file", runs.c.imported_file_sha256)
sa.Index("runs_imported_rows", runs.c.imported_rows_sha256)
sa.Index("runs_track", runs.c.track_recipe)

samples = sa.Table(
    "samples", metadata,
    sa.Column("id", sa.Integer().with_variant(sa.BigInteger(), "postgresql"), primary_key=True,
              autoincrement=True),
    sa.Column("run_id", Key, sa.ForeignKey("runs.run_id", ondelete="CASCADE"), nullable=False),
    sa.Column("metric", Key, nullable=False),
    sa.Column("value", sa.Double, nullable=False),
    sa.Column("unit", sa.Text, nullable=False),
    sa.Column("point", sa.Integer, nullable=False),
    sa.Column("point_kind", sa.Text, nullable=False),
    sa.Column("repeat", sa.Integer, nullable=False, server_default="0"),
    sa.CheckConstraint(f"point_kind IN ({', '.join(repr(k) for k in POINT_KINDS)})", name="samples_point_kind"),
)
sa.Index("samples_run", samples.c.run_id, samples.c.metric, samples.c.point)

artifacts = sa.Table(
    "artifacts", metadata,
    sa.Column("run_id", Key, sa.ForeignKey("runs.run_id", ondelete="CASCADE"), primary_key=True),
    sa.Column("name", Key, primary_key=True),
    sa.Column("path", sa.Text, nullable=False),
    sa.Column("sha256", Key, nullable=False),
    sa.Column("size", sa.BigInteger, nullable=False),
)

schema_version = sa.Table(
    "schema_version", metadata,
    sa.Column("version", sa.Integer, nullable=False),
)
