"""The supervisor's pure policy: lifecycle states, actions, and `decide` (DESIGN.md section 3).

`decide` sees only values (a `JobView`) and returns a `Plan`: the next lifecycle state, why, and
the actions that get the job there. No I/O happens here, so the restart policy, backoff, storm and
savepoint rules are tested without processes; `ops.control.supervisor` observes and acts.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from ops.control.health import DEGRADING, Assessment, Observation, Signal
from ops.ledger.store import JobRecord, RunRecord
from ops.spec.job import METRICS_PORT_IN_USE, JobSpec, RestartPolicy, metrics_port_in_use

# Exit reasons that start with this count against the restart budget.
FAILURE = "failed: "
CONFIG_FAILURE = FAILURE + "config: "


class Lifecycle(enum.Enum):
    """A job's lifecycle state; `terminal` states stay until an operator or a spec change acts."""

    SUBMITTED = ("driver launched; waiting for its first batch or idle event", False)
    RUNNING = ("batches commit or the query idles on time", False)
    DEGRADED = ("running, but falling behind its input", False)
    RESTARTING = ("driver down; relaunch waits for the backoff", False)
    SUSPENDING = ("stop requested; the running batch finishes first", False)
    SUSPENDED = ("stopped on purpose (operator or restart storm)", True)
    FAILED = ("not restarted automatically: needs a fixed spec or an operator restart", True)

    def __init__(self, description: str, terminal: bool) -> None:
        self.description = description
        self.terminal = terminal


class Desired(enum.StrEnum):
    RUNNING = "running"
    SUSPENDED = "suspended"


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


Action = Launch | StopDriver | CloseRun | SuspendJob | RaiseAlert | ResolveAlert | TakeSavepoint


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


@dataclass(frozen=True)
class Plan:
    state: Lifecycle
    reason: str
    actions: tuple[Action, ...] = ()
    inputs: dict[str, Any] = field(default_factory=dict)


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
        reason = f"restart storm: {streak} failed runs in a row exceed the budget of {policy.budget}"
        storm: list[Action] = [SuspendJob(reason)]
        if "restart_storm" not in view.open_alert_kinds:
            storm.append(RaiseAlert("restart_storm", "critical", reason))
        return Plan(Lifecycle.SUSPENDED, reason, (*actions, *storm), inputs)
    wait = backoff_seconds(streak, policy)
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
