"""What `decide` asks the loop to do: one frozen dataclass per action, each with the reason the
decision row records and the `kind` it is recorded under (the loop hands each to its room,
`ops.control.supervisor`)."""

from __future__ import annotations

from dataclasses import dataclass

from ops.control.scaling import RECOMMENDATION, RESCALE
from ops.states import Result

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
