"""Savepoints the loop takes: periodic ones (a running job whose last savepoint attempt is older
than `operations.savepoints.interval_minutes` gets one, taken while it keeps running) and those an
operator asks for (`savepoint`), each followed by the spec's retention. A failed savepoint opens a
`savepoint_failed` alert (the job is not touched) and the next good one resolves it; each one's
outcome goes to the Pushgateway when one is configured.

The savepoint store (boto3) is imported where a savepoint is taken or pruned: the DAG processor,
the triggerer and every reconcile pass import the loop, and most passes take no savepoint.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import timedelta

import structlog

from ops.alerts import Alert
from ops.control.context import Control
from ops.control.policy import TakeSavepoint
from ops.exceptions import JobBusyError, SavepointError, ViewStoreError
from ops.ledger.locks import job_lock
from ops.ledger.records import SavepointRecord
from ops.pushgateway import BatchTask, push_savepoint, push_task_outcome
from ops.spec.job import JobSpec, find_job, load_jobs
from ops.spec.pipelines import TeamPipeline

log = structlog.get_logger("streamwarden.supervisor")


@dataclass(frozen=True)
class SavepointOutcome:
    """A savepoint taken, and what retention deleted after it (or why it could not)."""

    savepoint: SavepointRecord
    pruned: list[str]
    retention_error: str | None = None

    def line(self) -> str:
        sp = self.savepoint
        pruned = f"; retention deleted {len(self.pruned)}" if self.pruned else ""
        failed = f"; retention failed, retried later: {self.retention_error}" if self.retention_error else ""
        return (
            f"savepoint {sp.id} at batch {sp.batch_id}: {sp.total_bytes / 1e6:.1f} MB, "
            f"{sp.uploaded_bytes / 1e6:.1f} MB uploaded{pruned}{failed}"
        )


def savepoint_now(control: Control, job: str, reason: str) -> SavepointOutcome:
    """Take a savepoint of `job` now (running or not) under its lock, as a decision row."""
    ledger = control.ledger
    with job_lock(control.platform, job, "savepoint"):
        spec = find_job(job, control.platform.conf_dir)
        record = ledger.job(job)
        run = ledger.current_run(job)
        decision = ledger.record_decision(
            job, TakeSavepoint.kind, reason, {"requested": True}, run.run_id if run else None
        )
        try:
            outcome = save(control, spec, record.state if record else "UNKNOWN", None)
        except SavepointError as error:
            ledger.set_outcome(decision, f"error: {error}")
            raise
        ledger.set_outcome(decision, outcome.line())
    return outcome


def save(control: Control, spec: JobSpec, state: str, run_url: str | None) -> SavepointOutcome:
    """Take a savepoint and apply retention; a failed savepoint pages (`savepoint_failed`) and
    raises. Retention failing after a good savepoint is only reported: the savepoint stands,
    and retention runs again after the next one and in the platform DAG."""
    from ops.savepoints.store import take_savepoint

    monitoring, alerts = control.platform.monitoring, control.alerts
    started = time.monotonic()
    try:
        record = take_savepoint(control.platform, control.ledger, spec)
    except SavepointError as error:
        push_task_outcome(monitoring, BatchTask.SAVEPOINT, spec.name, succeeded=False)
        job = control.ledger.job(spec.name)
        alerts.raise_alert(
            Alert(
                job=spec.name,
                kind="savepoint_failed",
                severity="warning",
                state=state,
                reason=f"savepoint failed, the job keeps running: {error}",
                last_batch=job.last_batch_id if job else None,
                run_url=run_url,
                runbook=spec.operations.alerts.runbook,
                channel=spec.operations.alerts.channel,
            )
        )
        alerts.deliver_due()
        raise
    alerts.resolve(spec.name, "savepoint_failed", f"savepoint {record.id} taken at batch {record.batch_id}")
    push_savepoint(monitoring, spec, record, time.monotonic() - started)
    try:
        return SavepointOutcome(record, prune(control, spec))
    except SavepointError as error:
        log.warning(
            "retention failed after a savepoint", job=spec.name, savepoint=record.id, error=str(error)
        )
        return SavepointOutcome(record, [], retention_error=str(error))


def prune(control: Control, spec: JobSpec) -> list[str]:
    """Apply the spec's savepoint retention, then forget the view history no rewind can reach any
    more; the ids deleted."""
    from ops.savepoints.store import apply_retention

    policy = spec.operations.savepoints
    deleted = apply_retention(
        control.platform, control.ledger, spec.name, policy.keep_count, timedelta(hours=policy.max_age_hours)
    )
    forget_view_history(control, spec)
    return deleted


def forget_view_history(control: Control, spec: JobSpec) -> None:
    """Drop the changes of the job's view (`pipeline.view`) from before the oldest batch a revert
    can go back to: that of its oldest complete savepoint, or the sink log's newest when that is
    older (a rewind cut the log back, and the driver that reverts the view has not started yet).
    A database that cannot be reached keeps the history until the next retention."""
    if not isinstance(spec.pipeline, TeamPipeline) or spec.pipeline.view is None:
        return
    # Imported here, as the savepoint store: psycopg loads only where a view's history is pruned.
    import psycopg

    from ops import views
    from ops.driver.checkpoint import log_entries
    from ops.savepoints.store import STATUS_COMPLETE
    from ops.spec.paths import JobPaths

    savepoint_batches = [
        sp.batch_id for sp in control.ledger.savepoints(spec.name) if sp.status == STATUS_COMPLETE
    ]
    if not savepoint_batches:
        return
    oldest = min(
        min(savepoint_batches), max(log_entries(JobPaths.of(control.platform, spec).sink_log), default=-1)
    )
    try:
        with views.connected(views.database_url(control.platform)) as connection:
            forgotten = views.forget_before(connection, spec.name, oldest)
    except (ViewStoreError, psycopg.Error) as error:
        log.warning("view history kept", job=spec.name, error=str(error).splitlines()[0])
        return
    if forgotten:
        log.info("view history forgotten", job=spec.name, before_batch=oldest, changes=forgotten)


def prune_all(control: Control) -> list[str]:
    """Retention for every valid job, running or not; one line per job that had something to say.

    A job whose lock is held (a savepoint or rewind in progress) is skipped until the next run.
    """
    lines = []
    for name, spec in load_jobs(control.platform.conf_dir).specs.items():
        try:
            with job_lock(control.platform, name, "retention", timeout=0):
                deleted = prune(control, spec)
        except JobBusyError as busy:
            lines.append(f"{name}: skipped, {busy}")
            continue
        except SavepointError as error:
            lines.append(f"{name}: retention failed: {error}")
            continue
        if deleted:
            lines.append(f"{name}: deleted savepoints {', '.join(deleted)}")
    return lines


def find_savepoint(control: Control, job: str, savepoint_id: str | None) -> SavepointRecord:
    """The job's savepoint `savepoint_id`; SavepointError naming the command that lists them."""
    savepoint = next((sp for sp in control.ledger.savepoints(job) if sp.id == savepoint_id), None)
    if savepoint is None:
        raise SavepointError(f"job {job!r} has no savepoint {savepoint_id!r} (see `warden savepoints {job}`)")
    return savepoint
