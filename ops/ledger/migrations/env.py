"""Alembic environment for the ledger; run through `ops.ledger.migrate`, not a config file.

Processes that open a new ledger at once (two supervisors starting, Airflow's components) migrate
it one after the other, each in one transaction: the second finds it at the newest revision and
does nothing. On PostgreSQL the transaction holds an advisory lock; on SQLite it is `BEGIN
IMMEDIATE`, which takes the database's write lock at once (Python's sqlite3 would otherwise run
each CREATE TABLE in a transaction of its own, and the second process trip over the first's).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import context
from sqlalchemy.engine import Connection

# Any fixed key: it only has to differ from the job locks' (ops.ledger.locks.advisory_key).
MIGRATION_LOCK_KEY = 0x5357_4D49_4752_4154  # "SWMIGRAT"
SQLITE_BUSY_TIMEOUT_MS = 30000

url = context.config.get_main_option("sqlalchemy.url")
assert url is not None, "ops.ledger.migrate sets sqlalchemy.url"
engine = sa.create_engine(url)
if engine.dialect.name == "sqlite":

    @sa.event.listens_for(engine, "connect")
    def _driver_leaves_transactions_to_us(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        dbapi_connection.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")

    @sa.event.listens_for(engine, "begin")
    def _begin_immediate(connection: Connection) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")


with engine.begin() as connection:
    if connection.dialect.name == "postgresql":
        connection.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
    # render_as_batch lets SQLite alter tables in later revisions.
    context.configure(connection=connection, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()
engine.dispose()
