"""Alembic's environment for the store: always run by toolkit/results/migrations.upgrade on the
store's own connection (inside its transaction), never from a command line or an alembic.ini."""

from alembic import context

from toolkit.results.tables import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():  # a no-op: the store's transaction is already open
    context.run_migrations()
