"""Warm standby take-over: the grant and the checkpoint lock that fence it.

A warm standby (`operations.restart.warm_standby`) is a second driver of a job with its JVM and
SparkSession up and its query planned but not started. It takes over the job's checkpoint only
when two fences agree, so two drivers can never run the job's query at once:

1. The grant (`takeover.json` in the job's runtime directory), written by the supervisor under the
   job lock, and only after it has confirmed the active driver dead: its pid with its start ticks
   gone and nothing left in its process group. The grant names the one standby run it is for; a
   stale standby (another run id, an older config) waits on and is retired by the supervisor.
2. The checkpoint lock (`checkpoint.lock` beside it): an exclusive lock that every driver's JVM
   takes before its query may start and holds until that JVM exits. The JVM is what writes the
   checkpoint and the sink, and it can outlive its Python driver for a moment after a kill -9, so
   the lock lives in the JVM, not in Python: the kernel drops it when that process is gone. A
   grant written in error (a supervisor bug, a hand-made file) still cannot start a second query
   while any driver's JVM lives. The supervisor reads its holder too (`checkpoint_lock_holder`): no
   grant while a JVM other than the standby's holds it; and it removes "orphaned" sink output only
   while it holds the lock itself (`checkpoint_lock_taken`), so never a file of a batch in flight.

Until it is granted, a standby writes nothing the supervisor reads as the job's (no heartbeat, no
metrics port); its own state (`starting`, `ready`, `failed`) goes to `standby.json`.
"""

from __future__ import annotations

import fcntl
import json
import os
import struct
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import structlog

from ops.atomic import write_atomically

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

GRANT_FILE = "takeover.json"
STANDBY_FILE = "standby.json"
CHECKPOINT_LOCK_FILE = "checkpoint.lock"
# How often a standby looks for its grant, and a driver retries the checkpoint lock.
POLL_SECONDS = 0.05
# How often a driver still waiting for the checkpoint lock says so in its log.
WAITING_LOG_SECONDS = 10.0

StandbyState = Literal["starting", "ready", "failed"]

log = structlog.get_logger("streamwarden.takeover")


@dataclass(frozen=True)
class Grant:
    """The supervisor's permission for one standby run to take over the job's checkpoint."""

    standby_run_id: str
    replaces_run_id: str | None
    granted_at: float


@dataclass(frozen=True)
class StandbyStatus:
    """What a standby driver says of itself before it is granted (`at`: epoch seconds)."""

    run_id: str
    state: StandbyState
    at: float
    detail: str = ""


def write_grant(runtime_dir: Path, grant: Grant) -> None:
    """Grant the take-over (atomically). Only the supervisor calls this, under the job lock, after
    it confirmed the active driver dead."""
    write_atomically(runtime_dir / GRANT_FILE, json.dumps(asdict(grant)))


def read_grant(runtime_dir: Path) -> Grant | None:
    """The newest grant of the job, or None."""
    try:
        return Grant(**json.loads((runtime_dir / GRANT_FILE).read_text()))
    except FileNotFoundError:
        return None


def wait_for_grant(runtime_dir: Path, run_id: str, stop_requested: Callable[[], bool]) -> Grant | None:
    """Block until a grant names `run_id`; None when a stop is requested first.

    A grant for another run (an earlier take-over, another standby) is not this standby's, however
    new: it keeps waiting.
    """
    while not stop_requested():
        grant = read_grant(runtime_dir)
        if grant is not None and grant.standby_run_id == run_id:
            return grant
        time.sleep(POLL_SECONDS)
    return None


def write_standby_status(runtime_dir: Path, status: StandbyStatus) -> None:
    write_atomically(runtime_dir / STANDBY_FILE, json.dumps(asdict(status)))


def read_standby_status(runtime_dir: Path, run_id: str) -> StandbyStatus | None:
    """What standby `run_id` last said of itself; None if nothing (or another run's file)."""
    try:
        status = StandbyStatus(**json.loads((runtime_dir / STANDBY_FILE).read_text()))
    except FileNotFoundError:
        return None
    return status if status.run_id == run_id else None


# struct flock on Linux x86-64/aarch64: l_type, l_whence, l_start, l_len, l_pid (+ padding).
_FLOCK = "hhqqii"


def checkpoint_lock_holder(runtime_dir: Path) -> int | None:
    """The pid of the process (a driver's JVM) that holds the job's checkpoint lock now, or None:
    a query of the job may run while it is held. Java's `FileChannel.lock` takes a POSIX record
    lock on Linux, which `F_GETLK` reports with its owner, without taking it."""
    try:
        descriptor = os.open(runtime_dir / CHECKPOINT_LOCK_FILE, os.O_RDWR)
    except FileNotFoundError:
        return None
    try:
        query = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0, 0)
        lock_type, _, _, _, pid, _ = struct.unpack(_FLOCK, fcntl.fcntl(descriptor, fcntl.F_GETLK, query))
    finally:
        os.close(descriptor)
    return None if lock_type == fcntl.F_UNLCK else int(pid)


@contextmanager
def checkpoint_lock_taken(runtime_dir: Path) -> Iterator[bool]:
    """Hold the job's checkpoint lock for the block if no driver's JVM holds it (True), else do
    nothing (False). The supervisor removes orphaned sink output under it: no driver can start a
    batch meanwhile (a driver that tries waits a poll and retries)."""
    runtime_dir.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(runtime_dir / CHECKPOINT_LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.lockf(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            yield False
            return
        yield True
    finally:
        # Closing the descriptor drops the lock.
        os.close(descriptor)


class CheckpointLock:
    """The job's checkpoint lock, held by this driver's JVM from `acquire` until the JVM exits."""

    def __init__(self, spark: SparkSession, runtime_dir: Path) -> None:
        self.path = runtime_dir / CHECKPOINT_LOCK_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        jvm: Any = spark.sparkContext._jvm
        # The file stays open in the JVM, referenced from here, for the driver's life: a closed
        # (or garbage-collected) channel would drop the lock.
        self._channel = jvm.java.io.RandomAccessFile(str(self.path), "rw").getChannel()
        self._lock: Any = None

    def acquire(self, stop_requested: Callable[[], bool]) -> bool:
        """Take the lock, waiting while another driver's JVM holds it; False if a stop is requested
        first."""
        waiting_since = time.monotonic()
        said = waiting_since
        while self._lock is None:
            if stop_requested():
                return False
            self._lock = self._channel.tryLock()
            if self._lock is None:
                if time.monotonic() - said >= WAITING_LOG_SECONDS:
                    said = time.monotonic()
                    log.warning(
                        "waiting for the checkpoint lock: another driver of the job still runs",
                        lock=str(self.path),
                        waited_seconds=round(said - waiting_since),
                    )
                time.sleep(POLL_SECONDS)
        return True

    def release(self) -> None:
        """Drop the lock once the query has stopped (a driver's JVM exits right after anyway)."""
        self._channel.close()
        self._lock = None
