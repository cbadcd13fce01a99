"""`python -m ops.warehouse.compaction --job NAME`: compact a job's sink into its warehouse table.

The entry point the nightly DAG runs through `spark-submit` (SparkSubmitOperator), and `warden
table compact` locally. Without `--partition` it compacts every closed partition whose committed
input changed since it was published (`ops.warehouse.compact`); with `--partition KEY` (any
number), exactly those. `--now` is the time partitions are judged closed at: a catch-up run for a
missed night passes that night's time. Then, with `operations.compaction.sink_retention_hours`, the
raw files and sink-log entries of published partitions past that horizon expire
(`ops.warehouse.sinklog`).

The run holds the job's table lock, not its operation lock: the supervisor restarts a dead driver
while a compaction runs. It waits while a rewind, restate or upgrade of the job is open
(`--recovery-wait` seconds at most) and otherwise skips the job with a decision row
(`ops.warehouse.writers`); the sink-log expiry, which rewrites the checkpoint's sink log, also
takes the operation lock, for a moment, and is left to the next night if the job is busy.

Exit codes: 0 done (a partition blocked by its audit is reported, paged and left unpublished, and a
job skipped for its open recovery is recorded: the run itself did its job), 2 config error, 4 the
table lock is held by another writer.

With `monitoring.pushgateway_url` set, a run that did its job pushes its success and duration, one
that failed (an error of the job's config or the warehouse, or Spark's) its failure, which
`StreamwardenBatchTaskFailed` alerts on; a skipped run and one that found the table locked push
nothing (the next night runs again).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import structlog
from pyspark.sql import SparkSession

from ops.alerts import AlertCenter
from ops.clock import utcnow
from ops.driver.session import EXIT_CONFIG_ERROR, EXIT_STOPPED, build_session, configure_logging
from ops.exceptions import ConfigError, JobBusyError, RecoveryOpenError, WarehouseError
from ops.ledger.locks import job_lock
from ops.ledger.store import Ledger
from ops.pushgateway import BatchTask, push_task_outcome
from ops.spec.job import CompactionPolicy, JobSpec, find_job
from ops.spec.paths import JobPaths
from ops.spec.platform import PlatformConfig, load_platform
from ops.warehouse.compact import PartitionOutcome, compact
from ops.warehouse.metastore import metastore_conf
from ops.warehouse.sinklog import expire_sink_log
from ops.warehouse.table import WarehouseTable, expire_versions
from ops.warehouse.writers import table_writer

EXIT_JOB_BUSY = 4
# How long a nightly run waits for another writer of the table (a backfill's publish) to finish.
LOCK_TIMEOUT_SECONDS = 3600.0
# How long a nightly run waits for a rewind, restate or upgrade of the job to end before skipping it.
RECOVERY_WAIT_SECONDS = 3600.0
# The sink-log expiry waits this long for the operation lock (a reconcile pass takes seconds).
EXPIRY_LOCK_SECONDS = 60.0

log = structlog.get_logger("streamwarden.compaction")


def warehouse_session(platform: PlatformConfig, spec: JobSpec) -> SparkSession:
    """The job's SparkSession with the warehouse catalog (the shared Hive metastore)."""
    spark_defaults = platform.spark.model_copy(
        update={"extra_conf": {**platform.spark.extra_conf, **metastore_conf(platform)}}
    )
    return build_session(platform.model_copy(update={"spark": spark_defaults}), spec)


def warehouse_table(platform: PlatformConfig, spec: JobSpec) -> WarehouseTable:
    return WarehouseTable.of(platform, spec.name, spec.pipeline.partition_columns)


def run_compaction(
    platform: PlatformConfig,
    spec: JobSpec,
    now: datetime,
    partitions: Sequence[str] | None = None,
    lock_timeout: float | None = LOCK_TIMEOUT_SECONDS,
    source: str = "compaction",
    recovery_wait: float = RECOVERY_WAIT_SECONDS,
) -> list[PartitionOutcome]:
    """Compact under the table lock in a warehouse session; the outcomes, one per partition.
    RecoveryOpenError when a recovery of the job stayed open for `recovery_wait` seconds."""
    ledger = Ledger.open(platform.resolved_ledger_url)
    with table_writer(
        platform, ledger, spec.name, "compaction", recovery_wait=recovery_wait, lock_timeout=lock_timeout
    ):
        spark = warehouse_session(platform, spec)
        table = warehouse_table(platform, spec)
        try:
            outcomes = compact(
                spark,
                ledger,
                AlertCenter(ledger, platform.slack),
                spec,
                table,
                JobPaths.of(platform, spec).sink,
                now,
                only=partitions,
                source=source,
            )
        finally:
            spark.stop()
        for expired in expire_versions(
            ledger, table, timedelta(hours=platform.warehouse.version_retention_hours)
        ):
            log.info("version expired", partition=expired.partition, version=expired.version)
        _expire_sink_log(platform, ledger, spec, table, now)
        return outcomes


def _expire_sink_log(
    platform: PlatformConfig, ledger: Ledger, spec: JobSpec, table: WarehouseTable, now: datetime
) -> None:
    """Expire the sink log's published partitions under the operation lock too, since it rewrites
    the log a savepoint copies; when the job is busy or a recovery opened meanwhile, the next
    night does it."""
    policy = spec.operations.compaction or CompactionPolicy()
    try:
        with job_lock(platform, spec.name, "sink log expiry", timeout=EXPIRY_LOCK_SECONDS):
            if ledger.operation(spec.name) is not None:
                log.info("sink log expiry deferred: a recovery of the job is open", job=spec.name)
                return
            expiry = expire_sink_log(ledger, table, JobPaths.of(platform, spec).sink, policy, now)
    except JobBusyError as busy:
        log.info("sink log expiry deferred", job=spec.name, reason=str(busy))
        return
    if expiry is not None:
        log.info("sink log expired", summary=expiry.line())


def _parse_now(text: str) -> datetime:
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ops.warehouse.compaction", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--job", required=True, help="job name (conf/jobs/<name>.yaml)")
    parser.add_argument(
        "--partition",
        action="append",
        help="a partition to compact, e.g. route=a/event_date=2026-11-24/event_hour=10",
    )
    parser.add_argument(
        "--source",
        choices=("compaction", "restatement"),
        default="compaction",
        help="what the versions record as their origin (a restatement republishes what it changed)",
    )
    parser.add_argument(
        "--now", type=_parse_now, help="judge partitions closed at this ISO time (default: now)"
    )
    parser.add_argument(
        "--recovery-wait",
        type=float,
        default=RECOVERY_WAIT_SECONDS,
        metavar="SECONDS",
        help="how long to wait for an open rewind, restate or upgrade of the job before skipping it "
        f"(default {RECOVERY_WAIT_SECONDS:g})",
    )
    args = parser.parse_args(argv)
    configure_logging(job=args.job, mode="compaction")
    try:
        platform = load_platform()
    except ConfigError as exc:
        log.error("cannot compact", error=str(exc))
        return EXIT_CONFIG_ERROR
    started = time.monotonic()
    try:
        spec = find_job(args.job, platform.conf_dir)
        outcomes = run_compaction(
            platform,
            spec,
            args.now or utcnow(),
            args.partition,
            source=args.source,
            recovery_wait=args.recovery_wait,
        )
    except RecoveryOpenError as skipped:
        log.warning("compaction skipped", reason=str(skipped))
        return EXIT_STOPPED
    except (ConfigError, WarehouseError, ValueError) as exc:
        log.error("cannot compact", error=str(exc))
        push_task_outcome(platform.monitoring, BatchTask.COMPACTION, args.job, succeeded=False)
        return EXIT_CONFIG_ERROR
    except JobBusyError as exc:
        log.error("job busy", error=str(exc))
        return EXIT_JOB_BUSY
    except Exception:
        push_task_outcome(platform.monitoring, BatchTask.COMPACTION, args.job, succeeded=False)
        raise
    for outcome in outcomes:
        log.info(
            "partition compacted",
            summary=outcome.line(),
            audit=json.dumps(outcome.audit.to_dict(), default=str),
        )
    log.info(
        "compaction done",
        published=sum(outcome.status == "published" for outcome in outcomes),
        blocked=sum(outcome.status == "blocked" for outcome in outcomes),
    )
    push_task_outcome(
        platform.monitoring,
        BatchTask.COMPACTION,
        args.job,
        succeeded=True,
        duration_seconds=time.monotonic() - started,
    )
    return EXIT_STOPPED


if __name__ == "__main__":
    raise SystemExit(main())
