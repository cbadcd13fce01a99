"""The columns each of the ledger's update methods may set, with their types, so that a misspelled
column or a wrong type is a type error where the update is written, not a failure when it runs."""

from __future__ import annotations

from datetime import datetime
from typing import Any, TypedDict


class JobChanges(TypedDict, total=False):
    """A job's columns `Ledger.update_job` may set."""

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
    scale_cores: int | None
    scale_max_files: int | None
    scale_pinned: bool
    recommended_cores: int | None
    scale_low_since: datetime | None


class RunChanges(TypedDict, total=False):
    """A run's columns `Ledger.update_run` may set."""

    backend: str
    pid: int | None
    app_id: str | None
    metrics_port: int | None
    log_path: str | None
    config_version: str
    started_at: datetime
    stopped_at: datetime | None
    exit_reason: str | None
    first_batch_id: int | None
    last_batch_id: int | None
    cores: int | None
    max_files_per_trigger: int | None
    start_seconds: float | None
    longest_batch_seconds: float | None


class AlertChanges(TypedDict, total=False):
    """An alert's columns `Ledger.update_alert` may set."""

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


class OperationFacts(TypedDict, total=False):
    """An operation's columns `Ledger.start_operation` may set besides those it names."""

    requested_at: datetime
    step_since: datetime
    savepoint_id: str | None
    savepoint_batch: int | None
    replay_to: int | None
    rows_before: int | None
    rewound_at: datetime | None
    candidate_spec: str | None
    candidate_version: str | None
    previous_spec: str | None
    previous_version: str | None
    readiness_timeout: float | None
    dry_run_id: str | None
    dry_run_pid: int | None
    dry_run_app_id: str | None
    dry_run_started_at: datetime | None
    dry_run_passed_at: datetime | None
    failure: str | None
    finished_at: datetime | None
    outcome: str | None
    from_cores: int | None
    to_cores: int | None
    to_max_files: int | None
    true_rate_before: float | None
    stop_requested_at: datetime | None
    restart_cost_seconds: float | None


class PartitionVersionFacts(TypedDict, total=False):
    """A partition version's columns `Ledger.add_partition_version` may set besides those it names."""

    version: int
    status: str
    created_at: datetime
    published_at: datetime | None
    input_files: int | None
    input_rows: int | None
    input_fingerprint: str | None
    output_files: int | None
    output_rows: int | None
    rows_before: int | None
    audit: dict[str, Any] | None
    expired_at: datetime | None


class OperationChanges(OperationFacts, total=False):
    """An operation's columns `Ledger.update_operation` may set."""

    step: str


class PartitionVersionChanges(PartitionVersionFacts, total=False):
    """A partition version's columns `Ledger.update_partition_version` may set."""

    location: str
