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

from datetime import datetime
from typing import Any

from ops.control.policy.actions import (
    Action,
    CloseRun,
    EndDryRun,
    FinishOperation,
    InstallSpec,
    Launch,
    LaunchStandby,
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
)
from ops.control.policy.operations import DRY_RUN_TIMEOUT_SECONDS, rewinding, upgrading
from ops.control.policy.rescaling import rescaling, standby_ready_bound, with_scaling
from ops.control.policy.restart import backoff_seconds, restart_streak, savepoint_due, supervising
from ops.control.policy.standby import STANDBY_GONE, with_standby
from ops.control.policy.view import JobView, Plan, RecoveryProgress, StandbyView
from ops.ledger.records import OperationRecord
from ops.states import OperationKind

__all__ = [
    "DRY_RUN_TIMEOUT_SECONDS",
    "STANDBY_GONE",
    "Action",
    "CloseRun",
    "EndDryRun",
    "FinishOperation",
    "InstallSpec",
    "JobView",
    "Launch",
    "LaunchStandby",
    "Plan",
    "RaiseAlert",
    "RecommendScale",
    "RecoveryProgress",
    "Rescale",
    "ResolveAlert",
    "Restore",
    "RetireStandby",
    "RollBack",
    "StandbyView",
    "StartDryRun",
    "StopAfterCheck",
    "StopDriver",
    "SuspendJob",
    "TakeOver",
    "TakeSavepoint",
    "TakeUpgradeSavepoint",
    "backoff_seconds",
    "decide",
    "restart_streak",
    "savepoint_due",
    "standby_ready_bound",
]


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
        plan = with_scaling(view, supervising(view, now, inputs), now)
    return with_standby(view, plan, now)


def _operating(view: JobView, operation: OperationRecord, now: datetime, inputs: dict[str, Any]) -> Plan:
    """The open operation's next step, by its kind."""
    inputs = {**inputs, "operation": {"id": operation.id, "kind": operation.kind, "step": operation.step}}
    if operation.kind == OperationKind.SCALE:
        return rescaling(view, operation, now, inputs)
    if operation.kind == OperationKind.UPGRADE:
        return upgrading(view, operation, now, inputs)
    return rewinding(view, operation, now, inputs)
