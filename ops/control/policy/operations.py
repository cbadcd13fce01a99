"""The rewind, restate and upgrade state machines (the package docstring draws them): the step
each pass takes from the operation's recorded facts and the observation."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from ops.control.health import Signal
from ops.control.policy.actions import (
    Action,
    EndDryRun,
    FinishOperation,
    InstallSpec,
    Launch,
    RaiseAlert,
    Restore,
    RollBack,
    StartDryRun,
    StopAfterCheck,
    TakeUpgradeSavepoint,
)
from ops.control.policy.restart import supervising
from ops.control.policy.view import JobView, Plan, stop_for_operation, without_savepoints
from ops.ledger.records import OperationRecord
from ops.states import Lifecycle, OperationKind, Result, Step

# A dry run replays one batch; a driver still at it after this long is stopped and refused.
DRY_RUN_TIMEOUT_SECONDS = 300.0


def upgrading(view: JobView, operation: OperationRecord, now: datetime, inputs: dict[str, Any]) -> Plan:
    """An upgrade's step: before its dry run has passed, deploying, or rolling back a failure."""
    if operation.dry_run_passed_at is None:
        return _before_deploy(view, operation, now, inputs)
    if operation.failure is not None:
        return _rolling_back(view, operation, inputs)
    return _deploying(view, operation, now, inputs)


def rewinding(view: JobView, operation: OperationRecord, now: datetime, inputs: dict[str, Any]) -> Plan:
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
                else stop_for_operation(view, why, exit_reason)
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
    running = supervising(view, now, inputs)
    if running.state in (Lifecycle.RESTARTING, Lifecycle.SUSPENDED, Lifecycle.FAILED):
        state = running.state
    queued = f"replaying {progress.pending_replay} queued batches up to batch {replay_to}"
    return Plan(
        state, f"{queued}; {running.reason}", without_savepoints(running.actions), running.inputs, Step.REPLAY
    )


def _before_deploy(view: JobView, operation: OperationRecord, now: datetime, inputs: dict[str, Any]) -> Plan:
    """upgrade: savepoint -> dry run. The running version runs on under the ordinary rules."""
    running = supervising(view, now, inputs)
    step, reason, action = _check_candidate(view, operation, now)
    actions = without_savepoints(running.actions) + ((action,) if action is not None else ())
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
            stop = stop_for_operation(view, f"{target}: stop the running version", "stopped: upgrade")
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
        stop = stop_for_operation(
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
        stop = stop_for_operation(
            view, f"{back}: stop config {run.config_version}", "stopped: upgrade rolled back"
        )
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
