"""The ledger's records: one frozen dataclass per table row, as `ops.ledger.store.Ledger` returns
them, with every time zone-aware (UTC)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import sqlalchemy as sa


def _aware(value: datetime | None) -> datetime | None:
    # SQLite drops the zone on the way back; every stored time is UTC.
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)


@dataclass(frozen=True)
class JobRecord:
    name: str
    desired_state: str
    state: str
    state_reason: str
    state_since: datetime
    restart_requested_at: datetime | None
    config_version: str
    last_batch_id: int | None
    input_rate: float | None
    processed_rate: float | None
    backlog: int | None
    heartbeat_at: datetime | None
    updated_at: datetime
    scale_cores: int | None = None
    scale_max_files: int | None = None
    scale_pinned: bool = False
    recommended_cores: int | None = None
    scale_low_since: datetime | None = None


@dataclass(frozen=True)
class RunRecord:
    run_id: str
    job: str
    backend: str
    pid: int | None
    app_id: str | None
    metrics_port: int | None
    log_path: str | None
    config_version: str
    started_at: datetime
    stopped_at: datetime | None
    exit_reason: str | None
    first_batch_id: int | None = None
    last_batch_id: int | None = None
    cores: int | None = None
    max_files_per_trigger: int | None = None
    start_seconds: float | None = None
    longest_batch_seconds: float | None = None

    @property
    def batches_committed(self) -> int:
        """Batches this run committed, from the first and last batch its heartbeats reported."""
        if self.first_batch_id is None or self.last_batch_id is None:
            return 0
        return self.last_batch_id - self.first_batch_id + 1


@dataclass(frozen=True)
class StandbyRecord:
    """A warm standby driver of a job: launched, waiting for a grant, then promoted or retired."""

    run_id: str
    job: str
    backend: str
    pid: int | None
    app_id: str | None
    log_path: str | None
    config_version: str
    started_at: datetime
    granted_at: datetime | None = None
    replaces_run_id: str | None = None
    stopped_at: datetime | None = None
    exit_reason: str | None = None

    def as_run(self) -> RunRecord:
        """The standby as a run record: what the launch backend watches, stops and kills, and
        the run row a take-over opens."""
        return RunRecord(
            run_id=self.run_id,
            job=self.job,
            backend=self.backend,
            pid=self.pid,
            app_id=self.app_id,
            metrics_port=None,
            log_path=self.log_path,
            config_version=self.config_version,
            started_at=self.started_at,
            stopped_at=None,
            exit_reason=None,
        )


@dataclass(frozen=True)
class DecisionRecord:
    id: int
    job: str
    at: datetime
    action: str
    reason: str
    inputs: dict[str, Any]
    run_id: str | None
    outcome: str | None


@dataclass(frozen=True)
class AlertRecord:
    id: int
    job: str
    kind: str
    dedup_key: str
    severity: str
    payload: dict[str, Any]
    status: str
    created_at: datetime
    attempts: int
    next_attempt_at: datetime
    last_error: str | None
    sent_at: datetime | None


@dataclass(frozen=True)
class SavepointRecord:
    """A catalogued savepoint: its manifest is in the object store under `manifest_key`."""

    id: str
    job: str
    batch_id: int
    created_at: datetime
    manifest_key: str
    total_bytes: int
    uploaded_bytes: int
    status: str
    config_version: str


@dataclass(frozen=True)
class OperationRecord:
    """A rewind, restate or upgrade of one job, as requested and as far as the loop has carried it.

    `kind`, `reason`, `decision_id` (the operation's decision row, which gets the outcome) and the
    upgrade's specs are fixed at the request. `step` is what the newest pass worked on, written
    before it acted. The rest are facts the steps recorded (what `decide` reads): the savepoint
    (a rewind's target, or the one an upgrade took), the replay a rewind queued and when it was
    done, the dry-run driver and its verdict, and `failure`, why the operation is refused, rolled
    back or failed. `finished_at` and `outcome` are set once, when the operation is closed. A
    rescale (`scale`) fixes its cores and batch size, from and to, and the true rate before it at
    the request; its stop records when it began, its finish the restart cost it measured.
    """

    id: int
    job: str
    kind: str
    reason: str
    decision_id: int
    requested_at: datetime
    step: str
    step_since: datetime
    savepoint_id: str | None = None
    savepoint_batch: int | None = None
    replay_to: int | None = None
    rows_before: int | None = None
    rewound_at: datetime | None = None
    candidate_spec: str | None = None
    candidate_version: str | None = None
    previous_spec: str | None = None
    previous_version: str | None = None
    readiness_timeout: float | None = None
    dry_run_id: str | None = None
    dry_run_pid: int | None = None
    dry_run_app_id: str | None = None
    dry_run_started_at: datetime | None = None
    dry_run_passed_at: datetime | None = None
    failure: str | None = None
    finished_at: datetime | None = None
    outcome: str | None = None
    from_cores: int | None = None
    to_cores: int | None = None
    to_max_files: int | None = None
    true_rate_before: float | None = None
    stop_requested_at: datetime | None = None
    restart_cost_seconds: float | None = None


@dataclass(frozen=True)
class PartitionVersionRecord:
    """One version of a warehouse partition (`partition` is its path, `route=a/event_hour=10`).

    `status`: "staged" (written, not audited yet), "published" (the catalog pointed at it, now or
    before), "blocked" (its audit failed: never published). `source` says what wrote it:
    "compaction", "restatement" (the compaction a restatement runs of the partitions it changed),
    "backfill" or "rollback" (a rollback re-publishes an older version's location).
    `input_fingerprint` identifies the committed input files it was made from, so a partition
    whose input changed since (a restatement, late files) is compacted again.
    """

    id: int
    job: str
    partition: str
    version: int
    location: str
    source: str
    status: str
    created_at: datetime
    published_at: datetime | None = None
    input_files: int | None = None
    input_rows: int | None = None
    input_fingerprint: str | None = None
    output_files: int | None = None
    output_rows: int | None = None
    rows_before: int | None = None
    audit: dict[str, Any] | None = None
    expired_at: datetime | None = None


RecordT = TypeVar("RecordT")


def from_row(cls: type[RecordT], row: sa.Row[Any]) -> RecordT:
    values = {
        key: _aware(value) if isinstance(value, datetime) else value for key, value in row._mapping.items()
    }
    return cls(**values)
