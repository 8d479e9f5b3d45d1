"""Schema 4: both engines. Insertion order as a column (`seq`: SQLite's rowid has no PostgreSQL
twin), an import's content hashes and `track`'s recipe as indexed columns (no JSON functions in a
query), and the `artifacts` table (a run's files: path, sha256, size)."""

import json

import sqlalchemy as sa
from alembic import op

from toolkit.results.tables import Key

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def _derived(extra_text: str | None) -> dict:
    extra = json.loads(extra_text) if extra_text else {}
    imported = extra.get("imported") or {}
    track = extra.get("track") or {}
    return {"f": imported.get("file_sha256"), "r": imported.get("rows_sha256"),
            "t": track.get("recipe") if isinstance(track, dict) else None}


def upgrade() -> None:
    for name in ("seq", "imported_file_sha256", "imported_rows_sha256", "track_recipe"):
        op.add_column("runs", sa.Column(name, sa.Integer if name == "seq" else Key, nullable=True))
    bind = op.get_bind()
    bind.execute(sa.text("UPDATE runs SET seq = rowid"))  # schema 3 is SQLite: its order was rowid
    for run_id, extra in bind.execute(sa.text("SELECT run_id, extra FROM runs")).fetchall():
        d = _derived(extra)
        if any(d.values()):
            bind.execute(sa.text("UPDATE runs SET imported_file_sha256 = :f, imported_rows_sha256 = :r, "
                                 "track_recipe = :t WHERE run_id = :id"), {**d, "id": run_id})
    op.create_index("runs_order", "runs", ["started_at", "seq"])
    op.create_index("runs_seq", "runs", ["seq"])
    op.create_index("runs_imported_file", "runs", ["imported_file_sha256"])
    op.create_index("runs_imported_rows", "runs", ["imported_rows_sha256"])
    op.create_index("runs_track", "runs", ["track_recipe"])
    op.create_table(
        "artifacts",
        sa.Column("run_id", Key, sa.ForeignKey("runs.run_id", ondelete="CASCADE"), primary_key=True),
        sa.Column("name", Key, primary_key=True),
        sa.Column("path", sa.Text, nullable=False),
        sa.Column("sha256", Key, nullable=False),
        sa.Column("size", sa.BigInteger, nullable=False),
    )
    bind.execute(sa.text("UPDATE schema_version SET version = 4"))


def downgrade() -> None:
    raise NotImplementedError("the store is never migrated backwards")
