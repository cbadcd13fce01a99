"""The ordinary rules, while no recovery operation is open: the desired state, operator requests,
restarts of a failed driver with exponential backoff within a budget (a restart storm suspends the
job and pages), health warnings, and periodic savepoints."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from ops.control.health import DEGRADING, STUCK_DETAILS, Signal
from ops.control.policy.actions import (
    Action,
    CloseRun,
    Launch,
    RaiseAlert,
    ResolveAlert,
    StopDriver,
    SuspendJob,
    TakeSavepoint,
)
from ops.control.policy.view import JobView, Plan, standby_usable
from ops.ledger.records import RunRecord
from ops.spec.job import METRICS_PORT_IN_USE, RestartPolicy, metrics_port_in_use
from ops.states import CONFIG_FAILURE, FAILURE, Desired, Lifecycle


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


def supervising(view: JobView, now: datetime, inputs: dict[str, Any]) -> Plan:
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

    changed = run is not None and run.config_version != view.spec.config_version
    if changed and view.spec.operations.restart.on_change:
        assert run is not None
        reason = f"config {run.config_version} changed to {view.spec.config_version}"
        stop = StopDriver(reason, exit_reason="stopped: config changed", graceful=True)
        return Plan(Lifecycle.SUBMITTED, f"restarting: {reason}", (stop, Launch(reason)), inputs)

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
