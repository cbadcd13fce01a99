"""Errors raised by the platform library.

Hierarchy::

    WardenError                 base of everything raised on purpose by ops/
    ├── ConfigError             a config file is missing, unreadable or invalid (names file and field)
    ├── SecretNotFoundError     a secret reference names nothing (names the reference, never a value)
    ├── LedgerError             the ledger database cannot be reached or migrated
    ├── LaunchError             a driver process could not be started or stopped
    │   └── TakeOverRefused     a standby was not granted: the previous driver is not confirmed gone
    ├── ServiceError            an embedded service (S3 server, Airflow) failed to start or answer
    ├── AlertDeliveryError      Slack refused or could not take an alert (it stays in the outbox)
    ├── SavepointError          a savepoint could not be taken, verified or pruned (nothing catalogued)
    ├── ArchiveError            landing input could not be archived, verified or read back
    ├── RewindError             a rewind was refused (nothing touched) or a replay went wrong
    ├── SinkCleanupError        orphaned sink files cannot be told apart or removed (nothing removed)
    ├── UpgradeError            an upgrade was refused before the running version was touched
    ├── JobBusyError            another operation holds the job's lock
    ├── OperationInProgressError  a rewind, restate or upgrade of the job is still open
    ├── RecoveryOpenError       a table write waited in vain for the job's rewind, restate or upgrade
    ├── StateReadError          a job's state cannot be read (not stateful, nothing committed yet)
    ├── StateLookupError        the job board's out-of-process state read gave no answer
    │   ├── StateLookupBusyError     another lookup is running
    │   └── StateLookupTimeoutError  the read took longer than its limit (it was stopped)
    ├── DraftRejectedError      a job file drafted on the board is refused: its problems by field
    ├── DraftCheckBusyError     another draft is being checked by Spark's analyzer on the board
    ├── PreviewError            a preview tap is not enabled or has captured nothing yet
    ├── WarehouseError          a warehouse table or partition version cannot be staged, published,
    │                           rolled back or found (the catalog is left as it was)
    ├── BackfillError           a backfill cannot be planned (range not archived), fed or verified
    ├── ModelStoreError         a model version cannot be stored, listed or read (nothing replaced)
    └── ViewStoreError          a job's published view cannot be reached, written or read (nothing
                                half-written: a batch is one transaction)
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path


class WardenError(Exception):
    """Base class for errors the platform raises on purpose."""


class ConfigError(WardenError):
    """A config file is invalid; the message names the file and the offending field."""

    def __init__(self, path: Path | str, problem: str) -> None:
        self.path = Path(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


class SecretNotFoundError(WardenError):
    """A secret reference (`env:NAME`, `file:/PATH`, `airflow:CONN_ID`) does not give a value."""

    def __init__(self, reference: str, problem: str) -> None:
        self.reference = reference
        self.problem = problem
        super().__init__(f"secret {reference}: {problem}")


class LedgerError(WardenError):
    """The ledger database cannot be reached or brought to the current schema."""


class LaunchError(WardenError):
    """A driver process could not be started, signalled or stopped."""


class TakeOverRefused(LaunchError):
    """A warm standby was not granted the checkpoint: the previous driver (or a process of its
    group) is not confirmed gone, another run is open, or the standby itself is gone."""


class ServiceError(WardenError):
    """An embedded service did not start or stopped answering."""


class ArchiveError(WardenError):
    """Landing input could not be archived (the partition stays unsealed), verified or read back."""


class AlertDeliveryError(WardenError):
    """Slack did not accept an alert; it stays in the outbox for a later attempt."""

    def __init__(self, status: int | None, detail: str, retry_after: float | None = None) -> None:
        self.status = status
        self.detail = detail
        self.retry_after = retry_after
        super().__init__(f"Slack answered {status}: {detail}")


class SavepointError(WardenError):
    """A savepoint could not be taken, verified or pruned; no ledger row was written for it."""


class RewindError(WardenError):
    """A rewind was refused before anything was touched, or a queued replay could not proceed."""


class SinkCleanupError(WardenError):
    """Orphaned output files of a sink cannot be told apart from committed ones, or not removed."""


class UpgradeError(WardenError):
    """An upgrade was refused (invalid candidate, or it cannot take over the job's state)."""


class JobBusyError(WardenError):
    """Another operation (savepoint, rewind, restate, upgrade, reconcile) holds the job's lock."""

    def __init__(self, job: str, holder: str) -> None:
        self.job = job
        self.holder = holder
        super().__init__(f"job {job!r} is busy: {holder} holds its lock")


class OperationInProgressError(WardenError):
    """A rewind, restate or upgrade was asked for while another one of the job is still open."""

    def __init__(self, job: str, kind: str, step: str, since: datetime) -> None:
        self.job = job
        self.kind = kind
        super().__init__(
            f"job {job!r} has a {kind} in progress (step {step}, requested {since:%Y-%m-%d %H:%M:%S} UTC); "
            f"the reconcile loop finishes it (warden reconcile {job}) before another can start"
        )


class RecoveryOpenError(WardenError):
    """A writer of a job's warehouse table (compaction, backfill publish) waited for the job's open
    rewind, restate or upgrade to end, and it did not end in time: nothing was written."""

    def __init__(self, job: str, operation: str, kind: str, step: str, since: datetime) -> None:
        self.job = job
        self.kind = kind
        super().__init__(
            f"{operation} of {job!r} skipped: its {kind} (step {step}, requested "
            f"{since:%Y-%m-%d %H:%M:%S} UTC) is rewriting the sink the table is made from; the "
            f"{kind} republishes what it changed, and the next {operation} takes the rest"
        )


class StateReadError(WardenError):
    """A job's state cannot be read: the job is not stateful, has no committed batch, or its
    state is not a single transformWithState value state."""


class StateLookupError(WardenError):
    """The job board's state read (a `warden state` process) failed without saying why the state
    cannot be read; the message quotes the end of its error output."""


class StateLookupBusyError(StateLookupError):
    """Another state lookup is running: each starts a Spark JVM, so they run one at a time."""


class StateLookupTimeoutError(StateLookupError):
    """A state read took longer than its limit and was stopped, its JVM with it."""


class DraftRejectedError(WardenError):
    """A job file drafted on the board's form is refused before anything is written: `problems`
    maps each dotted field of the file (`pipeline.routes.0.filter`, or `draft` for the whole
    file) to why, in Spark's words for an expression its analyzer refused."""

    def __init__(self, job: str, problems: dict[str, str]) -> None:
        self.job = job
        self.problems = problems
        listed = "; ".join(f"field '{field}': {why}" for field, why in problems.items())
        super().__init__(f"job file for {job!r} refused, nothing written: {listed}")


class DraftCheckBusyError(WardenError):
    """Another draft is being checked on the board: each check starts a Spark JVM, so they run
    one at a time."""


class PreviewError(WardenError):
    """A preview tap cannot be shown: not enabled for the stage, or nothing captured yet."""


class WarehouseError(WardenError):
    """A warehouse table operation was refused or failed; the catalog shows what it showed before."""


class BackfillError(WardenError):
    """A backfill cannot be planned (hours of the range not sealed in the archive, or expired), its
    partitions cannot be fed to the query, or its staged output does not check out."""


class ModelStoreError(WardenError):
    """A model version cannot be stored, listed or read from the object store (`ops.models`)."""


class ViewStoreError(WardenError):
    """A job's published view (`ops.views`) cannot be reached, written or read, or a batch of its
    changelog holds a key twice; the view keeps what it had."""
