"""The guard every writer of a job's warehouse table passes: the table lock, with no recovery open.

A rewind, restate or upgrade changes the job's sink over several reconcile passes: the rewind
removes the sink-log entries and files of the batches it replays, and the replay writes them
again, minutes later. A compaction or backfill publish that listed the sink in between would
publish a partition with the replayed batches' rows missing, and readers would see fewer rows
than either the old or the restated version. So a table writer waits while an operation is open
on the job and, if it does not end in time, skips the job with a decision row (the restatement
republishes what it changed; the next night compacts the rest). The table lock keeps a rewind's
removal of sink files out of a writer's run (`ops.recovery.rewind.complete_rewind` takes it), and
checking again under the lock closes the gap between the check and the lock.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import structlog

from ops.exceptions import RecoveryOpenError
from ops.ledger.locks import table_lock
from ops.ledger.store import Ledger
from ops.spec.platform import PlatformConfig

log = structlog.get_logger("streamwarden.warehouse")
POLL_SECONDS = 2.0
# What a skipped writer's decision row is called.
SKIPPED_ACTION = "table_write_skipped"


@contextmanager
def table_writer(
    platform: PlatformConfig,
    ledger: Ledger,
    job: str,
    operation: str,
    *,
    recovery_wait: float,
    lock_timeout: float | None,
) -> Iterator[None]:
    """Hold `job`'s table lock, with no rewind, restate or upgrade open on it, while the block runs.

    Waits up to `recovery_wait` seconds for an open operation to end (polling the ledger, holding
    no lock meanwhile), then raises RecoveryOpenError, having recorded the skip as a decision
    row; JobBusyError when another writer holds the table past `lock_timeout`.
    """
    deadline = time.monotonic() + recovery_wait
    waiting_logged = False
    while True:
        if ledger.operation(job) is None:
            with table_lock(platform, job, operation, timeout=lock_timeout):
                if ledger.operation(job) is None:
                    yield
                    return
        open_operation = ledger.operation(job)
        if open_operation is not None and time.monotonic() >= deadline:
            skipped = RecoveryOpenError(
                job, operation, open_operation.kind, open_operation.step, open_operation.requested_at
            )
            decision = ledger.record_decision(
                job,
                SKIPPED_ACTION,
                f"{operation} while a {open_operation.kind} is open",
                {"operation": operation, "open": open_operation.kind, "step": open_operation.step},
            )
            ledger.set_outcome(decision, f"skipped: {skipped}")
            raise skipped
        if open_operation is not None and not waiting_logged:
            log.info(
                "waiting for the job's recovery to end",
                job=job,
                operation=operation,
                kind=open_operation.kind,
            )
            waiting_logged = True
        time.sleep(POLL_SECONDS)
