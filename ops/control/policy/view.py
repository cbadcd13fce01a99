"""What `decide` sees, as plain values (`JobView`), what it returns (`Plan`), and the predicates
over a view that several of its sub-machines ask (is a rescale open, can the standby take over,
does a rescale need one), with the stop of the open run that the operations share."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ops.control.autoscaler import ScalingDecision
from ops.control.health import Assessment, Observation
from ops.control.policy.actions import Action, CloseRun, StopDriver, TakeSavepoint
from ops.control.scaling import Scale, ScalingView, run_scale
from ops.ledger.records import JobRecord, OperationRecord, RunRecord, StandbyRecord
from ops.spec.job import JobSpec
from ops.states import Lifecycle, OperationKind, Step


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


def rescale_needs_standby(view: JobView) -> bool:
    """Whether a rescale's old driver still runs at the old scale: its successor at the new scale
    warms up as a standby meanwhile, so the stop costs only the take-over and a warm first batch.
    A driver that is gone is closed and relaunched at once."""
    run, operation = view.observation.run, view.operation
    if not rescale_open(view) or run is None or not view.observation.process_alive:
        return False
    assert operation is not None
    return run_scale(run, view.spec) != Scale(operation.to_cores, operation.to_max_files)


def stop_for_operation(view: JobView, reason: str, exit_reason: str) -> tuple[Action, ...]:
    """Stop the open run for an operation: gracefully while its driver lives, else just close it."""
    if view.observation.run is None:
        return ()
    if view.observation.process_alive:
        return (StopDriver(reason, exit_reason=exit_reason, graceful=True),)
    return (CloseRun(f"{reason}; the driver is already gone ({view.assessment.detail})", exit_reason),)


def without_savepoints(actions: tuple[Action, ...]) -> tuple[Action, ...]:
    # No periodic savepoint while an operation is open: a rewind supersedes the newer savepoints,
    # and an upgrade takes its own.
    return tuple(action for action in actions if not isinstance(action, TakeSavepoint))
