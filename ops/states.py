"""The vocabulary every wing may use of a job's states: its lifecycle state, its desired state, the
operations the control loop carries out, their steps and results, and the exit reasons that count
as failures. The rules that move a job between these live in `ops.control.policy`."""

from __future__ import annotations

import enum

# Exit reasons that start with this count against the restart budget.
FAILURE = "failed: "
CONFIG_FAILURE = FAILURE + "config: "
# The state shown for a job whose file does not validate (or Spark's analyzer rejected): not a
# lifecycle state, since nothing runs from such a file.
INVALID = "INVALID"


class Lifecycle(enum.Enum):
    """A job's lifecycle state; `terminal` states stay until an operator or a spec change acts."""

    SUBMITTED = ("driver launched; waiting for its first batch or idle event", False)
    RUNNING = ("batches commit or the query idles on time", False)
    DEGRADED = ("running, but falling behind its input", False)
    RESTARTING = ("driver down; relaunch waits for the backoff", False)
    SUSPENDING = ("stop requested; the running batch finishes first", False)
    SUSPENDED = ("stopped on purpose (operator or restart storm)", True)
    FAILED = ("not restarted automatically: needs a fixed spec or an operator restart", True)
    REWINDING = ("a rewind: the driver stops, then the checkpoint goes back to a savepoint", False)
    RESTATING = ("a restatement: stop, rewind to a savepoint, replay the later batches, report", False)
    UPGRADING = ("an upgrade: savepoint, dry run of the candidate, deploy, wait until it is ready", False)
    ROLLING_BACK = ("an upgrade that did not get ready goes back to the previous spec and savepoint", False)
    SCALING = ("a rescale: stop at a batch boundary, relaunch from the checkpoint at the new scale", False)

    def __init__(self, description: str, terminal: bool) -> None:
        self.description = description
        self.terminal = terminal


class Desired(enum.StrEnum):
    RUNNING = "running"
    SUSPENDED = "suspended"


class OperationKind(enum.StrEnum):
    REWIND = "rewind"
    RESTATE = "restate"
    UPGRADE = "upgrade"
    SCALE = "scale"


class Step(enum.StrEnum):
    """The step of an operation a pass works on, recorded before it acts (the module docstring)."""

    REQUESTED = "requested"
    STOP = "stop"
    REWIND = "rewind"
    REPLAY = "replay"
    SAVEPOINT = "savepoint"
    DRY_RUN = "dry_run"
    INSTALL = "install"
    READY = "ready"
    LAUNCH = "launch"
    ROLLBACK_STOP = "rollback_stop"
    ROLLBACK_INSTALL = "rollback_install"
    ROLLBACK_REWIND = "rollback_rewind"
    ROLLBACK_LAUNCH = "rollback_launch"
    FINISH = "finish"


class Result(enum.StrEnum):
    """How an operation ended."""

    DONE = "done"
    REFUSED = "refused"  # refused before the running version, checkpoint or sink was touched
    ROLLED_BACK = "rolled back"
    # A rescale not carried out, the running driver untouched: the job is to be suspended, its
    # standby did not get ready in time, or the newest window no longer needs it.
    ABANDONED = "abandoned"
