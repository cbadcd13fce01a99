"""Restate: suspend, rewind to a savepoint, let the current code replay the later batches, report.

The replay itself is the driver's (`ops.driver.replay`); this module drives the supervisor through
the steps and sends the summary (batches and rows before and after) to the ledger and Slack.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime

import pyarrow.parquet as pq
from botocore.client import BaseClient

from ops.control.alerts import Alert
from ops.control.supervisor import Supervisor
from ops.driver.checkpoint import log_entries, sink_files
from ops.driver.replay import pending_replay
from ops.exceptions import RewindError
from ops.recovery.rewind import RewindPlan, rewind_job
from ops.spec.job import find_job
from ops.spec.paths import JobPaths
from ops.spec.platform import PlatformConfig

REPLAY_POLL_SECONDS = 2.0


@dataclass(frozen=True)
class Restatement:
    """What a restatement changed: the batches recomputed and the rows they hold before and after."""

    plan: RewindPlan
    rows_after: int

    def summary(self) -> str:
        batches = self.plan.replay_batches
        span = f"batches {batches.start}..{batches.stop - 1}" if batches else "no batches"
        return (
            f"restated {self.plan.job} from savepoint {self.plan.savepoint.id} (batch {self.plan.batch_id}): "
            f"{span} recomputed; rows {self.plan.sink_rows:,} before, {self.rows_after:,} after"
        )


def last_commit(platform: PlatformConfig, job: str) -> int:
    """The job's highest committed batch, -1 before the first."""
    return max(log_entries(platform.checkpoint_root / job / "commits"), default=-1)


def rows_written(platform: PlatformConfig, job: str, after: int, upto: int) -> int:
    """Rows in the sink files the job's batches `after` < id <= `upto` committed."""
    sink_log = platform.lake_root / find_job(job, platform.conf_dir).pipeline.sink.path / "_spark_metadata"
    files = sink_files(sink_log, upto) - sink_files(sink_log, after)
    return sum(pq.ParquetFile(path).metadata.num_rows for path in files)


def await_replay(supervisor: Supervisor, job: str, last_batch: int, timeout: float) -> None:
    """Reconcile the job until its replay queue is empty and batch `last_batch` is committed.

    The supervisor launches the driver and restarts it if the replay fails; a replay that does not
    finish within `timeout` seconds raises RewindError and leaves the job to its supervisor.
    """
    platform = supervisor.platform
    deadline = time.monotonic() + timeout
    paths = JobPaths.of(platform, find_job(job, platform.conf_dir))
    while pending_replay(paths) or last_commit(platform, job) < last_batch:
        if time.monotonic() > deadline:
            raise RewindError(
                f"replay of {job!r} did not reach batch {last_batch} within {timeout:g}s "
                f"({len(pending_replay(paths))} batches still queued); the supervisor keeps at it"
            )
        supervisor.reconcile(job)
        time.sleep(REPLAY_POLL_SECONDS)


def restate(
    supervisor: Supervisor,
    job: str,
    *,
    reason: str,
    savepoint_id: str | None = None,
    before: datetime | None = None,
    timeout: float = 1800.0,
    s3: BaseClient | None = None,
) -> Restatement:
    """Suspend -> rewind -> resume (the driver replays with the current code) -> summary.

    The summary goes to the ledger (a `restate` decision) and to Slack. The job is resumed even if
    it was suspended before: a restatement ends with the job running its replayed output.
    """
    why = f"restate: {reason}"
    supervisor.request(job, "suspend", why)
    supervisor.reconcile(job)
    plan = rewind_job(supervisor, job, reason=why, savepoint_id=savepoint_id, before=before, s3=s3)
    decision = supervisor.ledger.record_decision(
        job,
        "restate",
        reason,
        {"savepoint": plan.savepoint.id, "batch_id": plan.batch_id, "last_batch": plan.last_batch},
    )
    supervisor.request(job, "resume", why)
    try:
        await_replay(supervisor, job, plan.last_batch, timeout)
    except RewindError as exc:
        supervisor.ledger.set_outcome(decision, f"failed: {exc}")
        raise
    restatement = Restatement(plan, rows_written(supervisor.platform, job, plan.batch_id, plan.last_batch))
    supervisor.ledger.set_outcome(decision, restatement.summary())
    spec = find_job(job, supervisor.platform.conf_dir)
    supervisor.alerts.notify(
        Alert(
            job=job,
            kind="restated",
            severity="info",
            state="RUNNING",
            reason=f"{restatement.summary()}. Why: {reason}",
            last_batch=last_commit(supervisor.platform, job),
            run_url=None,
            runbook=spec.operations.alerts.runbook,
            channel=spec.operations.alerts.channel,
        )
    )
    supervisor.alerts.deliver_due()
    return restatement
