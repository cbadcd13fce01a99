"""The per-job operation lock: one of reconcile, savepoint, rewind, restate, upgrade at a time.

An exclusive `fcntl` lock on `<runtime>/jobs/<job>/.operation.lock`, taken by whichever process
operates on the job (an Airflow task, the triggerer, the CLI). The holder writes what it is doing
into the file, so a waiter can say what it waits for. The kernel drops the lock when the holder
dies, kill -9 included, so a crashed operation never leaves the job locked. The lock is per host,
like the local launch backend.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

import structlog

from ops.exceptions import JobBusyError
from ops.spec.platform import PlatformConfig

log = structlog.get_logger("streamwarden.locks")
_POLL_SECONDS = 0.2


@contextmanager
def job_lock(
    platform: PlatformConfig, job: str, operation: str, timeout: float | None = None
) -> Iterator[None]:
    """Hold the job's operation lock while the block runs.

    Waits for the current holder (forever with `timeout=None`, logging once what it waits for);
    raises `JobBusyError` naming the holder when `timeout` runs out. Not re-entrant: an operation
    must not take the lock again inside its own block.
    """
    path = platform.job_runtime_dir(job) / ".operation.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    deadline = None if timeout is None else time.monotonic() + timeout
    with path.open("a+") as lock_file:
        waiting_logged = False
        while True:
            try:
                fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                lock_file.seek(0)
                holder = lock_file.read().strip() or "another operation"
                if deadline is not None and time.monotonic() >= deadline:
                    raise JobBusyError(job, holder) from None
                if not waiting_logged:
                    log.info("waiting for job lock", job=job, operation=operation, holder=holder)
                    waiting_logged = True
                time.sleep(_POLL_SECONDS)
        try:
            lock_file.seek(0)
            lock_file.truncate()
            lock_file.write(f"{operation} (pid {os.getpid()})")
            lock_file.flush()
            yield
        finally:
            lock_file.seek(0)
            lock_file.truncate()
            lock_file.flush()
            fcntl.flock(lock_file, fcntl.LOCK_UN)
