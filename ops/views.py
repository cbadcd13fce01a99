"""The views jobs publish (`pipeline.view`): one key-value table in PostgreSQL, written batch by batch.

A job with a view treats its sink as the view's changelog: each row of a committed batch is the new
value of its key, or a deletion (a null value). The driver's publisher (`ops.driver.view_publisher`)
applies each committed batch here in one transaction, in batch order, so a reader of
`view_current` sees whole batches only. Three tables, shared by every job:

    view_current(job, key, value, batch)   the view: each key's value, and the batch that wrote it
    view_changes(job, key, batch, value)   every change a batch made (null value: deleted), kept
                                           so a rewind can recompute what a key was at a batch
    view_batches(job, batch, keys, published_at)
                                           the batches applied: a batch applies once (idempotent)

A rewind or restate cuts the sink's log back to a savepoint's batch; `revert_after` then removes
what later batches wrote, in one transaction: their changes and batch rows go, and each key they
touched gets the value of its newest change at or before that batch again (or goes, if it had none).
Savepoint retention bounds the history: once no rewind can go back before a batch, `forget_before`
drops what a revert to it or later never reads.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import psycopg
from psycopg.types.json import Jsonb

from ops.exceptions import SecretNotFoundError, ViewStoreError
from ops.secrets import lookup_secret
from ops.spec.platform import PlatformConfig, url_without_password

# Serializes the tables' creation: two drivers creating them at once collide on PostgreSQL's
# catalog otherwise (`CREATE TABLE IF NOT EXISTS` is not atomic). Any constant of the platform's own.
_SCHEMA_LOCK = 0x5354_5657
_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS view_batches (
        job text NOT NULL, batch bigint NOT NULL, keys integer NOT NULL,
        published_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (job, batch))""",
    """CREATE TABLE IF NOT EXISTS view_changes (
        job text NOT NULL, key text NOT NULL, batch bigint NOT NULL, value jsonb,
        PRIMARY KEY (job, key, batch))""",
    """CREATE TABLE IF NOT EXISTS view_current (
        job text NOT NULL, key text NOT NULL, value jsonb NOT NULL, batch bigint NOT NULL,
        PRIMARY KEY (job, key))""",
)

# One key's change in a batch: its new value, or None for a deletion.
Changes = Mapping[str, Any]


@dataclass(frozen=True)
class ViewRow:
    """One key of a view: its value, and the sink batch that last wrote it."""

    key: str
    value: Any
    batch: int


@dataclass(frozen=True)
class ViewSummary:
    """What a view holds: how many keys, the newest batch applied, and the first keys by name."""

    job: str
    keys: int
    last_batch: int | None
    rows: list[ViewRow]


def database_url(platform: PlatformConfig) -> str:
    """The views' database, as psycopg takes it, with the password `views.password` names when it
    names one; a `ViewStoreError` when platform.yaml names no database or the password cannot be
    read."""
    url = platform.view_database_url
    if url is None:
        raise ViewStoreError(
            "no database for views: set views.url in platform.yaml, or keep the embedded PostgreSQL "
            "server (postgres)"
        )
    try:
        password = lookup_secret(platform.views.password)
    except SecretNotFoundError as error:
        raise ViewStoreError(f"views.password: {error}") from error
    return psycopg_url(url if password is None else with_password(url, password.reveal()))


def with_password(url: str, password: str) -> str:
    """`url` (with a user and no password) with `password` for its user, quoted for a URL."""
    parts = urlsplit(url)
    user, _, host = parts.netloc.rpartition("@")
    return urlunsplit(parts._replace(netloc=f"{user}:{quote(password, safe='')}@{host}"))


def psycopg_url(url: str) -> str:
    """A PostgreSQL URL as psycopg takes it: the SQLAlchemy spelling the ledger's URLs use
    (`postgresql+psycopg://`) is accepted too."""
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


def connect(url: str) -> psycopg.Connection[Any]:
    """A connection to the views' database with the tables in place. It commits each statement by
    itself: a function here that writes more than one wraps them in a transaction of its own."""
    try:
        connection = psycopg.connect(url, autocommit=True, connect_timeout=10)
        with connection.transaction():
            connection.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
            for statement in _SCHEMA:
                connection.execute(statement)
    except psycopg.OperationalError as error:
        raise ViewStoreError(
            f"cannot reach the views' database {url_without_password(url)}: {error}"
        ) from error
    return connection


@contextmanager
def connected(url: str) -> Iterator[psycopg.Connection[Any]]:
    """`connect`, closed on exit."""
    connection = connect(url)
    try:
        yield connection
    finally:
        connection.close()


def applied_batch(connection: psycopg.Connection[Any], job: str) -> int:
    """The newest batch of `job` applied to its view (-1 before the first)."""
    row = connection.execute("SELECT max(batch) FROM view_batches WHERE job = %s", (job,)).fetchone()
    return -1 if row is None or row[0] is None else int(row[0])


def apply_batch(connection: psycopg.Connection[Any], job: str, batch: int, changes: Changes) -> bool:
    """Apply one batch's changes in one transaction; False when the batch was applied before."""
    with connection.transaction():
        inserted = connection.execute(
            "INSERT INTO view_batches (job, batch, keys) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
            (job, batch, len(changes)),
        ).rowcount
        if not inserted:
            return False
        with connection.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO view_changes (job, key, batch, value) VALUES (%s, %s, %s, %s)",
                [(job, key, batch, _json(value)) for key, value in changes.items()],
            )
            cursor.executemany(
                """INSERT INTO view_current (job, key, value, batch) VALUES (%s, %s, %s, %s)
                   ON CONFLICT (job, key) DO UPDATE SET value = EXCLUDED.value, batch = EXCLUDED.batch""",
                [(job, key, _json(value), batch) for key, value in changes.items() if value is not None],
            )
        deleted = [key for key, value in changes.items() if value is None]
        if deleted:
            connection.execute("DELETE FROM view_current WHERE job = %s AND key = ANY(%s)", (job, deleted))
    return True


def revert_after(connection: psycopg.Connection[Any], job: str, batch: int) -> int:
    """Undo every batch of `job` after `batch`, in one transaction; how many keys it recomputed."""
    with connection.transaction():
        touched = [
            key
            for (key,) in connection.execute(
                "DELETE FROM view_changes WHERE job = %s AND batch > %s RETURNING key", (job, batch)
            ).fetchall()
        ]
        connection.execute("DELETE FROM view_batches WHERE job = %s AND batch > %s", (job, batch))
        keys = sorted(set(touched))
        connection.execute("DELETE FROM view_current WHERE job = %s AND key = ANY(%s)", (job, keys))
        connection.execute(
            """INSERT INTO view_current (job, key, value, batch)
               SELECT job, key, value, batch FROM (
                   SELECT DISTINCT ON (key) job, key, value, batch FROM view_changes
                   WHERE job = %s AND key = ANY(%s) ORDER BY key, batch DESC
               ) AS newest WHERE value IS NOT NULL""",
            (job, keys),
        )
    return len(keys)


def forget_before(connection: psycopg.Connection[Any], job: str, batch: int) -> int:
    """Drop the history of `job`'s view that no revert to `batch` or later needs, in one
    transaction; how many changes went.

    A revert to such a batch gives each key its newest change at or before it, so of a key's changes
    up to `batch` only the newest stays, and not even that one when it is a deletion (a key with
    no change is gone as well); the batch rows before `batch` go too, but never the newest applied.
    """
    with connection.transaction():
        forgotten = connection.execute(
            """DELETE FROM view_changes AS change USING (
                   SELECT DISTINCT ON (key) key, batch, value FROM view_changes
                   WHERE job = %(job)s AND batch <= %(batch)s ORDER BY key, batch DESC
               ) AS newest
               WHERE change.job = %(job)s AND change.key = newest.key AND (
                   change.batch < newest.batch OR (change.batch = newest.batch AND newest.value IS NULL))""",
            {"job": job, "batch": batch},
        ).rowcount
        connection.execute(
            """DELETE FROM view_batches WHERE job = %(job)s AND batch < LEAST(
                   %(batch)s, (SELECT max(batch) FROM view_batches WHERE job = %(job)s))""",
            {"job": job, "batch": batch},
        )
    return forgotten


def read_view(connection: psycopg.Connection[Any], job: str, key: str | None = None) -> list[ViewRow]:
    """The view of `job` (one key's row with `key`), by key, in one snapshot."""
    if key is None:
        rows = connection.execute(
            "SELECT key, value, batch FROM view_current WHERE job = %s ORDER BY key", (job,)
        )
    else:
        rows = connection.execute(
            "SELECT key, value, batch FROM view_current WHERE job = %s AND key = %s", (job, key)
        )
    return [ViewRow(key, value, int(batch)) for key, value, batch in rows.fetchall()]


def summarize_view(connection: psycopg.Connection[Any], job: str, limit: int) -> ViewSummary:
    """How many keys the view of `job` holds, its newest batch, and its first `limit` keys."""
    with connection.transaction():
        count = connection.execute("SELECT count(*) FROM view_current WHERE job = %s", (job,)).fetchone()
        rows = connection.execute(
            "SELECT key, value, batch FROM view_current WHERE job = %s ORDER BY key LIMIT %s", (job, limit)
        ).fetchall()
        last = applied_batch(connection, job)
    return ViewSummary(
        job,
        0 if count is None else int(count[0]),
        None if last < 0 else last,
        [ViewRow(key, value, int(batch)) for key, value, batch in rows],
    )


def _json(value: Any) -> Jsonb | None:
    """A value as PostgreSQL's jsonb (timestamps and dates as ISO text), None as SQL null."""
    if value is None:
        return None
    return Jsonb(value, dumps=lambda obj: json.dumps(obj, default=_iso))


def _iso(value: Any) -> str:
    return value.isoformat() if isinstance(value, datetime | date) else str(value)
