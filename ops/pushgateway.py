"""Batch tasks push their figures to a Prometheus Pushgateway (team deployments).

A streaming driver is scraped while it runs; a batch task ends before any scrape would see it, so
it pushes its outcome instead, when `monitoring.pushgateway_url` is set in platform.yaml (off in
the embedded default): a savepoint (the supervisor), a compaction (`ops.warehouse.compaction`) and a
backfill (its application, `jobs.backfill`, when it fails or finishes, and its publish,
`ops.warehouse.publish`). This module imports nothing of the control plane at run time, so a
backfill's Spark driver may push too.

Each push goes to the group `job="streamwarden_batch_tasks", job_name=<job>, task=<task>`, so the
Pushgateway labels every series with the streaming job (`job_name`, as the drivers label theirs)
and the task it is about. Pushes use POST
(replace only the metrics pushed), so a failure's timestamp leaves the last success's figures in
place and the alert rules compare the two. `BATCH_TASK_METRICS` lists every metric name a task
pushes: the alert rules and dashboards are checked against it and a real driver's scrape.

A push is best effort: a Pushgateway that is down must not fail the savepoint it reports on, so
an unreachable or refusing gateway is logged as a warning and the task carries on.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

import structlog
from prometheus_client import CollectorRegistry, Gauge, pushadd_to_gateway

from ops.driver.telemetry import JOB_LABEL
from ops.spec.job import JobSpec
from ops.spec.platform import MonitoringConfig

if TYPE_CHECKING:
    from ops.ledger.records import SavepointRecord

PUSH_GROUP_JOB = "streamwarden_batch_tasks"
TASK_LABEL = "task"

LAST_SUCCESS = "streamwarden_task_last_success_timestamp_seconds"
LAST_FAILURE = "streamwarden_task_last_failure_timestamp_seconds"
LAST_DURATION = "streamwarden_task_last_duration_seconds"
SAVEPOINT_BATCH = "streamwarden_savepoint_batch_id"
SAVEPOINT_TOTAL_BYTES = "streamwarden_savepoint_total_bytes"
SAVEPOINT_UPLOADED_BYTES = "streamwarden_savepoint_uploaded_bytes"
SAVEPOINT_INTERVAL = "streamwarden_savepoint_interval_seconds"

# Every metric a batch task pushes, with its help text.
BATCH_TASK_METRICS: Mapping[str, str] = {
    LAST_SUCCESS: "When the task last succeeded for the job",
    LAST_FAILURE: "When the task last failed for the job",
    LAST_DURATION: "How long the task's last successful run took",
    SAVEPOINT_BATCH: "The committed batch the newest savepoint is anchored on",
    SAVEPOINT_TOTAL_BYTES: "Size of the newest savepoint",
    SAVEPOINT_UPLOADED_BYTES: "Bytes the newest savepoint uploaded (the rest was already stored)",
    SAVEPOINT_INTERVAL: "The job's savepoints.interval_minutes in seconds (periodic savepoints only)",
}

log = structlog.get_logger("streamwarden.pushgateway")


class BatchTask(enum.StrEnum):
    """The batch tasks that push, by the `task` label they push under."""

    SAVEPOINT = "savepoint"
    COMPACTION = "compaction"
    BACKFILL = "backfill"


def push_task_outcome(
    monitoring: MonitoringConfig,
    task: BatchTask,
    job: str,
    *,
    succeeded: bool,
    duration_seconds: float | None = None,
    figures: Mapping[str, float] | None = None,
) -> bool:
    """Push one run of `task` for `job`: its success (with its duration and `figures`, names from
    `BATCH_TASK_METRICS`) or its failure. Whether it was pushed; False when no gateway is set or
    it could not take the push (logged)."""
    if monitoring.pushgateway_url is None:
        return False
    values = dict(figures or {})
    if succeeded:
        values[LAST_SUCCESS] = time.time()
        if duration_seconds is not None:
            values[LAST_DURATION] = duration_seconds
    else:
        values[LAST_FAILURE] = time.time()
    unknown = sorted(set(values) - set(BATCH_TASK_METRICS))
    if unknown:
        raise ValueError(f"not batch task metrics (see BATCH_TASK_METRICS): {unknown}")
    registry = CollectorRegistry()
    for name, value in values.items():
        Gauge(name, BATCH_TASK_METRICS[name], registry=registry).set(value)
    try:
        pushadd_to_gateway(
            monitoring.pushgateway_url,
            job=PUSH_GROUP_JOB,
            grouping_key={JOB_LABEL: job, TASK_LABEL: task.value},
            registry=registry,
            timeout=monitoring.push_timeout_seconds,
        )
    # urllib's URLError and HTTPError (a gateway refusing the push) are OSErrors.
    except OSError as error:
        log.warning(
            "pushgateway push failed",
            url=monitoring.pushgateway_url,
            job=job,
            task=task.value,
            error=str(error),
        )
        return False
    return True


def push_savepoint(
    monitoring: MonitoringConfig, spec: JobSpec, savepoint: SavepointRecord, duration_seconds: float
) -> bool:
    """Push a savepoint just taken: its batch, sizes, how long it took, and the job's savepoint
    interval when savepoints are periodic (what the savepoint-age alert measures against)."""
    figures = {
        SAVEPOINT_BATCH: float(savepoint.batch_id),
        SAVEPOINT_TOTAL_BYTES: float(savepoint.total_bytes),
        SAVEPOINT_UPLOADED_BYTES: float(savepoint.uploaded_bytes),
    }
    interval_minutes = spec.operations.savepoints.interval_minutes
    if interval_minutes is not None:
        figures[SAVEPOINT_INTERVAL] = interval_minutes * 60
    return push_task_outcome(
        monitoring,
        BatchTask.SAVEPOINT,
        spec.name,
        succeeded=True,
        duration_seconds=duration_seconds,
        figures=figures,
    )
