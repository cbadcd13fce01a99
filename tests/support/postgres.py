"""A real PostgreSQL server for the tests: one per pytest process (each xdist worker), started by
the platform's own `EmbeddedPostgres`, and a fresh database per test that asks for one: empty, or
for a test that wants a ledger, a copy of one migrated once per server (`CREATE DATABASE ...
TEMPLATE`).

Its data directory is made under the system temp directory rather than pytest's: as root the
server runs as an unprivileged user, who cannot pass pytest's per-user directory (mode 0700).
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa
from psycopg import sql
from sqlalchemy.pool import Pool

from ops.embedded.services import EmbeddedPostgres
from ops.ledger.store import Ledger
from tests.support.ports import free_test_port

# The database on each worker's server that `postgres_ledger_database` copies.
LEDGER_TEMPLATE = "ledger_template"


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[EmbeddedPostgres]:
    """The worker's PostgreSQL server on 127.0.0.1, stopped and deleted after the last test."""
    root = Path(tempfile.mkdtemp(prefix="streamwarden-pg-"))
    root.chmod(0o755)
    server = EmbeddedPostgres(root / "data", free_test_port(), root / "runtime")
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


def _admin(server: EmbeddedPostgres) -> psycopg.Connection[tuple[object, ...]]:
    return psycopg.connect(server.conninfo(), autocommit=True)


@pytest.fixture
def postgres_connections() -> Iterator[None]:
    """Closes, after the test, every psycopg connection a SQLAlchemy pool opened during it.

    Pools keep their connections open, and one collected while open warns (an error here).
    """
    opened: list[psycopg.Connection[object]] = []

    def remember(dbapi_connection: object, _record: object) -> None:
        if isinstance(dbapi_connection, psycopg.Connection):
            opened.append(dbapi_connection)

    sa.event.listen(Pool, "connect", remember)
    try:
        yield
    finally:
        sa.event.remove(Pool, "connect", remember)
        for connection in opened:
            connection.close()


@pytest.fixture(scope="session")
def postgres_ledger_template(postgres_server: EmbeddedPostgres) -> str:
    """The name of a database on the worker's server migrated to the newest ledger schema, once."""
    with _admin(postgres_server) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(LEDGER_TEMPLATE)))
    # Disposed: `CREATE DATABASE ... TEMPLATE` refuses a template anyone is connected to.
    Ledger.open(postgres_server.url(LEDGER_TEMPLATE)).engine.dispose()
    return LEDGER_TEMPLATE


@contextmanager
def _throwaway_database(server: EmbeddedPostgres, template: str | None) -> Iterator[str]:
    """A new database (empty, or a copy of `template`), dropped on exit (`WITH (FORCE)`: the
    sessions the test left are ended)."""
    name = f"test_{uuid.uuid4().hex[:16]}"
    create = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
    if template is not None:
        create = sql.SQL("{} TEMPLATE {}").format(create, sql.Identifier(template))
    with _admin(server) as admin:
        admin.execute(create)
    yield server.url(name)
    with _admin(server) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture
def postgres_database(postgres_server: EmbeddedPostgres, postgres_connections: None) -> Iterator[str]:
    """The SQLAlchemy URL of a new, empty database on the worker's server, dropped after the test."""
    with _throwaway_database(postgres_server, None) as url:
        yield url


@pytest.fixture
def postgres_ledger_database(
    postgres_server: EmbeddedPostgres, postgres_ledger_template: str, postgres_connections: None
) -> Iterator[str]:
    """Like `postgres_database`, but a copy of the worker's migrated ledger (the server copies its
    files: cheaper than running every migration again)."""
    with _throwaway_database(postgres_server, postgres_ledger_template) as url:
        yield url
