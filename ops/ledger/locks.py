"""The per-job locks: the operation lock (its driver) and the table lock (its warehouse table).

Whichever process operates on a job's driver and checkpoint (reconcile, savepoint, rewind, restate,
upgrade: an Airflow task, the triggerer, the CLI) takes the job's operation lock first
(`job_lock`). Whatever writes the job's warehouse table or deletes the sink files it is made from
(compaction, a backfill's publish, a rewind's removal of sink files) takes the job's table lock
(`table_lock`). They are two locks because they guard two things: an hour-long compaction must
never keep the supervisor from restarting a dead driver. A process that needs both takes the
operation lock first; one that holds the table lock asks for the operation lock only with a
timeout, so the two orders can never wait on each other for ever.

Where a lock lives follows the ledger, because the ledger is what the processes share:

- SQLite ledger (one host): an exclusive `fcntl` lock on `<runtime>/jobs/<job>/.<scope>.lock`.
  The holder writes what it is doing into the file, so a waiter can say what it waits for.
- PostgreSQL ledger (supervisors on several hosts): a session-level advisory lock
  (`pg_try_advisory_lock`) on a key derived from the job name, held on a connection of its own
  for the whole operation. The holder names itself in that session's `application_name`, which a
  waiter reads from `pg_stat_activity`.

Either way the lock goes with its holder: the kernel drops a dead process's file lock and the
server ends a dead client's session, kill -9 included, so a crashed operation never leaves the job
locked. A PostgreSQL restart ends every session too, so a holder that outlives one has lost its
lock; it finds out when it next writes to the ledger, which fails until the server is back.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import socket
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Protocol

import sqlalchemy as sa
import structlog

from ops.exceptions import JobBusyError, LedgerError
from ops.spec.platform import PlatformConfig, url_without_password

log = structlog.get_logger("streamwarden.locks")
_POLL_SECONDS = 0.2
# PostgreSQL truncates application_name to 63 bytes.
_APPLICATION_NAME_BYTES = 63
_CONNECT_TIMEOUT_SECONDS = 10


class _Lock(Protocol):
    def try_acquire(self) -> bool:
        """Take the lock if it is free; never waits."""
        ...

    def holder(self) -> str:
        """Who holds the lock, for the waiter's log line and `JobBusyError`."""
        ...

    def release(self) -> None: ...

    def close(self) -> None:
        """Let go of the file or connection (and so of the lock, if still held)."""
        ...


class _FileLock:
    """An `fcntl` lock on a file the holder writes its operation into (one host)."""

    def __init__(self, path: Path, note: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.note = note
        self.file = path.open("a+")

    def try_acquire(self) -> bool:
        try:
            fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        self._write(self.note)
        return True

    def holder(self) -> str:
        self.file.seek(0)
        return self.file.read().strip() or "another operation"

    def release(self) -> None:
        self._write("")
        fcntl.flock(self.file, fcntl.LOCK_UN)

    def close(self) -> None:
        self.file.close()

    def _write(self, text: str) -> None:
        self.file.seek(0)
        self.file.truncate()
        self.file.write(text)
        self.file.flush()


# A lock's scope: what it guards, and the name of its file (SQLite) or of its key's hash (PostgreSQL).
OPERATION_SCOPE = "operation"
TABLE_SCOPE = "table"
_KEY_PREFIX = {OPERATION_SCOPE: "streamwarden job lock", TABLE_SCOPE: "streamwarden table lock"}


def advisory_key(job: str, scope: str = OPERATION_SCOPE) -> int:
    """The advisory key of the job's lock of `scope`: 64 bits of a hash of its name, signed as
    PostgreSQL's bigint."""
    digest = hashlib.sha256(f"{_KEY_PREFIX[scope]}:{job}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def libpq_url(ledger_url: str) -> str:
    """The ledger's SQLAlchemy URL as psycopg takes it (no `+driver` in the scheme)."""
    return sa.make_url(ledger_url).set(drivername="postgresql").render_as_string(hide_password=False)


class _AdvisoryLock:
    """A session-level PostgreSQL advisory lock on a connection of its own (any number of hosts)."""

    def __init__(self, ledger_url: str, job: str, scope: str, note: str) -> None:
        # Imported here: a SQLite ledger never needs the PostgreSQL driver (a tenth of a second).
        import psycopg

        self.job = job
        self.key = advisory_key(job, scope)
        self.where = url_without_password(ledger_url)
        application_name = note.encode()[:_APPLICATION_NAME_BYTES].decode(errors="ignore")
        try:
            self.connection = psycopg.connect(
                libpq_url(ledger_url),
                autocommit=True,
                application_name=application_name,
                connect_timeout=_CONNECT_TIMEOUT_SECONDS,
            )
        except psycopg.Error as exc:
            raise LedgerError(f"cannot take the lock of job {job!r}: ledger at {self.where}: {exc}") from exc

    def try_acquire(self) -> bool:
        return bool(self._query("SELECT pg_try_advisory_lock(%s)", (self.key,)))

    def holder(self) -> str:
        # A bigint key shows in pg_locks as its high and low 32 bits (objsubid 1 marks the form).
        holder = self._query(
            "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
            " WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1"
            " AND l.classid = %s AND l.objid = %s",
            ((self.key >> 32) & 0xFFFFFFFF, self.key & 0xFFFFFFFF),
        )
        return str(holder or "another operation")

    def release(self) -> None:
        try:
            held = self._query("SELECT pg_advisory_unlock(%s)", (self.key,))
        except LedgerError as error:
            # The session is gone, and the lock went with it.
            log.warning("job lock lost with the ledger connection", job=self.job, error=str(error))
            return
        if not held:
            log.warning("job lock was lost while held (the ledger session ended)", job=self.job)

    def close(self) -> None:
        self.connection.close()

    def _query(self, query: str, params: tuple[int, ...]) -> object:
        import psycopg

        try:
            row = self.connection.execute(query, params).fetchone()
        except psycopg.Error as exc:
            raise LedgerError(f"job {self.job!r} lock: ledger at {self.where}: {exc}") from exc
        return None if row is None else row[0]


def _holder_note(operation: str) -> str:
    return f"{operation} (pid {os.getpid()} on {socket.gethostname()})"


def job_lock(
    platform: PlatformConfig, job: str, operation: str, timeout: float | None = None
) -> AbstractContextManager[None]:
    """Hold the job's operation lock (its driver and checkpoint) while the block runs.

    Waits for the current holder (forever with `timeout=None`, logging once what it waits for);
    raises `JobBusyError` naming the holder when `timeout` runs out, and `LedgerError` when a
    PostgreSQL ledger cannot be reached. Not re-entrant: an operation must not take the lock
    again inside its own block.
    """
    return _scoped_lock(platform, job, OPERATION_SCOPE, operation, timeout)


def table_lock(
    platform: PlatformConfig, job: str, operation: str, timeout: float | None = None
) -> AbstractContextManager[None]:
    """Hold the job's table lock (its warehouse table and the sink files it is made from) while
    the block runs; waits and fails as `job_lock` does."""
    return _scoped_lock(platform, job, TABLE_SCOPE, operation, timeout)


@contextmanager
def _scoped_lock(
    platform: PlatformConfig, job: str, scope: str, operation: str, timeout: float | None
) -> Iterator[None]:
    ledger_url = platform.resolved_ledger_url
    note = _holder_note(operation)
    lock: _Lock
    if sa.make_url(ledger_url).get_backend_name() == "postgresql":
        lock = _AdvisoryLock(ledger_url, job, scope, note)
    else:
        lock = _FileLock(platform.job_runtime_dir(job) / f".{scope}.lock", note)
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        waiting_logged = False
        while not lock.try_acquire():
            holder = lock.holder()
            if deadline is not None and time.monotonic() >= deadline:
                raise JobBusyError(job, holder)
            if not waiting_logged:
                log.info("waiting for lock", job=job, scope=scope, operation=operation, holder=holder)
                waiting_logged = True
            time.sleep(_POLL_SECONDS)
        try:
            yield
        finally:
            lock.release()
    finally:
        lock.close()
