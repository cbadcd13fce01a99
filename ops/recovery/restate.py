"""Restate: rewind a job to a savepoint and let the current code replay the later batches, then report.

A restatement is a recovery operation (`restate`) that the supervisor's reconcile loop carries out
step by step (`ops.control.policy` has the state machine): stop the driver, rewind, let the driver
replay the queue, and once the queue is empty and the last replayed batch is committed, write the
summary (batches, rows before and after) to the ledger and Slack. `restate` records the request
and runs reconcile passes until the loop has finished it; if that process dies, any later pass
(the job's supervision DAG, `warden reconcile JOB`) finishes it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

import pyarrow.parquet as pq

from ops.driver.checkpoint import log_entries, sink_files
from ops.exceptions import RewindError
from ops.recovery.rewind import request_operation
from ops.spec.job import find_job
from ops.spec.paths import JobPaths
from ops.spec.platform import PlatformConfig

if TYPE_CHECKING:
    # The supervisor finishes restatements (it imports this module); here it is only called.
    from ops.control.supervisor import Supervisor


@dataclass(frozen=True)
class Restatement:
    """What a restatement changed: the batches recomputed and the rows they hold before and after."""

    job: str
    savepoint_id: str
    batch_id: int
    last_batch: int
    rows_before: int
    rows_after: int

    def summary(self) -> str:
        batches = range(self.batch_id + 1, self.last_batch + 1)
        span = f"batches {batches.start}..{batches.stop - 1}" if batches else "no batches"
        return (
            f"restated {self.job} from savepoint {self.savepoint_id} (batch {self.batch_id}): "
            f"{span} recomputed; rows {self.rows_before:,} before, {self.rows_after:,} after"
        )


def last_commit(platform: PlatformConfig, job: str) -> int:
    """The job's highest committed batch, -1 before the first."""
    paths = JobPaths.of(platform, find_job(job, platform.conf_dir))
    return max(log_entries(paths.commits), default=-1)


def rows_written(platform: PlatformConfig, job: str, after: int, upto: int) -> int:
    """Rows in the sink files the job's batches `after` < id <= `upto` committed."""
    sink_log = JobPaths.of(platform, find_job(job, platform.conf_dir)).sink_log
    files = sink_files(sink_log, upto) - sink_files(sink_log, after)
    return sum(pq.ParquetFile(path).metadata.num_rows for path in files)


def restate(
    supervisor: Supervisor,
    job: str,
    *,
    reason: str,
    savepoint_id: str | None = None,
    before: datetime | None = None,
    timeout: float = 1800.0,
    progress: Callable[[str], None] | None = None,
) -> str:
    """Restate `job` from a savepoint (by id, or the newest taken before `before`); the summary.

    The request is checked first (`preflight`: no other operation is open, the savepoint exists,
    is this job's and can be read, the replay can be exact), then recorded; a refusal is a
    `refused` decision row and a RewindError naming every cause, with the job left as it was. The
    reconcile passes run here (or after this process dies, by anyone) check it again, and only
    then stop the driver, rewind, replay and report; the rewind sets the job's desired state to
    running, since a restatement ends with the job running its replayed output. RewindError when
    the loop refused it, or when the replay has not finished within `timeout` seconds (the loop
    keeps at it and reports when it has).
    """
    operation, _ = request_operation(
        supervisor, job, "restate", reason=reason, savepoint_id=savepoint_id, before=before
    )
    ended = supervisor.await_operation(operation.id, timeout=timeout, progress=progress)
    if ended.finished_at is None:
        queued = log_entries(
            JobPaths.of(supervisor.platform, find_job(job, supervisor.platform.conf_dir)).replay
        )
        raise RewindError(
            f"restatement of {job!r} not finished within {timeout:g}s (step {ended.step}, "
            f"{len(queued)} batches still queued for replay); the supervisor keeps at it"
        )
    if ended.failure is not None:
        raise RewindError(ended.failure)
    assert ended.outcome is not None
    return ended.outcome
