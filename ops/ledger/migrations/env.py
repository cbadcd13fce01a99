"""Alembic environment for the ledger; run through `ops.ledger.migrate`, not a config file.

On PostgreSQL the migration holds an advisory lock for its transaction, so processes that open a
new ledger at once (two supervisors starting) migrate it one after the other: the second finds it
at the newest revision and does nothing.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context

# Any fixed key: it only has to differ from the job locks' (ops.control.locks.advisory_key).
MIGRATION_LOCK_KEY = 0x5357_4D49_4752_4154  # "SWMIGRAT"

url = context.config.get_main_option("sqlalchemy.url")
assert url is not None, "ops.ledger.migrate sets sqlalchemy.url"
engine = sa.create_engine(url)
with engine.begin() as connection:
    if connection.dialect.name == "postgresql":
        connection.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
    # render_as_batch lets SQLite alter tables in later revisions.
    context.configure(connection=connection, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()
engine.dispose()
