"""The supervisor: a level-triggered reconcile loop over each job (docs/architecture.md §3).

Every pass is observe (read-only) -> record -> validate -> decide (pure) -> act. `decide` sees only
values, so the restart policy, backoff and storm rules are tested without processes. Status and
each intended action are written to the ledger before acting, so a crash mid-action leaves a
trail the next pass can read; every automated action is a decision row with reason and inputs.

The same observe + decide, run without acting, is what the Airflow watcher polls: when the plan
differs from what the ledger says, something needs a pass now.

Output a killed batch left in the sink (files no committed batch lists) goes once the job's
driver is gone: after a run is closed or stopped and before a launch, and from housekeeping
(`remove_all_orphaned_output`) for files older than the newest commit. Each removal is a
`remove_orphans` decision with the files, bytes and rows it took (`ops.recovery.orphans`).

Periodic savepoints are one of those actions: a running job whose last savepoint attempt is older
than `operations.savepoints.interval_minutes` gets one, taken while it keeps running. A failed
savepoint opens a `savepoint_failed` alert (the job is not touched) and the next good one
resolves it; each good one is followed by the spec's retention.

Warm standbys: `TakeOver` grants the job's checkpoint to its standby only after the backend has
confirmed the previous driver gone (pid with start ticks, and nothing left in its process group),
under the job lock; the orphaned output is removed before the grant, then the standby's driver is
recorded as the job's run. `ops.driver.takeover` has the grant and the checkpoint lock.

Recovery operations (rewind, restate, upgrade; `ops.control.policy` has their state machines) go
through the same loop. `start_operation` records one, `await_operation` runs passes until the
loop has closed it; each pass writes the operation's step before acting and the facts each step
establishes after it, so whichever process runs the next pass carries on where the last stopped.
A rewind or restate is checked for every refusal before its driver is stopped (`StopAfterCheck`)
and again before the rewind: a refused one is closed with the driver and the desired state as
they were.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import structlog

from ops.alerts import Alert, AlertCenter
from ops.clock import utcnow
from ops.control.health import Observation, assess, measured_speed, observe
from ops.control.launcher import LaunchBackend, LocalProcessBackend
from ops.control.policy import (
    Action,
    CloseRun,
    EndDryRun,
    FinishOperation,
    InstallSpec,
    JobView,
    Launch,
    LaunchStandby,
    Plan,
    RaiseAlert,
    RecommendScale,
    RecoveryProgress,
    Rescale,
    ResolveAlert,
    Restore,
    RetireStandby,
    RollBack,
    StandbyView,
    StartDryRun,
    StopAfterCheck,
    StopDriver,
    SuspendJob,
    TakeOver,
    TakeSavepoint,
    TakeUpgradeSavepoint,
    decide,
)
from ops.control.scaling import RESCALED, Scale, desired_scale, low_since, observe_scaling, run_scale
from ops.driver.checkpoint import log_entries
from ops.driver.takeover import (
    Grant,
    checkpoint_lock_holder,
    checkpoint_lock_taken,
    read_standby_status,
    write_grant,
)
from ops.exceptions import (
    ConfigError,
    JobBusyError,
    LaunchError,
    LedgerError,
    OperationInProgressError,
    SavepointError,
    SinkCleanupError,
    TakeOverRefused,
    UpgradeError,
    WardenError,
)
from ops.ledger.locks import job_lock
from ops.ledger.store import Ledger, OperationRecord, RunRecord, SavepointRecord, StandbyRecord
from ops.pushgateway import BatchTask, push_savepoint, push_task_outcome
from ops.recovery.orphans import (
    count_rows,
    find_orphaned_output,
    newest_commit_time,
    remove_orphaned_output,
)
from ops.spec.analysis import find_valid_job, run_analysis, unanalysed, with_verdicts
from ops.spec.job import JobSpec, find_job, job_file, load_jobs
from ops.spec.paths import JobPaths
from ops.spec.platform import PlatformConfig
from ops.states import FAILURE, Desired, Lifecycle, OperationKind, Result, Step

if TYPE_CHECKING:
    from ops.recovery.rewind import Preflight

log = structlog.get_logger("streamwarden.supervisor")
# The savepoint store (boto3) is imported by the methods that copy or prune: the DAG processor, the
# triggerer and every reconcile pass import this module, and most passes take no savepoint.

# How often `await_operation` runs a pass while it waits for an operation's step to complete.
OPERATION_POLL_SECONDS = 1.0
# How long a take-over waits for the previous driver's group (its JVM) to exit after the kill.
TAKEOVER_CONFIRM_SECONDS = 10.0
# A standby has no query to finish: a stop that takes longer than this is a kill.
STANDBY_STOP_SECONDS = 10.0
# How many of a job's newest operations the view looks through for its last finished rescale.
LOOKED_BACK_OPERATIONS = 10

# --- the loop ----------------------------------------------------------------------------------


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


@dataclass(frozen=True)
class PassSummary:
    """What one reconcile pass did, for the task log and the CLI."""

    job: str
    state: str
    reason: str
    actions: tuple[str, ...]

    def line(self) -> str:
        done = ", ".join(self.actions) or "no action"
        return f"{self.job}: {self.state} ({self.reason}); {done}"


class Supervisor:
    """Runs reconcile passes for the jobs of one platform."""

    def __init__(
        self,
        platform: PlatformConfig,
        ledger: Ledger,
        backend: LaunchBackend,
        alerts: AlertCenter,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.platform = platform
        self.ledger = ledger
        self.backend = backend
        self.alerts = alerts
        self.clock = clock

    @classmethod
    def for_platform(cls, platform: PlatformConfig) -> Supervisor:
        """A supervisor with the platform's ledger, local backend and Slack settings."""
        ledger = Ledger.open(platform.resolved_ledger_url)
        return cls(platform, ledger, LocalProcessBackend(platform), AlertCenter(ledger, platform.slack))

    # observe --------------------------------------------------------------------------------

    def observe(self, spec: JobSpec) -> Observation:
        """A read-only look at the job's open run, process, heartbeat and input backlog."""
        observation = observe(self.platform, self.ledger, self.backend, spec, self.clock())
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

    def view(self, spec: JobSpec) -> JobView:
        job = self.ledger.ensure_job(
            spec.name,
            desired_state=Desired.RUNNING,
            state=Lifecycle.SUSPENDED.name,
            config_version=spec.config_version,
        )
        observation = self.observe(spec)
        closed = tuple(
            r
            for r in self.ledger.runs(spec.name, limit=spec.operations.restart.budget + 2)
            if r.stopped_at is not None
        )
        operation = self.ledger.operation(spec.name)
        paths = JobPaths.of(self.platform, spec)
        return JobView(
            job=job,
            spec=spec,
            observation=observation,
            assessment=assess(observation, spec.operations),
            closed_runs=closed,
            open_alert_kinds=frozenset(a.kind for a in self.alerts.open_incidents(spec.name)),
            last_savepoint_attempt=next(
                (d.at for d in self.ledger.decisions(spec.name, limit=1, action=TakeSavepoint.kind)), None
            ),
            operation=operation,
            progress=self._progress(spec, operation) if operation is not None else RecoveryProgress(),
            standby=self._standby_view(spec),
            scaling=observe_scaling(
                spec, self.ledger, observation.run, observation.heartbeat, list(paths.landing.values())
            )
            if observation.run is not None
            else None,
            last_rescale=next(
                (
                    op
                    for op in self.ledger.operations(spec.name, limit=LOOKED_BACK_OPERATIONS)
                    if op.kind == OperationKind.SCALE and op.finished_at is not None
                ),
                None,
            ),
        )

    def _standby_view(self, spec: JobSpec) -> StandbyView:
        """A read-only look at the job's warm standby: its open record, whether it lives, and the
        ones closed before it (only read when the job has standbys)."""
        standbys = self.ledger.standbys(spec.name, limit=spec.operations.restart.budget + 2)
        record = next((s for s in standbys if s.stopped_at is None), None)
        status = (
            None
            if record is None
            else read_standby_status(JobPaths.of(self.platform, spec).runtime, record.run_id)
        )
        return StandbyView(
            record=record,
            alive=record is not None and self.backend.is_alive(record.as_run()),
            ready=status is not None and status.state == "ready",
            closed=tuple(s for s in standbys if s.stopped_at is not None),
        )

    def _progress(self, spec: JobSpec, operation: OperationRecord) -> RecoveryProgress:
        """A read-only look at an open operation's work: the replay queue, the newest commit, and
        the dry-run driver with its verdict once it is gone (until the verdict is recorded)."""
        paths = JobPaths.of(self.platform, spec)
        dry_run = self._dry_run_driver(operation)
        judged = operation.dry_run_passed_at is not None or operation.failure is not None
        alive = dry_run is not None and not judged and self.backend.is_alive(dry_run)
        error = None
        if dry_run is not None and not judged and not alive:
            from ops.recovery.upgrade import dry_run_verdict

            assert operation.dry_run_id is not None and operation.savepoint_batch is not None
            error = dry_run_verdict(self.platform, spec.name, operation.dry_run_id, operation.savepoint_batch)
        return RecoveryProgress(
            pending_replay=len(log_entries(paths.replay)),
            last_commit=max(log_entries(paths.commits), default=-1),
            dry_run_alive=alive,
            dry_run_error=error,
            first_commit_at=self._first_commit_after_stop(spec, operation),
        )

    def _first_commit_after_stop(self, spec: JobSpec, operation: OperationRecord) -> float | None:
        """A rescale's first batch committed after the stopped driver was gone (its commit file's
        time, epoch seconds), or None: where its restart cost ends."""
        if operation.kind != OperationKind.SCALE or operation.stop_requested_at is None:
            return None
        stopped = [
            run.stopped_at
            for run in self.ledger.runs(spec.name, limit=2)
            if run.stopped_at is not None and run.stopped_at >= operation.stop_requested_at
        ]
        if not stopped:
            return None
        gone = stopped[0].timestamp()
        times = []
        for files in log_entries(JobPaths.of(self.platform, spec).commits).values():
            for path in files:
                try:
                    times.append(path.stat().st_mtime)
                except FileNotFoundError:
                    continue
        return min((at for at in times if at > gone), default=None)

    def _dry_run_driver(self, operation: OperationRecord) -> RunRecord | None:
        """The upgrade's dry-run driver as a run the backend can watch and kill (not in `runs`)."""
        if operation.dry_run_pid is None or operation.dry_run_id is None:
            return None
        return RunRecord(
            run_id=operation.dry_run_id,
            job=operation.job,
            backend=self.backend.name,
            pid=operation.dry_run_pid,
            app_id=operation.dry_run_app_id,
            metrics_port=None,
            log_path=None,
            config_version=operation.candidate_version or "",
            started_at=operation.dry_run_started_at or operation.requested_at,
            stopped_at=None,
            exit_reason=None,
        )

    # record ---------------------------------------------------------------------------------

    def _record_observation(self, view: JobView) -> None:
        heartbeat, run = view.observation.heartbeat, view.observation.run
        if heartbeat is None or run is None:
            return
        sample = heartbeat.last_sample
        self.ledger.update_job(
            view.spec.name,
            last_batch_id=heartbeat.batch_id,
            input_rate=sample.input_rows_per_second if sample else None,
            processed_rate=sample.processed_rows_per_second if sample else None,
            backlog=view.observation.backlog_files,
            heartbeat_at=datetime.fromtimestamp(heartbeat.at, tz=self.clock().tzinfo),
        )
        columns: dict[str, Any] = dict(measured_speed(view.observation))
        if heartbeat.batch_id is not None and heartbeat.event == "progress":
            columns.update(first_batch_id=run.first_batch_id, last_batch_id=run.last_batch_id)
        if columns:
            self.ledger.update_run(run.run_id, **columns)

    # the pass -------------------------------------------------------------------------------

    def reconcile(self, job: str, run_url: str | None = None) -> PassSummary:
        """One observe -> record -> validate -> decide -> act pass for `job`."""
        with job_lock(self.platform, job, "reconcile"):
            try:
                spec = find_valid_job(job, self.platform)
            except ConfigError as error:
                return self._invalid_spec(job, error, run_url)
            view = self.view(spec)
            self._record_observation(view)
            plan = decide(view, self.clock())
            self.ledger.update_job(
                job, state=plan.state.name, state_reason=plan.reason, config_version=spec.config_version
            )
            if view.operation is not None and plan.step is not None:
                self.ledger.update_operation(view.operation.id, step=plan.step, **plan.facts)
            if plan.scaling is not None:
                decision = plan.scaling
                self.ledger.update_job(
                    job,
                    recommended_cores=decision.recommended,
                    scale_low_since=low_since(
                        decision.recommended, decision.cores, view.job.scale_low_since, self.clock()
                    ),
                )
            done = tuple(self._act(view, plan, action, run_url) for action in plan.actions)
        self.alerts.deliver_due()
        summary = PassSummary(job, plan.state.name, plan.reason, done)
        log.info("reconcile pass", summary=summary.line())
        return summary

    def _invalid_spec(self, job: str, error: ConfigError, run_url: str | None) -> PassSummary:
        # Keep whatever runs as it is (the last valid spec stays in force) and page once.
        if self.ledger.job(job) is not None:
            self.ledger.update_job(job, state_reason=f"spec invalid: {error}")
        if "config_invalid" not in {a.kind for a in self.alerts.open_incidents(job)}:
            self.alerts.raise_alert(
                Alert(
                    job=job,
                    kind="config_invalid",
                    severity="critical",
                    state="INVALID",
                    reason=str(error),
                    last_batch=None,
                    run_url=run_url,
                )
            )
        self.alerts.deliver_due()
        return PassSummary(job, "INVALID", str(error), ())

    def _act(self, view: JobView, plan: Plan, action: Action, run_url: str | None) -> str:
        job, run = view.spec.name, view.observation.run
        decision = self.ledger.record_decision(
            job, action.kind, action.reason, plan.inputs, run.run_id if run else None
        )
        try:
            outcome = self._execute(view, plan, action, run_url, decision)
        except WardenError as error:
            outcome = f"error: {error}"
            log.error("action failed", job=job, action=action.kind, error=str(error))
        self.ledger.set_outcome(decision, outcome)
        return f"{action.kind}: {outcome}"

    def _execute(self, view: JobView, plan: Plan, action: Action, run_url: str | None, decision: int) -> str:
        spec, run = view.spec, view.observation.run
        match action:
            case Launch():
                self._clean_sink(spec, "before a launch: output of batches that never committed")
                return self._launch(spec)
            case StopDriver(graceful=graceful, exit_reason=exit_reason):
                assert run is not None
                if graceful:
                    ended = self.backend.stop(run, spec.operations.shutdown_timeout_seconds)
                else:
                    self.backend.kill(run)
                    ended = "killed"
                self.ledger.finish_run(run.run_id, exit_reason)
                self._clean_sink(spec, "driver stopped: output of batches that never committed", run.run_id)
                return ended
            case StopAfterCheck(exit_reason=exit_reason):
                return self._stop_after_check(view, exit_reason)
            case CloseRun(exit_reason=exit_reason):
                assert run is not None
                self.backend.kill(run)
                self.ledger.finish_run(run.run_id, exit_reason)
                self._clean_sink(spec, "driver gone: output of batches that never committed", run.run_id)
                return "closed"
            case SuspendJob(reason=reason):
                self.ledger.update_job(spec.name, desired_state=Desired.SUSPENDED)
                return f"desired state set to suspended: {reason}"
            case RaiseAlert(alert_kind=kind, severity=severity, reason=reason):
                heartbeat = view.observation.heartbeat
                alert = Alert(
                    job=spec.name,
                    kind=kind,
                    severity=severity,
                    state=plan.state.name,
                    reason=reason,
                    last_batch=heartbeat.batch_id if heartbeat else view.job.last_batch_id,
                    run_url=run_url,
                    runbook=spec.operations.alerts.runbook,
                    channel=spec.operations.alerts.channel,
                )
                alert_id = self.alerts.raise_alert(alert)
                return f"queued alert {alert_id}" if alert_id is not None else "deduplicated"
            case ResolveAlert(alert_kind=kind, reason=reason):
                self.alerts.resolve(spec.name, kind, reason)
                return "resolved"
            case TakeSavepoint():
                return self._save(spec, plan.state.name, run_url).line()
            case Restore(savepoint_id=savepoint_id):
                return self._restore(view, savepoint_id)
            case TakeUpgradeSavepoint():
                return self._upgrade_savepoint(view)
            case StartDryRun():
                return self._start_dry_run(view)
            case EndDryRun(failure=failure):
                return self._end_dry_run(view, failure)
            case InstallSpec(config_version=config_version):
                return self._install(view, config_version)
            case RollBack(reason=reason):
                self.ledger.update_operation(_open(view).id, failure=reason)
                return f"rolling back: {reason}"
            case FinishOperation(reason=reason, result=result):
                return self._finish(view, result, reason, run_url)
            case LaunchStandby():
                return self._launch_standby(spec)
            case RetireStandby(exit_reason=exit_reason):
                standby = view.standby.record
                assert standby is not None
                ended = self.backend.stop(standby.as_run(), STANDBY_STOP_SECONDS)
                self.ledger.finish_standby(standby.run_id, exit_reason)
                return ended
            case TakeOver():
                return self._take_over(view)
            case Rescale():
                return self._open_rescale(view, action, decision)
            case RecommendScale():
                return "recorded; the job runs on as it is"
        raise AssertionError(f"unhandled action {action!r}")

    # scaling -----------------------------------------------------------------------------------

    def scale_of(self, spec: JobSpec) -> Scale:
        """The scale the job's next driver is launched at (`ops.control.scaling.desired_scale`)."""
        return desired_scale(spec, self.ledger.job(spec.name))

    def _open_rescale(self, view: JobView, rescale: Rescale, decision: int) -> str:
        """Set the job's scale (an operator's pin stays) and open the rescale the next passes carry
        out; its decision row gets the outcome when it is closed."""
        job = view.spec.name
        if not view.job.scale_pinned:
            self.ledger.update_job(
                job,
                scale_cores=rescale.cores,
                scale_max_files=rescale.max_files_per_trigger,
                scale_low_since=None,
            )
        operation = self.ledger.start_operation(
            job,
            OperationKind.SCALE,
            rescale.reason,
            decision,
            Step.REQUESTED,
            from_cores=rescale.from_cores,
            to_cores=rescale.cores,
            to_max_files=rescale.max_files_per_trigger,
            true_rate_before=rescale.true_rate_before,
        )
        target = Scale(rescale.cores, rescale.max_files_per_trigger).describe()
        retired = ""
        standby = view.standby.record
        if standby is not None:
            # It runs the old scale: a new one is launched once the job runs at the new one.
            self.backend.stop(standby.as_run(), STANDBY_STOP_SECONDS)
            self.ledger.finish_standby(standby.run_id, "stopped: rescale")
            retired = f"; standby {standby.run_id} retired"
        return f"rescale to {target} opened (operation {operation.id}){retired}"

    def scale(self, job: str, cores: int | None, reason: str) -> str:
        """An operator's scale: pin the job at `cores` until released, or release it (None) to the
        autoscaler (or the job file's scale when autoscaling is off). The next passes rescale a
        running job to it; the batch size follows the cores in proportion."""
        spec = find_job(job, self.platform.conf_dir)
        if (
            cores is not None
            and spec.operations.stateful
            and cores > spec.operations.resources.shuffle_partitions
        ):
            raise ConfigError(
                job_file(job, self.platform.conf_dir),
                f"cannot pin {cores} cores: a stateful job uses at most its "
                f"resources.shuffle_partitions ({spec.operations.resources.shuffle_partitions}) cores, "
                "which the checkpoint fixes",
            )
        with job_lock(self.platform, job, "scale request"):
            record = self.ledger.ensure_job(
                job,
                desired_state=Desired.RUNNING,
                state=Lifecycle.SUSPENDED.name,
                config_version=spec.config_version,
            )
            current = desired_scale(spec, record)
            changes: dict[str, Any]
            if cores is None:
                changes = {"scale_pinned": False}
                action, said = "scale_release", "pin released"
            else:
                base_files, base_cores = current.max_files_per_trigger, current.cores or cores
                max_files = None if base_files is None else max(1, round(base_files * cores / base_cores))
                changes = {"scale_pinned": True, "scale_cores": cores, "scale_max_files": max_files}
                action, said = "scale_pin", "pinned until released"
            inputs = {"cores": cores, "before": current.describe(), "pinned_before": record.scale_pinned}
            decision = self.ledger.record_decision(job, action, reason, inputs)
            self.ledger.update_job(job, **changes)
            after = desired_scale(spec, self.ledger.job(job))
            outcome = f"{said}: the job runs at {after.describe()}"
            self.ledger.set_outcome(decision, outcome)
        return f"{job}: {outcome} ({reason}); the supervisor rescales a running driver within seconds"

    def await_scale(
        self,
        job: str,
        *,
        timeout: float,
        progress: Callable[[str], None] | None = None,
        poll_seconds: float = OPERATION_POLL_SECONDS,
    ) -> bool:
        """Run reconcile passes until `job` runs at the scale it should, with no rescale open, or
        `timeout` seconds have passed; whether it does. Like `await_operation`, nothing here is
        needed for the rescale to finish: the next pass by anyone carries on."""
        deadline = time.monotonic() + timeout
        said = None
        while True:
            line = self.reconcile(job).line()
            if progress is not None and line != said:
                progress(line)
                said = line
            spec = find_job(job, self.platform.conf_dir)
            run, operation = self.ledger.current_run(job), self.ledger.operation(job)
            settled = operation is None or operation.kind != OperationKind.SCALE
            if settled and run is not None and run_scale(run, spec) == self.scale_of(spec):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(poll_seconds)

    # warm standbys -----------------------------------------------------------------------------

    def _launch_standby(self, spec: JobSpec) -> str:
        run_id = self._run_id(spec)
        scale = self.scale_of(spec)
        driver = self.backend.launch_standby(
            spec.with_scale(scale.cores, scale.max_files_per_trigger), run_id
        )
        self.ledger.start_standby(
            StandbyRecord(
                run_id=run_id,
                job=spec.name,
                backend=self.backend.name,
                pid=driver.pid,
                app_id=driver.app_id,
                log_path=str(driver.log_path),
                config_version=spec.config_version,
                started_at=self.clock(),
            )
        )
        return f"standby {run_id} pid {driver.pid}"

    def _take_over(self, view: JobView) -> str:
        """Grant the checkpoint to the open standby, fenced: this pass holds the job lock, and the
        grant is written only once the previous driver is confirmed gone and no run is open."""
        spec, standby = view.spec, view.standby.record
        assert standby is not None
        previous = view.observation.run or (view.closed_runs[0] if view.closed_runs else None)
        if previous is not None and not self.backend.confirm_gone(previous, TAKEOVER_CONFIRM_SECONDS):
            raise TakeOverRefused(
                f"job {spec.name!r}: driver {previous.pid} of run {previous.run_id} (or a process of "
                f"its group) is still alive {TAKEOVER_CONFIRM_SECONDS:g}s after it was killed; "
                f"standby {standby.run_id} is not granted"
            )
        paths = JobPaths.of(self.platform, spec)
        # A killed JVM's main thread can read as a zombie while its other threads still exit and
        # hold its files: the lock says when it is really gone.
        deadline = time.monotonic() + TAKEOVER_CONFIRM_SECONDS
        while (holder := checkpoint_lock_holder(paths.runtime)) is not None and not self.backend.started_by(
            standby.as_run(), holder
        ):
            if time.monotonic() >= deadline:
                raise TakeOverRefused(
                    f"job {spec.name!r}: process {holder}, not of standby {standby.run_id}, holds "
                    f"{paths.runtime / 'checkpoint.lock'}: another driver's JVM still lives; no grant"
                )
            time.sleep(0.05)
        open_run = self.ledger.current_run(spec.name)
        if open_run is not None:
            raise TakeOverRefused(f"job {spec.name!r}: run {open_run.run_id} is open; no take-over beside it")
        if not self.backend.is_alive(standby.as_run()):
            raise TakeOverRefused(f"job {spec.name!r}: standby {standby.run_id} is gone")
        self._clean_sink(spec, "before a take-over: output of batches that never committed")
        replaces = previous.run_id if previous is not None else None
        write_grant(paths.runtime, Grant(standby.run_id, replaces, time.time()))
        run = self.ledger.promote_standby(standby, replaces, self.clock())
        # The standby was launched at the job's scale; a scale changed since is a rescale later.
        scale = self.scale_of(spec)
        self.ledger.update_run(
            run.run_id, cores=scale.cores, max_files_per_trigger=scale.max_files_per_trigger
        )
        return f"run {run.run_id} pid {run.pid}: standby took over from {replaces or 'no run'}"

    # orphaned sink output ----------------------------------------------------------------------

    def remove_orphaned_output(
        self, spec: JobSpec, reason: str, *, driver_gone: bool, run_id: str | None = None
    ) -> str | None:
        """Remove the sink files no committed batch lists; the outcome, or None if there were none.

        `driver_gone` (the caller holds the job's lock, and its run is closed with its process
        group killed, or none is open) allows files of any age; otherwise only those written before
        the newest commit go, which no batch in flight can own. The removal is a `remove_orphans`
        decision, written before the files go, with their count, bytes and rows and the run that
        left them, when known.
        """
        paths = JobPaths.of(self.platform, spec)
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
        decision = self.ledger.record_decision(
            spec.name, "remove_orphans", reason, orphans.inputs(rows, unreadable), run_id
        )
        try:
            remove_orphaned_output(orphans)
        except OSError as error:
            self.ledger.set_outcome(decision, f"error: {error}")
            raise SinkCleanupError(f"job {spec.name!r}: cannot remove orphaned output: {error}") from error
        outcome = (
            f"removed {len(orphans.files)} orphaned files ({orphans.total_bytes:,} bytes, {rows:,} rows"
            + (f", {unreadable} unreadable" if unreadable else "")
            + ")"
        )
        self.ledger.set_outcome(decision, outcome)
        log.info("orphaned output removed", job=spec.name, outcome=outcome)
        return outcome

    def _clean_sink(self, spec: JobSpec, reason: str, run_id: str | None = None) -> None:
        # Leftovers only mislead readers that bypass the sink log; a failed cleanup never keeps
        # the job from running, and housekeeping tries again.
        with checkpoint_lock_taken(JobPaths.of(self.platform, spec).runtime) as taken:
            if not taken:
                # A driver of the job runs its query after all (a standby that got in): the files
                # of its batch in flight are not orphans. Housekeeping removes real ones later.
                log.warning("orphaned output kept: a driver holds the checkpoint lock", job=spec.name)
                return
            try:
                self.remove_orphaned_output(spec, reason, driver_gone=True, run_id=run_id)
            except SinkCleanupError as error:
                log.warning("orphaned output kept", job=spec.name, error=str(error))

    def remove_all_orphaned_output(self) -> list[str]:
        """Housekeeping for every valid job, running or not: orphaned files older than its newest
        commit. One line per job that had something to say; a job whose lock is held is skipped."""
        lines = []
        for name, spec in load_jobs(self.platform.conf_dir).specs.items():
            try:
                with job_lock(self.platform, name, "sink cleanup", timeout=0):
                    outcome = self.remove_orphaned_output(
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

    # the steps of recovery operations ------------------------------------------------------------
    # The recovery wing is imported where a step runs: importing the supervisor (the DAG parser,
    # `warden status`) must not load its clients (Parquet, S3).

    def _check(self, view: JobView) -> Preflight:
        """The open rewind, restate or rollback checked for every refusal (this pass holds the lock)."""
        from ops.recovery.rewind import preflight

        operation = _open(view)
        return preflight(
            self, view.spec.name, operation.kind, savepoint_id=operation.savepoint_id, operation=operation
        )

    def _stop_after_check(self, view: JobView, exit_reason: str) -> str:
        """Stop the open run for a rewind or restate, only if its check finds no refusal."""
        checked, run = self._check(view), view.observation.run
        assert run is not None
        if checked.plan is None:
            self.ledger.update_operation(_open(view).id, failure=checked.text())
            return f"not stopped, the driver runs on: {checked.text()}"
        ended = self.backend.stop(run, view.spec.operations.shutdown_timeout_seconds)
        self.ledger.finish_run(run.run_id, exit_reason)
        self._clean_sink(view.spec, "driver stopped: output of batches that never committed", run.run_id)
        plan = checked.plan
        return f"check passed (savepoint {plan.savepoint.id}, batch {plan.batch_id}), then stopped: {ended}"

    def _restore(self, view: JobView, savepoint_id: str) -> str:
        """Rewind the stopped job (this pass holds its lock); a refusal fails the operation.

        A restatement's rewind also sets the desired state to running with a fresh restart budget
        (a resume request): it ends with the job running its replayed output. Only here, so a
        refused restatement leaves the desired state as it was.
        """
        from ops.recovery.rewind import complete_rewind

        operation, job = _open(view), view.spec.name
        assert savepoint_id == operation.savepoint_id, "the rewind of an operation is to its savepoint"
        checked = self._check(view)
        if checked.plan is None:
            self.ledger.update_operation(operation.id, failure=checked.text())
            return f"refused: {checked.text()}"
        plan = checked.plan
        # The first plan is the true one: a rewind redone after a crash finds the files of the
        # later batches already gone, and must still report the rows they held.
        self.ledger.update_operation(
            operation.id,
            savepoint_batch=plan.batch_id,
            replay_to=plan.last_batch if operation.replay_to is None else operation.replay_to,
            rows_before=plan.sink_rows if operation.rows_before is None else operation.rows_before,
        )
        complete_rewind(self.platform, self.ledger, plan)
        if operation.kind == OperationKind.RESTATE:
            self.ledger.update_job(job, desired_state=Desired.RUNNING, restart_requested_at=self.clock())
        self.ledger.update_operation(operation.id, rewound_at=self.clock())
        return plan.outcome()

    def _upgrade_savepoint(self, view: JobView) -> str:
        from ops.savepoints.store import take_savepoint

        operation = _open(view)
        try:
            savepoint = take_savepoint(self.platform, self.ledger, view.spec)
        except SavepointError as error:
            self.ledger.update_operation(operation.id, failure=str(error))
            return f"failed, the upgrade is refused: {error}"
        self.ledger.update_operation(
            operation.id, savepoint_id=savepoint.id, savepoint_batch=savepoint.batch_id
        )
        return f"savepoint {savepoint.id} at batch {savepoint.batch_id}"

    def _start_dry_run(self, view: JobView) -> str:
        from ops.recovery.upgrade import prepare_dry_run

        operation, job = _open(view), view.spec.name
        assert operation.candidate_spec is not None, "an upgrade carries its candidate"
        savepoint = self._savepoint(job, operation.savepoint_id)
        dry_run_id = f"{job}-dry-run-{self.clock():%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"
        try:
            candidate, conf_dir = prepare_dry_run(
                self.platform, job, operation.candidate_spec, savepoint, dry_run_id
            )
            driver = self.backend.launch_replay_only(candidate, dry_run_id, conf_dir)
        except (ConfigError, SavepointError, LaunchError) as error:
            self.ledger.update_operation(operation.id, failure=f"dry run could not start: {error}")
            return f"failed, the upgrade is refused: {error}"
        self.ledger.update_operation(
            operation.id,
            dry_run_id=dry_run_id,
            dry_run_pid=driver.pid,
            dry_run_app_id=driver.app_id,
            dry_run_started_at=self.clock(),
        )
        return f"dry run {dry_run_id} pid {driver.pid} on a copy of savepoint {savepoint.id}"

    def _end_dry_run(self, view: JobView, failure: str | None) -> str:
        from ops.recovery.upgrade import discard_dry_runs

        operation = _open(view)
        driver = self._dry_run_driver(operation)
        if driver is not None:
            self.backend.kill(driver)
        discard_dry_runs(self.platform, view.spec.name)
        if failure is not None:
            self.ledger.update_operation(operation.id, failure=failure)
            return f"refused: {failure}"
        self.ledger.update_operation(operation.id, dry_run_passed_at=self.clock())
        return "passed"

    def _install(self, view: JobView, config_version: str) -> str:
        from ops.recovery.upgrade import install_spec

        operation, job = _open(view), view.spec.name
        candidate = config_version == operation.candidate_version
        content = operation.candidate_spec if candidate else operation.previous_spec
        if content is None or config_version not in (operation.candidate_version, operation.previous_version):
            raise UpgradeError(f"upgrade of {job!r} has no spec of config {config_version}")
        install_spec(self.platform, job, content, keep_previous=candidate)
        installed = find_job(job, self.platform.conf_dir).config_version
        if installed != config_version:
            raise UpgradeError(f"installed spec of {job!r} has config {installed}, not {config_version}")
        if candidate:
            # Deploying: from here on the job is to run (the candidate), with a fresh restart budget.
            self.ledger.update_job(job, desired_state=Desired.RUNNING, restart_requested_at=self.clock())
        return f"installed config {config_version}"

    def _finish(self, view: JobView, result: Result, reason: str, run_url: str | None) -> str:
        """Close the operation: the outcome on its decision row and its record. An abandoned
        rescale puts the job's scale (unless pinned) back to the one its driver runs at."""
        from ops.recovery.rewind import rewind_outcome

        operation = _open(view)
        kind, failure = operation.kind, operation.failure
        if result == Result.DONE and kind == OperationKind.SCALE:
            outcome = self._report_rescale(view, run_url)
        elif result == Result.DONE and kind == OperationKind.RESTATE:
            outcome = self._report_restatement(view, operation, run_url)
        elif result == Result.DONE and kind == OperationKind.REWIND:
            assert operation.savepoint_batch is not None and operation.replay_to is not None
            outcome = rewind_outcome(operation.savepoint_batch, operation.replay_to)
        elif result == Result.DONE:
            outcome = f"upgraded: config {operation.previous_version} -> {operation.candidate_version}"
        elif result == Result.ABANDONED:
            outcome = reason
            run = view.observation.run
            if run is not None and not view.job.scale_pinned:
                running = run_scale(run, view.spec)
                self.ledger.update_job(
                    view.spec.name, scale_cores=running.cores, scale_max_files=running.max_files_per_trigger
                )
        else:
            outcome = f"{result}: {failure}"
        self.ledger.set_outcome(operation.decision_id, outcome)
        self.ledger.finish_operation(operation.id, outcome)
        return outcome

    def _report_rescale(self, view: JobView, run_url: str | None) -> str:
        """The rescale's outcome with its measured restart cost, also sent to Slack (`rescaled`)."""
        operation = self.ledger.operation_by_id(_open(view).id)
        assert operation is not None
        cost = operation.restart_cost_seconds
        down = "" if cost is None else f"; down {cost:.1f} s from the stop to the first committed batch"
        target = Scale(operation.to_cores, operation.to_max_files).describe()
        outcome = f"{RESCALED} from {operation.from_cores or 'default'} to {target}{down}"
        self._notify_done(view, "rescaled", f"{outcome}. Why: {operation.reason}", run_url)
        return outcome

    def _report_restatement(self, view: JobView, operation: OperationRecord, run_url: str | None) -> str:
        """The restatement's summary, also sent to Slack (`restated`)."""
        from ops.recovery.restate import Restatement, rows_written

        job = view.spec.name
        assert operation.savepoint_id is not None and operation.savepoint_batch is not None
        assert operation.replay_to is not None
        restatement = Restatement(
            job=job,
            savepoint_id=operation.savepoint_id,
            batch_id=operation.savepoint_batch,
            last_batch=operation.replay_to,
            rows_before=operation.rows_before or 0,
            rows_after=rows_written(self.platform, job, operation.savepoint_batch, operation.replay_to),
        )
        self._notify_done(view, "restated", f"{restatement.summary()}. Why: {operation.reason}", run_url)
        return restatement.summary()

    def _notify_done(self, view: JobView, kind: str, reason: str, run_url: str | None) -> None:
        """An info message (not an incident) that an operation finished and the job runs again."""
        self.alerts.notify(
            Alert(
                job=view.spec.name,
                kind=kind,
                severity="info",
                state=Lifecycle.RUNNING.name,
                reason=reason,
                last_batch=view.progress.last_commit,
                run_url=run_url,
                runbook=view.spec.operations.alerts.runbook,
                channel=view.spec.operations.alerts.channel,
            )
        )

    def _savepoint(self, job: str, savepoint_id: str | None) -> SavepointRecord:
        savepoint = next((sp for sp in self.ledger.savepoints(job) if sp.id == savepoint_id), None)
        if savepoint is None:
            raise SavepointError(
                f"job {job!r} has no savepoint {savepoint_id!r} (see `warden savepoints {job}`)"
            )
        return savepoint

    # savepoints -------------------------------------------------------------------------------

    def savepoint(self, job: str, reason: str) -> SavepointOutcome:
        """Take a savepoint of `job` now (running or not) under its lock, as a decision row."""
        with job_lock(self.platform, job, "savepoint"):
            spec = find_job(job, self.platform.conf_dir)
            record = self.ledger.job(job)
            run = self.ledger.current_run(job)
            decision = self.ledger.record_decision(
                job, TakeSavepoint.kind, reason, {"requested": True}, run.run_id if run else None
            )
            try:
                outcome = self._save(spec, record.state if record else "UNKNOWN", None)
            except SavepointError as error:
                self.ledger.set_outcome(decision, f"error: {error}")
                raise
            self.ledger.set_outcome(decision, outcome.line())
        return outcome

    def _save(self, spec: JobSpec, state: str, run_url: str | None) -> SavepointOutcome:
        """Take a savepoint and apply retention; a failed savepoint pages (`savepoint_failed`) and
        raises. Retention failing after a good savepoint is only reported: the savepoint stands,
        and retention runs again after the next one and in the platform DAG."""
        from ops.savepoints.store import take_savepoint

        started = time.monotonic()
        try:
            record = take_savepoint(self.platform, self.ledger, spec)
        except SavepointError as error:
            push_task_outcome(self.platform.monitoring, BatchTask.SAVEPOINT, spec.name, succeeded=False)
            job = self.ledger.job(spec.name)
            self.alerts.raise_alert(
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
            self.alerts.deliver_due()
            raise
        self.alerts.resolve(
            spec.name, "savepoint_failed", f"savepoint {record.id} taken at batch {record.batch_id}"
        )
        push_savepoint(self.platform.monitoring, spec, record, time.monotonic() - started)
        try:
            return SavepointOutcome(record, self.prune_savepoints(spec))
        except SavepointError as error:
            log.warning(
                "retention failed after a savepoint", job=spec.name, savepoint=record.id, error=str(error)
            )
            return SavepointOutcome(record, [], retention_error=str(error))

    def prune_savepoints(self, spec: JobSpec) -> list[str]:
        """Apply the spec's savepoint retention; the ids deleted."""
        from ops.savepoints.store import apply_retention

        policy = spec.operations.savepoints
        return apply_retention(
            self.platform, self.ledger, spec.name, policy.keep_count, timedelta(hours=policy.max_age_hours)
        )

    def prune_all_savepoints(self) -> list[str]:
        """Retention for every valid job, running or not; one line per job that had something to say.

        A job whose lock is held (a savepoint or rewind in progress) is skipped until the next run.
        """
        lines = []
        for name, spec in load_jobs(self.platform.conf_dir).specs.items():
            try:
                with job_lock(self.platform, name, "retention", timeout=0):
                    deleted = self.prune_savepoints(spec)
            except JobBusyError as busy:
                lines.append(f"{name}: skipped, {busy}")
                continue
            except SavepointError as error:
                lines.append(f"{name}: retention failed: {error}")
                continue
            if deleted:
                lines.append(f"{name}: deleted savepoints {', '.join(deleted)}")
        return lines

    def _run_id(self, spec: JobSpec) -> str:
        return f"{spec.name}-{self.clock():%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"

    def _launch(self, spec: JobSpec) -> str:
        run_id = self._run_id(spec)
        scale = self.scale_of(spec)
        run = RunRecord(
            run_id=run_id,
            job=spec.name,
            backend=self.backend.name,
            pid=None,
            app_id=None,
            metrics_port=spec.operations.metrics_port,
            log_path=None,
            config_version=spec.config_version,
            started_at=self.clock(),
            stopped_at=None,
            exit_reason=None,
            cores=scale.cores,
            max_files_per_trigger=scale.max_files_per_trigger,
        )
        try:
            driver = self.backend.launch(spec.with_scale(scale.cores, scale.max_files_per_trigger), run_id)
        except LaunchError as error:
            # Recorded as a failed run, so it backs off and counts towards a restart storm
            # like a crash instead of being retried on every watch poll.
            exit_reason = f"{FAILURE}launch: {error}"
            self.ledger.start_run(replace(run, stopped_at=self.clock(), exit_reason=exit_reason))
            return exit_reason
        launched = replace(run, pid=driver.pid, app_id=driver.app_id, log_path=str(driver.log_path))
        try:
            self.ledger.start_run(launched)
        except LedgerError:
            # A driver the ledger does not know of would be launched again once it is back.
            self.backend.kill(launched)
            raise
        return f"run {run_id} pid {driver.pid}"

    # watching and requests --------------------------------------------------------------------

    def attention(self, job: str) -> str | None:
        """Why `job` needs a reconcile pass now, or None; reads only, never acts."""
        try:
            spec = find_valid_job(job, self.platform)
        except ConfigError as error:
            return f"spec invalid: {error}"
        view = self.view(spec)
        plan = decide(view, self.clock())
        if plan.actions:
            return f"{', '.join(a.kind for a in plan.actions)}: {plan.actions[0].reason}"
        if plan.state.name != view.job.state:
            return f"state {view.job.state} -> {plan.state.name}: {plan.reason}"
        if self.ledger.due_alerts(self.clock()):
            return "alerts due for delivery"
        return None

    def record_detection(self, job: str, reason: str, detected_at: str) -> None:
        """Note in the ledger what the watcher saw and when, before the pass that reacts to it."""
        run = self.ledger.current_run(job)
        self.ledger.record_decision(
            job, "detect", reason, {"detected_at": detected_at}, run.run_id if run else None
        )

    def analyse_job_files(self) -> list[str]:
        """Run Spark's analyzer on the job files whose current version has no verdict yet (one
        local Spark session for all of them, none when every version has one); a line per job."""
        pending = unanalysed(self.platform, load_jobs(self.platform.conf_dir))
        verdicts = run_analysis(self.platform, pending)
        return [
            f"{name}: {'rejected' if verdict.rejected else 'accepted'} (config {verdict.config_version})"
            for name, verdict in verdicts.items()
        ]

    def check_job_files(self) -> list[str]:
        """Page once per invalid job file (invalid by itself or rejected by Spark's analyzer);
        close the page when the file is fixed."""
        parsed = load_jobs(self.platform.conf_dir)
        loaded = with_verdicts(self.platform, parsed)
        problems = []
        for path, error in loaded.errors.items():
            job = path.stem
            problems.append(str(error))
            open_kinds = {a.kind for a in self.alerts.open_incidents(job)}
            # A driver that already refused this version paged `spec_rejected`: one page per cause.
            rejected_by_driver = job in parsed.specs and "spec_rejected" in open_kinds
            if "config_invalid" not in open_kinds and not rejected_by_driver:
                self.alerts.raise_alert(
                    Alert(
                        job=job,
                        kind="config_invalid",
                        severity="critical",
                        state="INVALID",
                        reason=str(error),
                        last_batch=None,
                        run_url=None,
                    )
                )
        # A job can have a valid file and a refused one (router.yaml and router.yml): still invalid.
        invalid = {path.stem for path in loaded.errors}
        for name in set(loaded.specs) - invalid:
            if "config_invalid" in {a.kind for a in self.alerts.open_incidents(name)}:
                self.alerts.resolve(name, "config_invalid", "job file validates again")
        self.alerts.deliver_due()
        return problems

    def request(self, job: str, action: str, reason: str) -> str:
        """Record an operator request (suspend, resume, restart); the next pass carries it out."""
        spec = find_job(job, self.platform.conf_dir)
        self.ledger.ensure_job(
            job,
            desired_state=Desired.RUNNING,
            state=Lifecycle.SUSPENDED.name,
            config_version=spec.config_version,
        )
        now = self.clock()
        changes: dict[str, Any]
        match action:
            case "suspend":
                changes = {"desired_state": Desired.SUSPENDED}
            case "resume":
                # A resume also resets the restart budget, so a job suspended by a storm can run.
                changes = {"desired_state": Desired.RUNNING, "restart_requested_at": now}
            case "restart":
                changes = {"desired_state": Desired.RUNNING, "restart_requested_at": now}
            case _:
                raise WardenError(f"unknown request {action!r}: expected suspend, resume or restart")
        self.ledger.record_decision(job, f"request_{action}", reason, {"requested_at": now.isoformat()})
        self.ledger.update_job(job, **changes)
        return f"{job}: {action} requested ({reason}); the supervisor carries it out within seconds"

    # recovery operations: the request and the wait ---------------------------------------------

    def ensure_no_operation(self, job: str) -> None:
        """Raise OperationInProgressError while `job` has an open rewind, restate or upgrade."""
        operation = self.ledger.operation(job)
        if operation is not None:
            raise OperationInProgressError(job, operation.kind, operation.step, operation.requested_at)

    def start_operation(
        self,
        job: str,
        kind: OperationKind | str,
        reason: str,
        inputs: Mapping[str, Any],
        **facts: Any,
    ) -> OperationRecord:
        """Record a rewind, restate or upgrade of `job` for the loop to carry out; the caller
        checked it. Its decision row (action `kind`) gets the outcome when it is closed. The job's
        desired state is not changed here. Refuses while another is open.
        """
        spec = find_job(job, self.platform.conf_dir)
        with job_lock(self.platform, job, f"{kind} request"):
            self.ledger.ensure_job(
                job,
                desired_state=Desired.RUNNING,
                state=Lifecycle.SUSPENDED.name,
                config_version=spec.config_version,
            )
            self.ensure_no_operation(job)
            decision = self.ledger.record_decision(job, str(kind), reason, inputs)
            operation = self.ledger.start_operation(job, str(kind), reason, decision, Step.REQUESTED, **facts)
        log.info("operation requested", job=job, kind=str(kind), operation=operation.id, reason=reason)
        return operation

    def await_operation(
        self,
        operation_id: int,
        *,
        timeout: float | None = None,
        progress: Callable[[str], None] | None = None,
        poll_seconds: float = OPERATION_POLL_SECONDS,
    ) -> OperationRecord:
        """Run reconcile passes of the operation's job until the loop has closed it, or `timeout`
        seconds have passed; the operation as it then stands. `progress` gets each new pass line.

        Nothing here is needed for the operation to finish: it only runs the passes sooner than
        the supervision DAG would. If this process dies, the next pass by anyone carries on.
        """
        operation = self.ledger.operation_by_id(operation_id)
        if operation is None:
            raise WardenError(f"no operation {operation_id} in the ledger")
        if progress is not None:
            progress(
                f"{operation.job}: {operation.kind} recorded (operation {operation.id}); running reconcile "
                f"passes until it is done. If this stops, the supervision DAG or `warden reconcile "
                f"{operation.job}` finishes it."
            )
        deadline = None if timeout is None else time.monotonic() + timeout
        said = None
        while True:
            line = self.reconcile(operation.job).line()
            if progress is not None and line != said:
                progress(line)
                said = line
            current = self.ledger.operation_by_id(operation_id)
            assert current is not None
            if current.finished_at is not None or (deadline is not None and time.monotonic() >= deadline):
                return current
            time.sleep(poll_seconds)


def _open(view: JobView) -> OperationRecord:
    """The operation an operation step acts on (decide returns those steps only when one is open)."""
    assert view.operation is not None, "an operation step without an open operation"
    return view.operation


def stop_all_jobs(platform: PlatformConfig) -> list[str]:
    """Stop every open driver run gracefully (used when the embedded platform goes down).

    Desired states are left as they are, so `warden platform up` brings the same jobs back.
    """
    supervisor = Supervisor.for_platform(platform)
    stopped = []
    for spec in load_jobs(platform.conf_dir).specs.values():
        standby = supervisor.ledger.current_standby(spec.name)
        if standby is not None:
            ended = supervisor.backend.stop(standby.as_run(), STANDBY_STOP_SECONDS)
            supervisor.ledger.finish_standby(standby.run_id, "stopped: platform down")
            stopped.append(f"{spec.name} standby: {ended}")
        run = supervisor.ledger.current_run(spec.name)
        if run is None:
            continue
        ended = supervisor.backend.stop(run, spec.operations.shutdown_timeout_seconds)
        supervisor.ledger.finish_run(run.run_id, "stopped: platform down")
        stopped.append(f"{spec.name}: {ended}")
    return stopped
