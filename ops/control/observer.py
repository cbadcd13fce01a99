"""Observing: the read-only look a reconcile pass starts from (`job_view`), the job's record with
its open run, process, heartbeat, backlog, standby, open operation and scaling window, as the pure
`ops.control.policy.decide` takes it. Nothing here writes, but for the job's record, created on
first sight."""

from __future__ import annotations

from dataclasses import replace

from ops.control.context import Control
from ops.control.health import Observation, assess, observe
from ops.control.policy import JobView, RecoveryProgress, StandbyView, TakeSavepoint
from ops.control.scaling import observe_scaling
from ops.driver.checkpoint import log_entries
from ops.driver.takeover import read_standby_status
from ops.ledger.records import OperationRecord, RunRecord
from ops.spec.job import JobSpec
from ops.spec.paths import JobPaths
from ops.states import OperationKind

# How many of a job's newest operations the view looks through for its last finished rescale.
LOOKED_BACK_OPERATIONS = 10


def observe_job(control: Control, spec: JobSpec) -> Observation:
    """A read-only look at the job's open run, process, heartbeat and input backlog."""
    observation = observe(control.platform, control.ledger, control.backend, spec, control.clock())
    run, heartbeat = observation.run, observation.heartbeat
    if (
        run is not None
        and heartbeat is not None
        and heartbeat.event == "progress"
        and heartbeat.batch_id is not None
    ):
        # The run's batches as its newest heartbeat tells them (the pass records them), so an
        # upgrade's readiness is judged on what the driver has committed by now.
        first = run.first_batch_id if run.first_batch_id is not None else heartbeat.batch_id
        run = replace(run, first_batch_id=first, last_batch_id=heartbeat.batch_id)
        observation = replace(observation, run=run)
    return observation


def job_view(control: Control, spec: JobSpec) -> JobView:
    """Everything `decide` needs to know of the job, read now."""
    ledger = control.ledger
    job = control.known_job(spec)
    observation = observe_job(control, spec)
    closed = tuple(
        r
        for r in ledger.runs(spec.name, limit=spec.operations.restart.budget + 2)
        if r.stopped_at is not None
    )
    operation = ledger.operation(spec.name)
    paths = JobPaths.of(control.platform, spec)
    return JobView(
        job=job,
        spec=spec,
        observation=observation,
        assessment=assess(observation, spec.operations),
        closed_runs=closed,
        open_alert_kinds=frozenset(a.kind for a in control.alerts.open_incidents(spec.name)),
        last_savepoint_attempt=next(
            (d.at for d in ledger.decisions(spec.name, limit=1, action=TakeSavepoint.kind)), None
        ),
        operation=operation,
        progress=_progress(control, spec, operation) if operation is not None else RecoveryProgress(),
        standby=_standby_view(control, spec),
        scaling=observe_scaling(
            spec, ledger, observation.run, observation.heartbeat, list(paths.landing.values())
        )
        if observation.run is not None
        else None,
        last_rescale=next(
            (
                op
                for op in ledger.operations(spec.name, limit=LOOKED_BACK_OPERATIONS)
                if op.kind == OperationKind.SCALE and op.finished_at is not None
            ),
            None,
        ),
    )


def dry_run_driver(control: Control, operation: OperationRecord) -> RunRecord | None:
    """The upgrade's dry-run driver as a run the backend can watch and kill (not in `runs`)."""
    if operation.dry_run_pid is None or operation.dry_run_id is None:
        return None
    return RunRecord(
        run_id=operation.dry_run_id,
        job=operation.job,
        backend=control.backend.name,
        pid=operation.dry_run_pid,
        app_id=operation.dry_run_app_id,
        metrics_port=None,
        log_path=None,
        config_version=operation.candidate_version or "",
        started_at=operation.dry_run_started_at or operation.requested_at,
        stopped_at=None,
        exit_reason=None,
    )


def _standby_view(control: Control, spec: JobSpec) -> StandbyView:
    """A read-only look at the job's warm standby: its open record, whether it lives, and the
    ones closed before it (only read when the job has standbys)."""
    standbys = control.ledger.standbys(spec.name, limit=spec.operations.restart.budget + 2)
    record = next((s for s in standbys if s.stopped_at is None), None)
    status = (
        None
        if record is None
        else read_standby_status(JobPaths.of(control.platform, spec).runtime, record.run_id)
    )
    return StandbyView(
        record=record,
        alive=record is not None and control.backend.is_alive(record.as_run()),
        ready=status is not None and status.state == "ready",
        closed=tuple(s for s in standbys if s.stopped_at is not None),
    )


def _progress(control: Control, spec: JobSpec, operation: OperationRecord) -> RecoveryProgress:
    """A read-only look at an open operation's work: the replay queue, the newest commit, and
    the dry-run driver with its verdict once it is gone (until the verdict is recorded)."""
    paths = JobPaths.of(control.platform, spec)
    dry_run = dry_run_driver(control, operation)
    judged = operation.dry_run_passed_at is not None or operation.failure is not None
    alive = dry_run is not None and not judged and control.backend.is_alive(dry_run)
    error = None
    if dry_run is not None and not judged and not alive:
        # The recovery wing is imported where it is needed: a pass without an upgrade (the DAG
        # parser, `warden status`) must not load its clients (Parquet, S3).
        from ops.recovery.upgrade import dry_run_verdict

        assert operation.dry_run_id is not None and operation.savepoint_batch is not None
        error = dry_run_verdict(control.platform, spec.name, operation.dry_run_id, operation.savepoint_batch)
    return RecoveryProgress(
        pending_replay=len(log_entries(paths.replay)),
        last_commit=max(log_entries(paths.commits), default=-1),
        dry_run_alive=alive,
        dry_run_error=error,
        first_commit_at=_first_commit_after_stop(control, spec, operation),
    )


def _first_commit_after_stop(control: Control, spec: JobSpec, operation: OperationRecord) -> float | None:
    """A rescale's first batch committed after the stopped driver was gone (its commit file's
    time, epoch seconds), or None: where its restart cost ends."""
    if operation.kind != OperationKind.SCALE or operation.stop_requested_at is None:
        return None
    stopped = [
        run.stopped_at
        for run in control.ledger.runs(spec.name, limit=2)
        if run.stopped_at is not None and run.stopped_at >= operation.stop_requested_at
    ]
    if not stopped:
        return None
    gone = stopped[0].timestamp()
    times = []
    for files in log_entries(JobPaths.of(control.platform, spec).commits).values():
        for path in files:
            try:
                times.append(path.stat().st_mtime)
            except FileNotFoundError:
                continue
    return min((at for at in times if at > gone), default=None)
