"""Output a killed batch left in the sink (files no committed batch lists) goes once the job's
driver is gone: after a run is closed or stopped and before a launch or a take-over
(`clean_sink`), and from housekeeping (`remove_all_orphaned_output`) for files older than the
newest commit. Each removal is a `remove_orphans` decision with the files, bytes and rows it took
(`ops.recovery.orphans` finds and removes them)."""

from __future__ import annotations

import structlog

from ops.control.context import Control
from ops.driver.takeover import checkpoint_lock_taken
from ops.exceptions import JobBusyError, SinkCleanupError
from ops.ledger.locks import job_lock
from ops.recovery.orphans import (
    count_rows,
    find_orphaned_output,
    newest_commit_time,
    remove_orphaned_output,
)
from ops.spec.job import JobSpec, load_jobs
from ops.spec.paths import JobPaths

log = structlog.get_logger("streamwarden.supervisor")


def remove_orphans(
    control: Control, spec: JobSpec, reason: str, *, driver_gone: bool, run_id: str | None = None
) -> str | None:
    """Remove the sink files no committed batch lists; the outcome, or None if there were none.

    `driver_gone` (the caller holds the job's lock, and its run is closed with its process
    group killed, or none is open) allows files of any age; otherwise only those written before
    the newest commit go, which no batch in flight can own. The removal is a `remove_orphans`
    decision, written before the files go, with their count, bytes and rows and the run that
    left them, when known.
    """
    paths = JobPaths.of(control.platform, spec)
    cutoff = None if driver_gone else newest_commit_time(paths)
    if not driver_gone and cutoff is None:
        return None
    try:
        orphans = find_orphaned_output(paths, written_before=cutoff)
        if not orphans.files:
            return None
        rows, unreadable = count_rows(orphans.files)
    except OSError as error:
        raise SinkCleanupError(f"job {spec.name!r}: cannot scan {paths.sink}: {error}") from error
    decision = control.ledger.record_decision(
        spec.name, "remove_orphans", reason, orphans.inputs(rows, unreadable), run_id
    )
    try:
        remove_orphaned_output(orphans)
    except OSError as error:
        control.ledger.set_outcome(decision, f"error: {error}")
        raise SinkCleanupError(f"job {spec.name!r}: cannot remove orphaned output: {error}") from error
    outcome = (
        f"removed {len(orphans.files)} orphaned files ({orphans.total_bytes:,} bytes, {rows:,} rows"
        + (f", {unreadable} unreadable" if unreadable else "")
        + ")"
    )
    control.ledger.set_outcome(decision, outcome)
    log.info("orphaned output removed", job=spec.name, outcome=outcome)
    return outcome


def clean_sink(control: Control, spec: JobSpec, reason: str, run_id: str | None = None) -> None:
    """Remove the job's orphaned output of any age, its driver being gone (the caller holds the
    job's lock). Leftovers only mislead readers that bypass the sink log: a failed cleanup never
    keeps the job from running, and housekeeping tries again."""
    with checkpoint_lock_taken(JobPaths.of(control.platform, spec).runtime) as taken:
        if not taken:
            # A driver of the job runs its query after all (a standby that got in): the files
            # of its batch in flight are not orphans. Housekeeping removes real ones later.
            log.warning("orphaned output kept: a driver holds the checkpoint lock", job=spec.name)
            return
        try:
            remove_orphans(control, spec, reason, driver_gone=True, run_id=run_id)
        except SinkCleanupError as error:
            log.warning("orphaned output kept", job=spec.name, error=str(error))


def remove_all_orphaned_output(control: Control) -> list[str]:
    """Housekeeping for every valid job, running or not: orphaned files older than its newest
    commit. One line per job that had something to say; a job whose lock is held is skipped."""
    lines = []
    for name, spec in load_jobs(control.platform.conf_dir).specs.items():
        try:
            with job_lock(control.platform, name, "sink cleanup", timeout=0):
                outcome = remove_orphans(
                    control,
                    spec,
                    "housekeeping: output older than the newest commit that no batch lists",
                    driver_gone=False,
                )
        except JobBusyError as busy:
            lines.append(f"{name}: skipped, {busy}")
            continue
        except SinkCleanupError as error:
            lines.append(f"{name}: {error}")
            continue
        if outcome is not None:
            lines.append(f"{name}: {outcome}")
    return lines
