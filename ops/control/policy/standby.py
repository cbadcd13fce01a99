"""Warm standbys (`operations.restart.warm_standby`, and every rescale): a second driver launched
beside a running one, taking over instead of a launch, retired when unwanted or unusable, and
replaced after a backoff of its own when it died by itself."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from ops.control.policy.actions import Launch, LaunchStandby, RetireStandby, TakeOver
from ops.control.policy.restart import backoff_seconds
from ops.control.policy.view import JobView, Plan, rescale_needs_standby, rescale_open, standby_usable
from ops.ledger.records import StandbyRecord
from ops.states import FAILURE, Desired, Lifecycle

# Lifecycle states in which the active driver is past its start: a standby may start beside it.
_STANDBY_LAUNCH_STATES = (Lifecycle.RUNNING, Lifecycle.DEGRADED)
# Lifecycle states in which no driver is to run: a standby is retired.
_STANDBY_RETIRE_STATES = (Lifecycle.SUSPENDED, Lifecycle.FAILED)
# The exit reason of a standby whose process ended without being retired.
STANDBY_GONE = FAILURE + "standby process gone"


def standby_failures(closed: tuple[StandbyRecord, ...]) -> int:
    """How many standbys in a row, newest first, ended by themselves (not promoted or retired)."""
    streak = 0
    for standby in closed:
        if standby.exit_reason != STANDBY_GONE:
            break
        streak += 1
    return streak


def with_standby(view: JobView, plan: Plan, now: datetime) -> Plan:
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
    if not wanted or not (plan.state in _STANDBY_LAUNCH_STATES or rescale_needs_standby(view)):
        return plan
    failures = standby_failures(view.standby.closed)
    if failures:
        last = view.standby.closed[0]
        wait = backoff_seconds(failures, view.spec.operations.restart)
        if last.stopped_at is not None and now < last.stopped_at + timedelta(seconds=wait):
            return plan
    return replace(plan, actions=(*actions, LaunchStandby("warm standby for the running driver")))
