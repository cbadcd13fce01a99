"""Alembic environment for the ledger; run through `ops.ledger.migrate`, not a config file."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context

url = context.config.get_main_option("sqlalchemy.url")
assert url is not None, "ops.ledger.migrate sets sqlalchemy.url"
engine = sa.create_engine(url)
with engine.begin() as connection:
    # render_as_batch lets SQLite alter tables in later revisions.
    context.configure(connection=connection, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()
engine.dispose()
