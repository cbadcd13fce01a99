"""Scaling (`ops.control.scaling`; the autoscaler's own policy is `ops.control.autoscaler`): a
running job at another scale than it should be is rescaled make before break, the autoscaler's
decision is applied or recorded as a recommendation, and a `scale` operation's steps."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

from ops.control.autoscaler import ScalingDecision, decide_scale
from ops.control.health import Signal, batch_grace, startup_grace
from ops.control.policy.actions import FinishOperation, Launch, RecommendScale, Rescale, RetireStandby
from ops.control.policy.restart import supervising
from ops.control.policy.view import (
    JobView,
    Plan,
    rescale_needs_standby,
    standby_usable,
    stop_for_operation,
    without_savepoints,
)
from ops.control.scaling import Scale, ScalingView, desired_scale, rescale_applied, run_scale
from ops.ledger.records import OperationRecord
from ops.states import Desired, Lifecycle, Result, Step


def with_scaling(view: JobView, plan: Plan, now: datetime) -> Plan:
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
    running = supervising(view, now, inputs)
    return Plan(running.state, finish.reason, (*retire, finish), inputs, Step.FINISH)


def rescaling(view: JobView, operation: OperationRecord, now: datetime, inputs: dict[str, Any]) -> Plan:
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
        needs_standby = rescale_needs_standby(view)
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
            # `with_standby` launches the successor; the old driver runs on meanwhile.
            return Plan(state, f"{target}: run {run.run_id} runs on, its successor is {why}", (), inputs)
        dropped = _no_longer_needed(view, operation, now) if needs_standby else None
        if dropped is not None:
            return _abandon(view, target, dropped, now, inputs)
        stop = stop_for_operation(view, f"{target}: stop at a batch boundary", "stopped: rescale")
        if stop and standby.ready and standby_usable(view):
            # The ready successor is granted in the same pass, right after the stop (the take-over
            # confirms the old driver gone first), not a supervisor pass later: that pass would be
            # downtime. `with_standby` makes the launch a take-over.
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
    running = supervising(view, now, inputs)
    if running.state in (Lifecycle.RESTARTING, Lifecycle.SUSPENDED, Lifecycle.FAILED):
        state = running.state
    step = Step.LAUNCH if run is None else Step.READY
    return Plan(
        state, f"{target}: {running.reason}", without_savepoints(running.actions), running.inputs, step
    )
