"""A real PostgreSQL server for the tests: one per pytest process (each xdist worker), started by
the platform's own `EmbeddedPostgres`, and a fresh database per test that asks for one.

Its data directory is made under the system temp directory rather than pytest's: as root the
server runs as an unprivileged user, who cannot pass pytest's per-user directory (mode 0700).
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa
from psycopg import sql
from sqlalchemy.pool import Pool

from ops.embedded.services import EmbeddedPostgres
from tests.support.ports import free_test_port


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


@pytest.fixture
def postgres_database(postgres_server: EmbeddedPostgres, postgres_connections: None) -> Iterator[str]:
    """The SQLAlchemy URL of a new, empty database on the worker's server, dropped after the test
    (`WITH (FORCE)`: the sessions the test left are ended)."""
    name = f"test_{uuid.uuid4().hex[:16]}"
    with _admin(postgres_server) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    yield postgres_server.url(name)
    with _admin(postgres_server) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
