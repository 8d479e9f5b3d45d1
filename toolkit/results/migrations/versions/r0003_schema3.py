"""Schema 3: the layout of the releases before Alembic (toolkit/results/schema.py made it, in
three steps). A store of theirs is stamped at this revision once those steps have run."""

from alembic import op

revision = "0003"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    from toolkit.results.migrations.legacy import to_schema3

    bind = op.get_bind()
    if bind.dialect.name != "sqlite":
        raise RuntimeError("schema 3 exists only as SQLite; a new PostgreSQL store starts at the newest schema")
    to_schema3(bind)


def downgrade() -> None:
    raise NotImplementedError("the store is never migrated backwards")
