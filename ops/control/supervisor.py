"""The supervisor: a level-triggered reconcile loop over each job (docs/architecture.md §3).

Every pass reads as a page (`Supervisor.reconcile`): observe (read-only, `ops.control.observer`)
-> record (`ops.control.recorder`) -> decide (pure, `ops.control.policy.decide`) -> act, one
action at a time through `_execute`, which hands each kind of action to its room. `decide` sees
only values, so the restart policy, backoff and storm rules are tested without processes. Status
and each intended action are written to the ledger before acting, so a crash mid-action leaves a
trail the next pass can read; every automated action is a decision row with reason and inputs.

The same observe + decide, run without acting, is what the Airflow watcher polls (`attention`):
when the plan differs from what the ledger says, something needs a pass now.

The rooms, each a module of functions over the loop's services (`ops.control.context.Control`):
launching and stopping drivers (`drivers`), warm standbys and their take-over (`standbys`), the
steps of recovery operations (`steps`), rescaling (`rescale`), savepoints (`savepointing`),
orphaned sink output (`sink_cleanup`), the job files' housekeeping (`housekeeping`) and what
operators ask (`requests`). `Supervisor` is the facade the DAGs, the CLI and the recovery requests
use: the pass, and the loops that run passes until an operation or a rescale is done
(`await_operation`, `await_scale`; nothing needs them for the work to finish, the next pass by
anyone carries on).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import structlog

from ops.alerts import Alert, AlertCenter
from ops.clock import utcnow
from ops.control import housekeeping, requests, savepointing, sink_cleanup
from ops.control.context import Control
from ops.control.drivers import close, launch, stop
from ops.control.health import Observation
from ops.control.launcher import LaunchBackend, LocalProcessBackend
from ops.control.observer import job_view, observe_job
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
    Rescale,
    ResolveAlert,
    Restore,
    RetireStandby,
    RollBack,
    StartDryRun,
    StopAfterCheck,
    StopDriver,
    SuspendJob,
    TakeOver,
    TakeSavepoint,
    TakeUpgradeSavepoint,
    decide,
)
from ops.control.recorder import record_detection, record_observation, record_plan
from ops.control.rescale import open_rescale
from ops.control.savepointing import SavepointOutcome
from ops.control.scaling import Scale, run_scale
from ops.control.standbys import launch_standby, retire, take_over
from ops.control.steps import (
    end_dry_run,
    finish,
    install,
    restore,
    roll_back,
    start_dry_run,
    stop_after_check,
    upgrade_savepoint,
)
from ops.exceptions import ConfigError, WardenError
from ops.ledger.locks import job_lock
from ops.ledger.records import OperationRecord
from ops.ledger.store import Ledger
from ops.spec.analysis import find_valid_job
from ops.spec.job import JobSpec, find_job, load_jobs
from ops.spec.platform import PlatformConfig
from ops.states import INVALID, Desired, OperationKind

log = structlog.get_logger("streamwarden.supervisor")

# How often `await_operation` and `await_scale` run a pass while they wait.
OPERATION_POLL_SECONDS = 1.0


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
        self.control = Control(platform, ledger, backend, alerts, clock)

    @classmethod
    def for_platform(cls, platform: PlatformConfig) -> Supervisor:
        """A supervisor with the platform's ledger, local backend and Slack settings."""
        ledger = Ledger.open(platform.resolved_ledger_url)
        return cls(platform, ledger, LocalProcessBackend(platform), AlertCenter(ledger, platform.slack))

    @property
    def platform(self) -> PlatformConfig:
        return self.control.platform

    @property
    def ledger(self) -> Ledger:
        return self.control.ledger

    @property
    def backend(self) -> LaunchBackend:
        return self.control.backend

    @property
    def alerts(self) -> AlertCenter:
        return self.control.alerts

    # the pass ---------------------------------------------------------------------------------

    def reconcile(self, job: str, run_url: str | None = None) -> PassSummary:
        """One observe -> record -> decide -> act pass for `job`, under its lock."""
        with job_lock(self.platform, job, "reconcile"):
            try:
                spec = find_valid_job(job, self.platform)
            except ConfigError as error:
                return self._invalid_spec(job, error, run_url)
            view = job_view(self.control, spec)
            record_observation(self.control, view)
            plan = decide(view, self.control.clock())
            record_plan(self.control, view, plan)
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
            self.alerts.raise_alert(housekeeping.config_invalid(job, str(error), run_url))
        self.alerts.deliver_due()
        return PassSummary(job, INVALID, str(error), ())

    def _act(self, view: JobView, plan: Plan, action: Action, run_url: str | None) -> str:
        """One action as a decision row: written before acting, its outcome after."""
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
        """Hand the action to its room."""
        control, spec, run = self.control, view.spec, view.observation.run
        match action:
            case Launch():
                return launch(control, spec)
            case StopDriver(graceful=graceful, exit_reason=exit_reason):
                assert run is not None
                return stop(control, spec, run, graceful=graceful, exit_reason=exit_reason)
            case CloseRun(exit_reason=exit_reason):
                assert run is not None
                return close(control, spec, run, exit_reason)
            case SuspendJob(reason=reason):
                self.ledger.update_job(spec.name, desired_state=Desired.SUSPENDED)
                return f"desired state set to suspended: {reason}"
            case RaiseAlert():
                return self._raise_alert(view, plan, action, run_url)
            case ResolveAlert(alert_kind=kind, reason=reason):
                self.alerts.resolve(spec.name, kind, reason)
                return "resolved"
            case TakeSavepoint():
                return savepointing.save(control, spec, plan.state.name, run_url).line()
            case StopAfterCheck(exit_reason=exit_reason):
                return stop_after_check(control, view, exit_reason)
            case Restore(savepoint_id=savepoint_id):
                return restore(control, view, savepoint_id)
            case TakeUpgradeSavepoint():
                return upgrade_savepoint(control, view)
            case StartDryRun():
                return start_dry_run(control, view)
            case EndDryRun(failure=failure):
                return end_dry_run(control, view, failure)
            case InstallSpec(config_version=config_version):
                return install(control, view, config_version)
            case RollBack(reason=reason):
                return roll_back(control, view, reason)
            case FinishOperation(reason=reason, result=result):
                return finish(control, view, result, reason, run_url)
            case LaunchStandby():
                return launch_standby(control, spec)
            case RetireStandby(exit_reason=exit_reason):
                assert view.standby.record is not None
                return retire(control, view.standby.record, exit_reason)
            case TakeOver():
                return take_over(control, view)
            case Rescale():
                return open_rescale(control, view, action, decision)
            case RecommendScale():
                return "recorded; the job runs on as it is"
        raise AssertionError(f"unhandled action {action!r}")

    def _raise_alert(self, view: JobView, plan: Plan, action: RaiseAlert, run_url: str | None) -> str:
        heartbeat, spec = view.observation.heartbeat, view.spec
        alert = Alert(
            job=spec.name,
            kind=action.alert_kind,
            severity=action.severity,
            state=plan.state.name,
            reason=action.reason,
            last_batch=heartbeat.batch_id if heartbeat else view.job.last_batch_id,
            run_url=run_url,
            runbook=spec.operations.alerts.runbook,
            channel=spec.operations.alerts.channel,
        )
        alert_id = self.alerts.raise_alert(alert)
        return f"queued alert {alert_id}" if alert_id is not None else "deduplicated"

    # watching ---------------------------------------------------------------------------------

    def observe(self, spec: JobSpec) -> Observation:
        """A read-only look at the job's open run, process, heartbeat and input backlog."""
        return observe_job(self.control, spec)

    def attention(self, job: str) -> str | None:
        """Why `job` needs a reconcile pass now, or None; reads only, never acts."""
        try:
            spec = find_valid_job(job, self.platform)
        except ConfigError as error:
            return f"spec invalid: {error}"
        view = job_view(self.control, spec)
        plan = decide(view, self.control.clock())
        if plan.actions:
            return f"{', '.join(a.kind for a in plan.actions)}: {plan.actions[0].reason}"
        if plan.state.name != view.job.state:
            return f"state {view.job.state} -> {plan.state.name}: {plan.reason}"
        if self.ledger.due_alerts(self.control.clock()):
            return "alerts due for delivery"
        return None

    def record_detection(self, job: str, reason: str, detected_at: str) -> None:
        """Note in the ledger what the watcher saw and when, before the pass that reacts to it."""
        record_detection(self.control, job, reason, detected_at)

    # requests, and the loops that wait for them -------------------------------------------------

    def request(self, job: str, action: str, reason: str) -> str:
        """Record an operator request (suspend, resume, restart); the next pass carries it out."""
        return requests.request(self.control, job, action, reason)

    def scale(self, job: str, cores: int | None, reason: str) -> str:
        """Pin `job` at `cores` until released, or release it (None) (`ops.control.requests.scale`)."""
        return requests.scale(self.control, job, cores, reason)

    def scale_of(self, spec: JobSpec) -> Scale:
        """The scale the job's next driver is launched at."""
        return self.control.scale_of(spec)

    def start_operation(
        self, job: str, kind: OperationKind | str, reason: str, inputs: Mapping[str, Any], **facts: Any
    ) -> OperationRecord:
        """Record a rewind, restate or upgrade for the loop to carry out (`ops.control.requests`)."""
        return requests.start_operation(self.control, job, kind, reason, inputs, **facts)

    def ensure_no_operation(self, job: str) -> None:
        """Raise OperationInProgressError while `job` has an open rewind, restate or upgrade."""
        requests.ensure_no_operation(self.control, job)

    def await_scale(
        self,
        job: str,
        *,
        timeout: float,
        progress: Callable[[str], None] | None = None,
        poll_seconds: float = OPERATION_POLL_SECONDS,
    ) -> bool:
        """Run reconcile passes until `job` runs at the scale it should, with no rescale open, or
        `timeout` seconds have passed; whether it does."""
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

    # savepoints and housekeeping ---------------------------------------------------------------

    def savepoint(self, job: str, reason: str) -> SavepointOutcome:
        """Take a savepoint of `job` now (running or not) under its lock, as a decision row."""
        return savepointing.savepoint_now(self.control, job, reason)

    def prune_all_savepoints(self) -> list[str]:
        """Savepoint retention for every valid job (`ops.control.savepointing.prune_all`)."""
        return savepointing.prune_all(self.control)

    def remove_orphaned_output(
        self, spec: JobSpec, reason: str, *, driver_gone: bool, run_id: str | None = None
    ) -> str | None:
        """Remove the job's orphaned sink output (`ops.control.sink_cleanup.remove_orphans`)."""
        return sink_cleanup.remove_orphans(self.control, spec, reason, driver_gone=driver_gone, run_id=run_id)

    def remove_all_orphaned_output(self) -> list[str]:
        """Orphaned output older than the newest commit, for every valid job."""
        return sink_cleanup.remove_all_orphaned_output(self.control)

    def analyse_job_files(self) -> list[str]:
        """Spark's analyzer over the job files not analysed yet (`ops.control.housekeeping`)."""
        return housekeeping.analyse_job_files(self.control)

    def check_job_files(self) -> list[str]:
        """One page per invalid job file, closed when it is fixed (`ops.control.housekeeping`)."""
        return housekeeping.check_job_files(self.control)

    def prune_ledger(self) -> list[str]:
        """The ledger's retention (`ops.control.housekeeping.prune_ledger`)."""
        return housekeeping.prune_ledger(self.control)


def stop_all_jobs(platform: PlatformConfig) -> list[str]:
    """Stop every open driver run gracefully (used when the embedded platform goes down).

    Desired states are left as they are, so `warden platform up` brings the same jobs back.
    """
    supervisor = Supervisor.for_platform(platform)
    control, stopped = supervisor.control, []
    for spec in load_jobs(platform.conf_dir).specs.values():
        standby = control.ledger.current_standby(spec.name)
        if standby is not None:
            stopped.append(f"{spec.name} standby: {retire(control, standby, 'stopped: platform down')}")
        run = control.ledger.current_run(spec.name)
        if run is None:
            continue
        ended = control.backend.stop(run, spec.operations.shutdown_timeout_seconds)
        control.ledger.finish_run(run.run_id, "stopped: platform down")
        stopped.append(f"{spec.name}: {ended}")
    return stopped
