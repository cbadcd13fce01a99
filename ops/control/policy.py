"""The supervisor's pure policy: actions, and `decide` over the states of `ops.states`
(docs/architecture.md §3).

`decide` sees only values (a `JobView`) and returns a `Plan`: the next lifecycle state, why, the
actions that get the job there and, while a recovery operation is open, its step. No I/O happens
here, so the restart policy, backoff, storm, savepoint and recovery rules are tested without
processes; `ops.control.supervisor` observes and acts.

Recovery operations (rewind, restate, upgrade) are desired-state changes, not scripts. `warden`
or an Airflow form records one in the ledger (an `OperationRecord`; at most one is open per job),
and every reconcile pass, whoever runs it, takes it one step further until it is closed. `decide`
picks the step from the record's facts and the observation alone; the loop writes that step to the
record before acting, and every step is safe to redo, so when the process that asked for the
operation dies, the next pass (the supervision DAG, `warden reconcile JOB`) finishes it:

    rewind   REWINDING     (the job is stopped) rewind to the savepoint (under the job lock) -> done
    restate  RESTATING     check, then stop the driver -> rewind to the savepoint -> replay: the
                           job runs (its desired state is set to running by the rewind) and its
                           driver replays the queued batches first -> once the queue is empty and
                           the last replayed batch is committed: a summary in the ledger and on
                           Slack (`restated`) -> done
    upgrade  UPGRADING     savepoint -> dry run: the candidate replays one batch on a scratch copy
                           of the savepoint (a replay-only driver from the launch backend) ->
                           stop -> install the candidate -> launch -> ready: it commits
                           `restart.stable_batches` batches (or idles) in one run within the
                           readiness timeout -> done
             ROLLING_BACK  the new version did not get ready: stop -> reinstall the previous spec
                           -> rewind to the savepoint -> launch -> page `upgrade_rolled_back` -> done

Warm standbys (`operations.restart.warm_standby`): once the active driver is past its start
(RUNNING or DEGRADED), a standby driver is launched; it waits with its JVM up. Whenever the rules
above would launch a driver and a live standby of the current config exists, it takes over instead
(`TakeOver`), and the first failure of a streak does so without the backoff: consecutive failures
back off as configured, so a crash loop is still slowed and counted. A standby that is no longer
wanted (job suspended or failed, option off) or usable (another config, its process gone) is
retired; a standby that died by itself is replaced after a backoff of its own. The take-over's
fencing (grant after the active is confirmed gone, the checkpoint lock) is in `ops.driver.takeover`.

Scaling (`ops.control.scaling`): a running job whose driver runs at another scale than the job
should (the autoscaler's in `apply` mode, an operator's pin, the file's) is rescaled, and otherwise
the autoscaler's decision (`ops.control.autoscaler`) is applied or, when it is not (recommend mode,
a guard), recorded as a `scale_recommendation`. A rescale is an operation too:

    scale    SCALING       a standby driver at the new scale warms up beside the running one (the
                           old one keeps processing) -> once it is ready, the autoscaler's decision
                           is checked against the newest window (one no longer needed is dropped)
                           -> stop the driver at a batch boundary (its time recorded) -> the
                           standby takes over in the stop's own pass -> its first committed batch
                           or idle trigger: done, with the restart cost measured from the stop.
                           Make-before-break never breaks first: a standby not ready within
                           `standby_ready_bound` abandons the rescale (standby retired, the running
                           driver untouched), retried after the autoscaler's stabilization window
                           if still needed. A driver already gone is relaunched at the new scale
                           (the ordinary rules: a driver that fails is restarted); a job to be
                           suspended abandons the rescale.

Which step comes next follows from facts the steps record: a rewind is done once `rewound_at` is
set (its replay plan is recorded before it starts, so a redo reports the same rows); an upgrade's
savepoint, dry-run driver and verdict, and `failure`. Until its dry run has passed, an upgrade
leaves the running version to the ordinary rules and a failure refuses it with nothing touched;
after that, a failure to get ready rolls back. A rewind or restate is checked (`preflight` in
`ops.recovery.rewind`, every refusal it can meet) in the pass that would stop its driver, and the
stop happens only if nothing is refused; the rewind step checks again. A refusal ends the
operation "refused" with nothing touched: the driver runs on, the desired state is as it was.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from ops.control.autoscaler import ScalingDecision, decide_scale
from ops.control.health import (
    DEGRADING,
    STUCK_DETAILS,
    Assessment,
    Observation,
    Signal,
    batch_grace,
    startup_grace,
)
from ops.control.scaling import (
    RECOMMENDATION,
    RESCALE,
    Scale,
    ScalingView,
    desired_scale,
    rescale_applied,
    run_scale,
)
from ops.ledger.store import JobRecord, OperationRecord, RunRecord, StandbyRecord
from ops.spec.job import METRICS_PORT_IN_USE, JobSpec, RestartPolicy, metrics_port_in_use
from ops.states import CONFIG_FAILURE, FAILURE, Desired, Lifecycle, OperationKind, Result, Step

# A dry run replays one batch; a driver still at it after this long is stopped and refused.
DRY_RUN_TIMEOUT_SECONDS = 300.0


# --- actions: what decide() asks act() to do ---------------------------------------------------


@dataclass(frozen=True)
class Launch:
    reason: str
    kind: str = "launch"


@dataclass(frozen=True)
class StopDriver:
    """Stop the open run; `graceful` lets the running batch commit first."""

    reason: str
    exit_reason: str
    graceful: bool
    kind: str = "stop"


@dataclass(frozen=True)
class StopAfterCheck:
    """Check the open rewind or restate for every refusal (`ops.recovery.rewind.preflight`), and
    stop the open run gracefully only if there is none; a refusal becomes the operation's
    `failure` and the driver is not touched."""

    reason: str
    exit_reason: str
    kind: str = "stop"


@dataclass(frozen=True)
class CloseRun:
    """The run's driver is already gone: clean up its leftovers and close it in the ledger."""

    reason: str
    exit_reason: str
    kind: str = "close_run"


@dataclass(frozen=True)
class SuspendJob:
    reason: str
    kind: str = "suspend"


@dataclass(frozen=True)
class RaiseAlert:
    alert_kind: str
    severity: str
    reason: str
    kind: str = "alert"


@dataclass(frozen=True)
class ResolveAlert:
    alert_kind: str
    reason: str
    kind: str = "resolve_alert"


@dataclass(frozen=True)
class TakeSavepoint:
    """Copy the running job's checkpoint to the savepoint store, then apply retention."""

    reason: str
    kind: str = "savepoint"


# --- actions of recovery operations ---------------------------------------------------------------


@dataclass(frozen=True)
class Restore:
    """Rewind the stopped job to a savepoint and queue its later batches for replay.

    The pass holds the job lock. The replay plan goes into the operation before anything changes,
    `rewound_at` once all of it is done; a refusal becomes the operation's `failure`.
    """

    reason: str
    savepoint_id: str
    kind: str = "restore"


@dataclass(frozen=True)
class TakeUpgradeSavepoint:
    """Take the savepoint an upgrade starts from (online) and record it in the operation."""

    reason: str
    kind: str = "savepoint"


@dataclass(frozen=True)
class StartDryRun:
    """Restore the upgrade's savepoint into a scratch platform and have the launch backend start a
    replay-only driver of the candidate on it; the operation records the driver."""

    reason: str
    kind: str = "dry_run"


@dataclass(frozen=True)
class EndDryRun:
    """Stop what is left of the dry run, remove its scratch copy, record the verdict (`failure`
    None: passed)."""

    reason: str
    failure: str | None
    kind: str = "dry_run_end"


@dataclass(frozen=True)
class InstallSpec:
    """Write the operation's candidate or previous spec (by config version) as the job's file."""

    reason: str
    config_version: str
    kind: str = "install_spec"


@dataclass(frozen=True)
class RollBack:
    """Record why a deployed upgrade fails; the following passes roll it back."""

    reason: str
    kind: str = "rollback"


@dataclass(frozen=True)
class FinishOperation:
    """Close the operation with its outcome (also on its decision row); a restatement that is
    done computes its summary and sends it to Slack."""

    reason: str
    result: Result
    kind: str = "finish"


# --- scaling actions (`ops.control.scaling`) -------------------------------------------------------


@dataclass(frozen=True)
class Rescale:
    """Set the job's scale (unless pinned) and open a rescale operation from `from_cores` to it;
    the following passes stop the driver at a batch boundary and relaunch it at that scale."""

    reason: str
    cores: int | None
    max_files_per_trigger: int | None
    from_cores: int | None
    true_rate_before: float | None
    kind: str = RESCALE


@dataclass(frozen=True)
class RecommendScale:
    """Record the autoscaler's recommendation that is not applied (recommend mode, or blocked by a
    guard); the decision row holds its inputs and the formula's numbers."""

    reason: str
    kind: str = RECOMMENDATION


# --- warm standby actions -------------------------------------------------------------------------


@dataclass(frozen=True)
class LaunchStandby:
    reason: str
    kind: str = "launch_standby"


@dataclass(frozen=True)
class RetireStandby:
    """Stop the open standby (it has no query: nothing to finish) and close its record."""

    reason: str
    exit_reason: str
    kind: str = "retire_standby"


@dataclass(frozen=True)
class TakeOver:
    """Hand the checkpoint to the open standby: confirm the previous driver gone (its pid and its
    process group), then grant, then record the standby's driver as the job's run."""

    reason: str
    kind: str = "take_over"


Action = (
    Launch
    | StopDriver
    | StopAfterCheck
    | CloseRun
    | SuspendJob
    | RaiseAlert
    | ResolveAlert
    | TakeSavepoint
    | Restore
    | TakeUpgradeSavepoint
    | StartDryRun
    | EndDryRun
    | InstallSpec
    | RollBack
    | FinishOperation
    | LaunchStandby
    | RetireStandby
    | TakeOver
    | Rescale
    | RecommendScale
)


@dataclass(frozen=True)
class RecoveryProgress:
    """What the supervisor saw of an open operation's own work: the replay queue, the newest
    commit, and the dry-run driver (`dry_run_error` None once it is gone: it passed)."""

    pending_replay: int = 0
    last_commit: int = -1
    dry_run_alive: bool = False
    dry_run_error: str | None = None
    # A rescale: when the relaunched driver committed its first batch (epoch seconds), if it has.
    first_commit_at: float | None = None


@dataclass(frozen=True)
class StandbyView:
    """The job's open warm standby, if any, whether its process lives and has said it is ready
    (warmed up, waiting for its grant), and the standbys closed before it, newest first (a run of
    failed ones backs the next launch off)."""

    record: StandbyRecord | None = None
    alive: bool = False
    ready: bool = False
    closed: tuple[StandbyRecord, ...] = ()


@dataclass(frozen=True)
class JobView:
    """Everything decide() may look at, as plain values."""

    job: JobRecord
    spec: JobSpec
    observation: Observation
    assessment: Assessment
    closed_runs: tuple[RunRecord, ...]
    open_alert_kinds: frozenset[str]
    # When the newest savepoint decision was made (periodic or requested), None if never.
    last_savepoint_attempt: datetime | None = None
    # The job's open recovery operation, and what its steps have done so far.
    operation: OperationRecord | None = None
    progress: RecoveryProgress = field(default_factory=RecoveryProgress)
    standby: StandbyView = field(default_factory=StandbyView)
    # What the autoscaler looks at; None when the job's autoscaling is off.
    scaling: ScalingView | None = None
    # The job's newest finished rescale (done or abandoned), None if it had none.
    last_rescale: OperationRecord | None = None


@dataclass(frozen=True)
class Plan:
    state: Lifecycle
    reason: str
    actions: tuple[Action, ...] = ()
    inputs: dict[str, Any] = field(default_factory=dict)
    # The open operation's step this pass works on; recorded before acting.
    step: Step | None = None
    # Facts the step establishes by being taken (a rescale's stop time, its restart cost),
    # recorded with the step.
    facts: dict[str, Any] = field(default_factory=dict)
    # The autoscaler's decision this pass, for the job's recommendation (None: none made).
    scaling: ScalingDecision | None = None


# --- pure policy -------------------------------------------------------------------------------


def is_stable(run: RunRecord, policy: RestartPolicy, now: datetime) -> bool:
    """A run that committed enough batches and lived long enough resets the restart budget."""
    lived = ((run.stopped_at or now) - run.started_at).total_seconds()
    return run.batches_committed >= policy.stable_batches and lived >= policy.stable_seconds


def restart_streak(
    closed_runs: tuple[RunRecord, ...], policy: RestartPolicy, reset_at: datetime | None, now: datetime
) -> int:
    """How many runs in a row, newest first, failed since the last stable run or operator reset."""
    streak = 0
    for run in closed_runs:
        if not (run.exit_reason or "").startswith(FAILURE) or is_stable(run, policy, now):
            break
        if reset_at is not None and run.started_at < reset_at:
            break
        streak += 1
    return streak


# Characters of each run's exit reason the storm's page quotes.
STORM_REASON_CHARS = 200


def _storm_reason(streak: tuple[RunRecord, ...], budget: int) -> str:
    """Why the job is suspended: the streak against the budget, and each of its runs, newest first,
    as judged hung by the supervisor (and why) or failed by itself."""
    runs = []
    for run in streak:
        why = (run.exit_reason or "").removeprefix(FAILURE)
        verdict = "judged hung" if why.startswith(STUCK_DETAILS) else "failed"
        runs.append(f"{run.run_id} {verdict}: {why[:STORM_REASON_CHARS]}")
    return (
        f"restart storm: {len(streak)} failed runs in a row exceed the budget of {budget} "
        f"(newest first: {'; '.join(runs)})"
    )


def backoff_seconds(streak: int, policy: RestartPolicy) -> float:
    """Exponential backoff before relaunch number `streak` (1 = the first restart)."""
    return float(min(policy.initial_backoff_seconds * 2 ** max(streak - 1, 0), policy.max_backoff_seconds))


def decide(view: JobView, now: datetime) -> Plan:
    """The plan for one job: its next lifecycle state and the actions that get it there."""
    job, assessment, run = view.job, view.assessment, view.observation.run
    inputs: dict[str, Any] = {
        "signals": sorted(s.name for s in assessment.signals),
        "detail": assessment.detail,
        "run_id": run.run_id if run else None,
        "desired_state": job.desired_state,
    }
    if view.operation is not None:
        plan = _operating(view, view.operation, now, inputs)
    else:
        plan = _with_scaling(view, _supervising(view, now, inputs), now)
    return _with_standby(view, plan, now)


def _supervising(view: JobView, now: datetime, inputs: dict[str, Any]) -> Plan:
    """The ordinary rules: desired state, requests, restarts with backoff, health, savepoints."""
    job, assessment, run = view.job, view.assessment, view.observation.run
    if job.desired_state == Desired.SUSPENDED:
        if run is None:
            return Plan(
                Lifecycle.SUSPENDED,
                job.state_reason if job.state == Lifecycle.SUSPENDED.name else "suspended",
                (),
                inputs,
            )
        stop = StopDriver("desired state is suspended", exit_reason="stopped: suspended", graceful=True)
        return Plan(Lifecycle.SUSPENDED, "suspended by request", (stop,), inputs)

    if run is not None and job.restart_requested_at is not None and job.restart_requested_at > run.started_at:
        stop = StopDriver(
            "operator requested a restart", exit_reason="stopped: restart requested", graceful=True
        )
        return Plan(
            Lifecycle.SUBMITTED,
            "restarting on request",
            (stop, Launch("operator requested a restart")),
            inputs,
        )

    if run is not None and (assessment.has(Signal.DEAD) or assessment.has(Signal.STUCK)):
        return _after_failure(view, now, inputs)

    if run is not None:
        return _while_running(view, now, inputs)

    return _without_run(view, view.closed_runs, now, inputs, ())


def _after_failure(view: JobView, now: datetime, inputs: dict[str, Any]) -> Plan:
    run, assessment, heartbeat = view.observation.run, view.assessment, view.observation.heartbeat
    assert run is not None
    config_broken = heartbeat is not None and heartbeat.error_class == "ConfigError"
    prefix = CONFIG_FAILURE if config_broken else FAILURE
    exit_reason = prefix + assessment.detail
    if assessment.has(Signal.STUCK):
        cleanup: Action = StopDriver(f"stuck: {assessment.detail}", exit_reason=exit_reason, graceful=False)
    else:
        cleanup = CloseRun(f"dead: {assessment.detail}", exit_reason=exit_reason)
    actions: list[Action] = [cleanup]
    # A taken metrics port pages as `port_in_use` below, once: not also as the job being down.
    if "down" not in view.open_alert_kinds and METRICS_PORT_IN_USE not in exit_reason:
        actions.append(RaiseAlert("down", "critical", assessment.detail))
    closed = replace(run, stopped_at=now, exit_reason=exit_reason)
    return _without_run(view, (closed, *view.closed_runs), now, inputs, tuple(actions))


def _without_run(
    view: JobView,
    closed_runs: tuple[RunRecord, ...],
    now: datetime,
    inputs: dict[str, Any],
    actions: tuple[Action, ...],
) -> Plan:
    policy = view.spec.operations.restart
    last = closed_runs[0] if closed_runs else None
    reset_at = view.job.restart_requested_at
    port_free = view.observation.metrics_port_free
    # None: not looked at, a run was open this pass; if its driver died on a taken port, the port
    # counts as taken until the next pass looks.
    if port_free is False or (port_free is None and last is not None and _lost_its_port(last)):
        # A launch now would die on the taken port. Waiting is no failed run, so no restart storm
        # builds up; each pass looks again, and a free port (or a file naming another) launches.
        reason = metrics_port_in_use(view.spec)
        alert = (
            () if "port_in_use" in view.open_alert_kinds else (RaiseAlert("port_in_use", "critical", reason),)
        )
        return Plan(Lifecycle.FAILED, reason, actions + alert, inputs)
    if last is not None and (last.exit_reason or "").startswith(CONFIG_FAILURE) and not _lost_its_port(last):
        operator_retry = reset_at is not None and reset_at > (last.stopped_at or now)
        if last.config_version == view.spec.config_version and not operator_retry:
            # "spec_rejected": the file validates but the driver refused it (e.g. a filter Spark cannot
            # parse); distinct from "config_invalid", which the file check opens and closes.
            alert = (
                ()
                if "spec_rejected" in view.open_alert_kinds
                else (RaiseAlert("spec_rejected", "critical", last.exit_reason or ""),)
            )
            return Plan(Lifecycle.FAILED, last.exit_reason or "config error", actions + alert, inputs)
    streak = restart_streak(closed_runs, policy, reset_at, now)
    inputs = {**inputs, "restart_streak": streak, "budget": policy.budget}
    if streak == 0:
        return Plan(Lifecycle.SUBMITTED, "launching", (*actions, Launch("desired state is running")), inputs)
    if streak > policy.budget:
        reason = _storm_reason(closed_runs[:streak], policy.budget)
        storm: list[Action] = [SuspendJob(reason)]
        if "restart_storm" not in view.open_alert_kinds:
            storm.append(RaiseAlert("restart_storm", "critical", reason))
        return Plan(Lifecycle.SUSPENDED, reason, (*actions, *storm), inputs)
    # A warm standby takes over from the first failure at once; a streak backs off as configured.
    wait = 0.0 if streak == 1 and standby_usable(view) else backoff_seconds(streak, policy)
    not_before = (last.stopped_at if last and last.stopped_at else now) + timedelta(seconds=wait)
    inputs = {**inputs, "backoff_seconds": wait, "not_before": not_before.isoformat()}
    if now >= not_before:
        return Plan(
            Lifecycle.SUBMITTED,
            f"restart {streak} of {policy.budget}",
            (*actions, Launch(f"restart {streak} after {wait:g}s backoff")),
            inputs,
        )
    return Plan(
        Lifecycle.RESTARTING, f"restart {streak} of {policy.budget} at {not_before:%H:%M:%S}", actions, inputs
    )


def _lost_its_port(run: RunRecord) -> bool:
    """Whether the run's driver refused to start because its metrics port was taken."""
    return (run.exit_reason or "").startswith(CONFIG_FAILURE) and METRICS_PORT_IN_USE in (
        run.exit_reason or ""
    )


# --- warm standby ------------------------------------------------------------------------------

# Lifecycle states in which the active driver is past its start: a standby may start beside it.
_STANDBY_LAUNCH_STATES = (Lifecycle.RUNNING, Lifecycle.DEGRADED)
# Lifecycle states in which no driver is to run: a standby is retired.
_STANDBY_RETIRE_STATES = (Lifecycle.SUSPENDED, Lifecycle.FAILED)
# The exit reason of a standby whose process ended without being retired.
STANDBY_GONE = FAILURE + "standby process gone"


def rescale_open(view: JobView) -> bool:
    """Whether a rescale is under way: its new driver is a standby whatever `warm_standby` says."""
    return view.operation is not None and view.operation.kind == OperationKind.SCALE


def standby_usable(view: JobView) -> bool:
    """Whether the job's open standby can take over: its process lives and it runs the job's
    current config (a standby of another version would run a version nobody deployed)."""
    record = view.standby.record
    return (
        (view.spec.operations.restart.warm_standby or rescale_open(view))
        and record is not None
        and view.standby.alive
        and record.config_version == view.spec.config_version
    )


def standby_failures(closed: tuple[StandbyRecord, ...]) -> int:
    """How many standbys in a row, newest first, ended by themselves (not promoted or retired)."""
    streak = 0
    for standby in closed:
        if standby.exit_reason != STANDBY_GONE:
            break
        streak += 1
    return streak


def _with_standby(view: JobView, plan: Plan, now: datetime) -> Plan:
    """`plan` with the job's warm standby kept as the spec and the plan's state want it: a launch
    becomes a take-over by a usable standby, an unwanted or unusable standby is retired, and a
    job running without one gets one."""
    record, actions = view.standby.record, list(plan.actions)
    wanted = (
        (view.spec.operations.restart.warm_standby or rescale_open(view))
        and view.job.desired_state == Desired.RUNNING
        and plan.state not in _STANDBY_RETIRE_STATES
    )
    if record is not None and not (wanted and standby_usable(view)):
        if not view.standby.alive:
            retire = RetireStandby(f"standby {record.run_id} is gone", exit_reason=STANDBY_GONE)
        elif record.config_version != view.spec.config_version:
            why = (
                f"standby {record.run_id} runs config {record.config_version}, "
                f"the job {view.spec.config_version}"
            )
            retire = RetireStandby(why, exit_reason="stopped: config changed")
        else:
            why = "no warm standby wanted: " + (
                "operations.restart.warm_standby is off"
                if not view.spec.operations.restart.warm_standby
                else f"the job is {plan.state.name}"
            )
            retire = RetireStandby(why, exit_reason="stopped: not wanted")
        return replace(plan, actions=(retire, *actions))
    if record is not None:
        taking_over = tuple(TakeOver(a.reason) if isinstance(a, Launch) else a for a in actions)
        return replace(plan, actions=taking_over)
    if not wanted or not (plan.state in _STANDBY_LAUNCH_STATES or _rescale_needs_standby(view)):
        return plan
    failures = standby_failures(view.standby.closed)
    if failures:
        last = view.standby.closed[0]
        wait = backoff_seconds(failures, view.spec.operations.restart)
        if last.stopped_at is not None and now < last.stopped_at + timedelta(seconds=wait):
            return plan
    return replace(plan, actions=(*actions, LaunchStandby("warm standby for the running driver")))


def savepoint_due(view: JobView, now: datetime) -> str | None:
    """Why the running job needs a periodic savepoint now, or None.

    Due one interval after the later of the run's start and the last attempt, good or failed: a
    fresh run has its checkpoint and is busy catching up, and a failing store is retried once per
    interval rather than on every pass. A job with no committed batch has nothing to save.
    """
    policy, heartbeat, run = view.spec.operations.savepoints, view.observation.heartbeat, view.observation.run
    if policy.interval_minutes is None or heartbeat is None or heartbeat.batch_id is None or run is None:
        return None
    last = view.last_savepoint_attempt
    since, label = (last, "last attempt") if last and last > run.started_at else (run.started_at, "run start")
    if now - since < timedelta(minutes=policy.interval_minutes):
        return None
    return f"periodic savepoint every {policy.interval_minutes:g} min ({label} {since:%Y-%m-%d %H:%M:%S})"


def _while_running(view: JobView, now: datetime, inputs: dict[str, Any]) -> Plan:
    assessment = view.assessment
    if assessment.has(Signal.STARTING):
        # A slow start warns once and the driver is left to start: slow is not dead.
        warning = assessment.reasons.get(Signal.SLOW_START)
        if warning is not None and DEGRADING[Signal.SLOW_START] not in view.open_alert_kinds:
            return Plan(
                Lifecycle.SUBMITTED,
                assessment.detail,
                (RaiseAlert("slow_start", "warning", warning),),
                inputs,
            )
        return Plan(Lifecycle.SUBMITTED, assessment.detail, (), inputs)
    actions: list[Action] = []
    for kind in ("down", "spec_rejected", "restart_storm", "port_in_use"):
        if kind in view.open_alert_kinds:
            actions.append(ResolveAlert(kind, f"running again: {assessment.detail}"))
    due = savepoint_due(view, now)
    if due is not None:
        actions.append(TakeSavepoint(due))
    for signal, kind in DEGRADING.items():
        if assessment.has(signal) and kind not in view.open_alert_kinds:
            actions.append(RaiseAlert(kind, "warning", assessment.reasons[signal]))
        elif not assessment.has(signal) and kind in view.open_alert_kinds:
            actions.append(ResolveAlert(kind, f"back within limits: {assessment.detail}"))
    state = Lifecycle.DEGRADED if assessment.reasons else Lifecycle.RUNNING
    return Plan(state, assessment.detail, tuple(actions), inputs)


# --- recovery operations (the module docstring has the state machines) ---------------------------


def _operating(view: JobView, operation: OperationRecord, now: datetime, inputs: dict[str, Any]) -> Plan:
    inputs = {**inputs, "operation": {"id": operation.id, "kind": operation.kind, "step": operation.step}}
    if operation.kind == OperationKind.SCALE:
        return _rescaling(view, operation, now, inputs)
    if operation.kind == OperationKind.UPGRADE:
        if operation.dry_run_passed_at is None:
            return _before_deploy(view, operation, now, inputs)
        if operation.failure is not None:
            return _rolling_back(view, operation, inputs)
        return _deploying(view, operation, now, inputs)
    return _rewinding(view, operation, now, inputs)


def _stop(view: JobView, reason: str, exit_reason: str) -> tuple[Action, ...]:
    """Stop the open run for an operation: gracefully while its driver lives, else just close it."""
    if view.observation.run is None:
        return ()
    if view.observation.process_alive:
        return (StopDriver(reason, exit_reason=exit_reason, graceful=True),)
    return (CloseRun(f"{reason}; the driver is already gone ({view.assessment.detail})", exit_reason),)


def _without_savepoints(actions: tuple[Action, ...]) -> tuple[Action, ...]:
    # No periodic savepoint while an operation is open: a rewind supersedes the newer savepoints,
    # and an upgrade takes its own.
    return tuple(action for action in actions if not isinstance(action, TakeSavepoint))


def _rewinding(view: JobView, operation: OperationRecord, now: datetime, inputs: dict[str, Any]) -> Plan:
    """rewind: rewind -> done. restate: check and stop -> rewind -> replay -> done."""
    kind = operation.kind
    state = Lifecycle.RESTATING if kind == OperationKind.RESTATE else Lifecycle.REWINDING
    if operation.failure is not None:
        finish = FinishOperation(f"{kind} refused: {operation.failure}", Result.REFUSED)
        return Plan(state, finish.reason, (finish,), inputs, Step.FINISH)
    if operation.rewound_at is None:
        if view.observation.run is not None:
            why, exit_reason = f"{kind}: stop the driver before the rewind", f"stopped: {kind}"
            # A live driver is stopped only once the check passed; a dead one has nothing to lose.
            stop = (
                (StopAfterCheck(f"{why}, once the check passes", exit_reason),)
                if view.observation.process_alive
                else _stop(view, why, exit_reason)
            )
            return Plan(state, f"{kind}: checking, then stopping the driver", stop, inputs, Step.STOP)
        assert operation.savepoint_id is not None, "a rewind or restate names its savepoint"
        restore = Restore(f"{kind}: {operation.reason}", operation.savepoint_id)
        return Plan(
            state, f"{kind}: rewinding to savepoint {operation.savepoint_id}", (restore,), inputs, Step.REWIND
        )
    if kind == OperationKind.REWIND:
        finish = FinishOperation(f"rewound to savepoint {operation.savepoint_id}", Result.DONE)
        return Plan(state, finish.reason, (finish,), inputs, Step.FINISH)

    replay_to, progress = operation.replay_to, view.progress
    assert replay_to is not None, "a rewind records its replay before it is done"
    if progress.pending_replay == 0 and progress.last_commit >= replay_to:
        finish = FinishOperation(f"replayed up to batch {replay_to}", Result.DONE)
        return Plan(state, finish.reason, (finish,), inputs, Step.FINISH)
    # The replay is the driver's: the job runs as desired (launch, restarts, suspend) meanwhile.
    running = _supervising(view, now, inputs)
    if running.state in (Lifecycle.RESTARTING, Lifecycle.SUSPENDED, Lifecycle.FAILED):
        state = running.state
    queued = f"replaying {progress.pending_replay} queued batches up to batch {replay_to}"
    return Plan(
        state,
        f"{queued}; {running.reason}",
        _without_savepoints(running.actions),
        running.inputs,
        Step.REPLAY,
    )


def _before_deploy(view: JobView, operation: OperationRecord, now: datetime, inputs: dict[str, Any]) -> Plan:
    """upgrade: savepoint -> dry run. The running version runs on under the ordinary rules."""
    running = _supervising(view, now, inputs)
    step, reason, action = _check_candidate(view, operation, now)
    actions = _without_savepoints(running.actions) + ((action,) if action is not None else ())
    return Plan(Lifecycle.UPGRADING, reason, actions, running.inputs, step)


def _check_candidate(
    view: JobView, operation: OperationRecord, now: datetime
) -> tuple[Step, str, Action | None]:
    target = f"upgrade to config {operation.candidate_version}"
    if operation.failure is not None:
        return Step.FINISH, f"{target} refused", FinishOperation(f"{target} refused", Result.REFUSED)
    if operation.savepoint_id is None:
        reason = f"{target}: savepoint of the running version"
        return Step.SAVEPOINT, reason, TakeUpgradeSavepoint(reason)
    if operation.dry_run_pid is None:
        reason = f"{target}: dry run on a copy of savepoint {operation.savepoint_id}"
        return Step.DRY_RUN, reason, StartDryRun(reason)
    progress = view.progress
    if progress.dry_run_alive:
        started = operation.dry_run_started_at
        if started is not None and now - started > timedelta(seconds=DRY_RUN_TIMEOUT_SECONDS):
            why = (
                f"dry run of the candidate for {operation.job!r} did not finish within "
                f"{DRY_RUN_TIMEOUT_SECONDS:g}s"
            )
            return Step.DRY_RUN, why, EndDryRun(why, failure=why)
        return Step.DRY_RUN, f"{target}: dry run in progress (driver pid {operation.dry_run_pid})", None
    if progress.dry_run_error is not None:
        why = f"candidate for {operation.job!r} cannot take over its current state: {progress.dry_run_error}"
        return Step.DRY_RUN, why, EndDryRun(why, failure=why)
    return Step.DRY_RUN, f"{target}: dry run passed", EndDryRun(f"{target}: dry run passed", failure=None)


def _deploying(view: JobView, operation: OperationRecord, now: datetime, inputs: dict[str, Any]) -> Plan:
    """upgrade: stop -> install the candidate -> launch -> ready; not ready in time rolls back."""
    run, candidate = view.observation.run, operation.candidate_version
    assert candidate is not None, "an upgrade names its candidate"
    target = f"upgrade to config {candidate}"
    if view.spec.config_version != candidate:
        if run is not None:
            stop = _stop(view, f"{target}: stop the running version", "stopped: upgrade")
            return Plan(
                Lifecycle.UPGRADING,
                f"{target}: stopping config {run.config_version}",
                stop,
                inputs,
                Step.STOP,
            )
        install = InstallSpec(f"{target}: {operation.reason}", candidate)
        return Plan(Lifecycle.UPGRADING, f"{target}: installing it", (install,), inputs, Step.INSTALL)
    if run is None:
        ended = next(
            (
                r
                for r in view.closed_runs
                if r.config_version == candidate and r.started_at >= operation.requested_at
            ),
            None,
        )
        if ended is not None:
            return _roll_back(operation, inputs, f"the new version did not stay up ({ended.exit_reason})")
        return Plan(Lifecycle.UPGRADING, f"{target}: launching it", (Launch(target),), inputs, Step.READY)
    if run.config_version != candidate:
        stop = _stop(
            view, f"{target}: stop run {run.run_id} of config {run.config_version}", "stopped: upgrade"
        )
        return Plan(
            Lifecycle.UPGRADING, f"{target}: stopping config {run.config_version}", stop, inputs, Step.STOP
        )
    if view.assessment.has(Signal.DEAD) or view.assessment.has(Signal.STUCK):
        return _roll_back(
            operation, inputs, f"the new version did not stay up (failed: {view.assessment.detail})"
        )
    needed, heartbeat = view.spec.operations.restart.stable_batches, view.observation.heartbeat
    if run.batches_committed >= needed or (heartbeat is not None and heartbeat.event == "idle"):
        finish = FinishOperation(f"upgraded to config {candidate}", Result.DONE)
        return Plan(Lifecycle.UPGRADING, finish.reason, (finish,), inputs, Step.FINISH)
    timeout = operation.readiness_timeout or 0.0
    deadline = run.started_at + timedelta(seconds=timeout)
    if now > deadline:
        return _roll_back(
            operation, inputs, f"the new version did not commit {needed} batches within {timeout:g}s"
        )
    reason = f"{target}: {run.batches_committed} of {needed} batches committed (ready by {deadline:%H:%M:%S})"
    return Plan(Lifecycle.UPGRADING, reason, (), inputs, Step.READY)


def _roll_back(operation: OperationRecord, inputs: dict[str, Any], why: str) -> Plan:
    reason = f"upgrade to config {operation.candidate_version} rolls back: {why}"
    return Plan(Lifecycle.ROLLING_BACK, reason, (RollBack(why),), inputs, Step.READY)


def _rolling_back(view: JobView, operation: OperationRecord, inputs: dict[str, Any]) -> Plan:
    """rollback: stop -> reinstall the previous spec -> rewind to the savepoint -> launch -> page."""
    run, previous, why = view.observation.run, operation.previous_version, operation.failure
    assert previous is not None and operation.savepoint_id is not None, "an upgrade that deployed has both"
    state, back = Lifecycle.ROLLING_BACK, f"rollback to config {previous}"
    if run is not None and (run.config_version != previous or operation.rewound_at is None):
        stop = _stop(view, f"{back}: stop config {run.config_version}", "stopped: upgrade rolled back")
        return Plan(
            state, f"{back} ({why}): stopping config {run.config_version}", stop, inputs, Step.ROLLBACK_STOP
        )
    if view.spec.config_version != previous:
        install = InstallSpec(f"{back}: {why}", previous)
        return Plan(state, f"{back}: reinstalling it", (install,), inputs, Step.ROLLBACK_INSTALL)
    if operation.rewound_at is None:
        restore = Restore(f"{back}: {why}", operation.savepoint_id)
        reason = f"{back}: rewinding to savepoint {operation.savepoint_id}"
        return Plan(state, reason, (restore,), inputs, Step.ROLLBACK_REWIND)
    if run is None:
        return Plan(state, f"{back}: launching it", (Launch(back),), inputs, Step.ROLLBACK_LAUNCH)
    # The page goes first: redone after a crash it is deduplicated, and the operation is still open.
    page = RaiseAlert(
        "upgrade_rolled_back",
        "critical",
        f"{why}; back on config {previous} from savepoint {operation.savepoint_id}",
    )
    finish = FinishOperation(f"rolled back to config {previous}", Result.ROLLED_BACK)
    return Plan(state, finish.reason, (page, finish), inputs, Step.FINISH)


# --- scaling (`ops.control.scaling`; the autoscaler's policy is `ops.control.autoscaler`) ----------


def _with_scaling(view: JobView, plan: Plan, now: datetime) -> Plan:
    """`plan` for a running job with its scale kept: a rescale when the driver runs at another
    scale than the job should (a pin, a released pin, a changed file), else the autoscaler's
    decision, applied or recorded."""
    run = view.observation.run
    if run is None or plan.state not in (Lifecycle.RUNNING, Lifecycle.DEGRADED):
        return plan
    desired, running = desired_scale(view.spec, view.job), run_scale(run, view.spec)
    if running != desired:
        held = _retry_held(view, now)
        if held is not None:
            return replace(plan, reason=f"{plan.reason}; rescale held: {held}")
        rescale = Rescale(
            f"run {run.run_id} runs at {running.describe()}, the job should at {desired.describe()}",
            desired.cores,
            desired.max_files_per_trigger,
            from_cores=running.cores,
            true_rate_before=_true_rate(view),
        )
        return replace(plan, state=Lifecycle.SCALING, reason=rescale.reason, actions=(*plan.actions, rescale))
    policy, scaling = view.spec.operations.autoscaling, view.scaling
    decision = _autoscaler_decision(view, running, now)
    if scaling is None or scaling.window is None or decision is None:
        return plan
    cores = decision.cores
    autoscaler = {
        **decision.inputs,
        "mode": policy.mode,
        "recommended": decision.recommended,
        "max_files_per_trigger": decision.max_files_per_trigger,
        "blocked_by": decision.blocked_by,
    }
    inputs = {**plan.inputs, "autoscaler": autoscaler}
    plan = replace(plan, inputs=inputs, scaling=decision)
    if decision.recommended == cores:
        return plan
    change = f"{cores} -> {decision.recommended} cores: {autoscaler['formula']}"
    if policy.mode == "apply" and decision.changes:
        rescale = Rescale(
            f"autoscaler: {change}",
            decision.recommended,
            decision.max_files_per_trigger,
            from_cores=cores,
            true_rate_before=scaling.window.true_rate,
        )
        return replace(plan, state=Lifecycle.SCALING, reason=rescale.reason, actions=(*plan.actions, rescale))
    why = decision.blocked_by or "recommend mode: nothing is changed"
    recommend = RecommendScale(f"autoscaler recommends {change}; not applied: {why}")
    if not _new_recommendation(scaling, autoscaler, now, policy.stabilization_seconds):
        return plan
    return replace(plan, actions=(*plan.actions, recommend))


def _autoscaler_decision(view: JobView, running: Scale, now: datetime) -> ScalingDecision | None:
    """The autoscaler's decision for a driver running at `running`, from the newest window (None:
    autoscaling off, no window yet, or an operator's pin)."""
    policy, scaling = view.spec.operations.autoscaling, view.scaling
    if scaling is None or scaling.window is None or view.job.scale_pinned:
        return None
    last_low = view.job.scale_low_since
    return decide_scale(
        policy,
        cores=running.cores or policy.min_cores,
        window=scaling.window,
        now=now.timestamp(),
        last=scaling.last,
        low_since=last_low.timestamp() if last_low is not None else None,
        max_files_per_trigger=running.max_files_per_trigger,
        restart_cost_seconds=scaling.restart_cost_seconds,
    )


def _retry_held(view: JobView, now: datetime) -> str | None:
    """Why a rescale the job needs is not opened yet: the previous one was abandoned less than
    the autoscaler's stabilization window ago (an operator's pin or a changed file is retried
    then; the autoscaler's own guard spaces its retries). None: open it."""
    last = view.last_rescale
    if last is None or last.finished_at is None or rescale_applied(last):
        return None
    wait = view.spec.operations.autoscaling.stabilization_seconds
    since = (now - last.finished_at).total_seconds()
    if since >= wait:
        return None
    return f"the last rescale was abandoned {since:.0f} s ago; retried after {wait:g} s ({last.outcome})"


def standby_ready_bound(view: JobView) -> float:
    """How long a rescale waits for its standby to get ready: a cold start and a warm-up batch,
    the job's startup grace plus its batch limit, each learned from its newest runs."""
    measured, operations = view.observation.measured, view.spec.operations
    return (
        startup_grace(measured, operations).seconds
        + operations.trigger.interval_seconds
        + batch_grace(measured, operations).seconds
    )


def _no_longer_needed(view: JobView, operation: OperationRecord, now: datetime) -> str | None:
    """Why the autoscaler's rescale is dropped before its stop: the newest window no longer asks
    for a change in its direction. None: still needed (or not the autoscaler's: a pin, a file).

    A scale-up is kept while the backlog still grows, whatever the newest window's sizing says:
    a job falling behind at its scale needs the bigger one (with its bigger batches), and on a busy
    machine the noise in a few batches' times can fit as "no per-row work" and flip the sizing."""
    run = view.observation.run
    if run is None or operation.from_cores is None or operation.to_cores is None:
        return None
    if view.spec.operations.autoscaling.mode != "apply":
        return None
    decision = _autoscaler_decision(view, run_scale(run, view.spec), now)
    if decision is None:
        return None
    cores, wanted = decision.cores, decision.recommended
    up = operation.to_cores > operation.from_cores
    if (up and wanted > cores) or (not up and wanted < cores):
        return None
    if up and decision.inputs["backlog_growth"] > 0:
        return None
    return f"the newest window no longer needs it: {decision.inputs['formula']}"


def _rescale_needs_standby(view: JobView) -> bool:
    """Whether a rescale's old driver still runs at the old scale: its successor at the new scale
    warms up as a standby meanwhile, so the stop costs only the take-over and a warm first batch.
    A driver that is gone is closed and relaunched at once."""
    run, operation = view.observation.run, view.operation
    if not rescale_open(view) or run is None or not view.observation.process_alive:
        return False
    assert operation is not None
    return run_scale(run, view.spec) != Scale(operation.to_cores, operation.to_max_files)


def _true_rate(view: JobView) -> float | None:
    scaling = view.scaling
    return scaling.window.true_rate if scaling is not None and scaling.window is not None else None


def _new_recommendation(
    scaling: ScalingView, autoscaler: dict[str, Any], now: datetime, stabilization_seconds: float
) -> bool:
    """Whether a recommendation not applied is worth a row: the first, one that says something
    else (cores, recommendation, the guard that blocks it), or the same after a window."""
    last = scaling.last_recommendation
    if last is None or (now - last.at).total_seconds() >= stabilization_seconds:
        return True

    def gist(inputs: dict[str, Any]) -> tuple[Any, ...]:
        blocked = inputs.get("blocked_by")
        return inputs.get("cores"), inputs.get("recommended"), blocked.split(":")[0] if blocked else None

    return gist(last.inputs.get("autoscaler", {})) != gist(autoscaler)


def _abandon(view: JobView, target: str, why: str, now: datetime, inputs: dict[str, Any]) -> Plan:
    """End a rescale before its stop: the standby retired, the running driver left as it is (the
    job's scale goes back to the one it runs at)."""
    run = view.observation.run
    assert run is not None
    finish = FinishOperation(f"{target} abandoned, run {run.run_id} untouched: {why}", Result.ABANDONED)
    record = view.standby.record
    retire = () if record is None else (RetireStandby(f"{target} abandoned", "stopped: rescale abandoned"),)
    running = _supervising(view, now, inputs)
    return Plan(running.state, finish.reason, (*retire, finish), inputs, Step.FINISH)


def _rescaling(view: JobView, operation: OperationRecord, now: datetime, inputs: dict[str, Any]) -> Plan:
    """rescale: stop at a batch boundary -> relaunch at the new scale -> its first committed batch
    (or idle trigger) -> done, with the restart cost measured from the stop. A driver that fails
    on the way is restarted by the ordinary rules; a job to be suspended abandons the rescale."""
    run, state = view.observation.run, Lifecycle.SCALING
    target = f"rescale {operation.from_cores or 'default'} -> {operation.to_cores or 'default'} cores"
    if view.job.desired_state == Desired.SUSPENDED:
        finish = FinishOperation(f"{target} abandoned: the job is to be suspended", Result.ABANDONED)
        return Plan(state, finish.reason, (finish,), inputs, Step.FINISH)
    if run is not None and run_scale(run, view.spec) != Scale(operation.to_cores, operation.to_max_files):
        waited = (now - operation.requested_at).total_seconds()
        standby = view.standby
        needs_standby = _rescale_needs_standby(view)
        if needs_standby and not (standby.alive and standby.ready):
            bound = standby_ready_bound(view)
            if waited >= bound:
                why = (
                    f"its standby was not ready {waited:.0f} s after the rescale began (bound "
                    f"{bound:g} s: the job's startup grace and batch limit); a cluster without "
                    "free cores for it cannot make before it breaks"
                )
                return _abandon(view, target, why, now, inputs)
            why = "warming up" if standby.alive else "to be launched"
            # `_with_standby` launches the successor; the old driver runs on meanwhile.
            return Plan(state, f"{target}: run {run.run_id} runs on, its successor is {why}", (), inputs)
        dropped = _no_longer_needed(view, operation, now) if needs_standby else None
        if dropped is not None:
            return _abandon(view, target, dropped, now, inputs)
        stop = _stop(view, f"{target}: stop at a batch boundary", "stopped: rescale")
        if stop and standby.ready and standby_usable(view):
            # The ready successor is granted in the same pass, right after the stop (the take-over
            # confirms the old driver gone first), not a supervisor pass later: that pass would be
            # downtime. `_with_standby` makes the launch a take-over.
            stop = (*stop, Launch(f"{target}: the ready successor takes over"))
        facts = {} if operation.stop_requested_at is not None else {"stop_requested_at": now}
        return Plan(state, f"{target}: stopping run {run.run_id}", stop, inputs, Step.STOP, facts)
    heartbeat = view.observation.heartbeat
    healthy = not (view.assessment.has(Signal.DEAD) or view.assessment.has(Signal.STUCK))
    if run is not None and heartbeat is not None and healthy:
        ready_at = view.progress.first_commit_at
        if ready_at is None and (run.batches_committed >= 1 or heartbeat.event == "idle"):
            ready_at = heartbeat.at
        if ready_at is not None:
            stopped = operation.stop_requested_at
            cost = round(ready_at - stopped.timestamp(), 3) if stopped is not None else None
            finish = FinishOperation(f"{target}: run {run.run_id} committed", Result.DONE)
            return Plan(state, finish.reason, (finish,), inputs, Step.FINISH, {"restart_cost_seconds": cost})
    running = _supervising(view, now, inputs)
    if running.state in (Lifecycle.RESTARTING, Lifecycle.SUSPENDED, Lifecycle.FAILED):
        state = running.state
    step = Step.LAUNCH if run is None else Step.READY
    return Plan(
        state, f"{target}: {running.reason}", _without_savepoints(running.actions), running.inputs, step
    )
