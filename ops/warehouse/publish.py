"""`python -m ops.warehouse.publish --run-dir DIR`: a finished backfill into the warehouse table.

A backfill (`jobs.backfill`, `ops.backfill`) ends with its output in the run's staging sink, a
file sink with its own log. This application takes it through the compaction's write-audit-publish
(`ops.warehouse.compact`: the same rewrite, the same Great Expectations suite and severities,
the same versions in the ledger), with one difference: the backfill is one change of the table, so
every target partition is written and audited first, and only if no blocking check failed in any
of them are they all published, one after the other with nothing else in between. A failed gate
blocks them all, publishes nothing and pages once, naming each failing partition's check and its
observed value.

The target partitions are the staging sink's partitions with an event time; dead letters of lines
without one never close, and stay out of the table as they do for the compaction. Partitions of
the table the backfill did not write are not touched. A rerun publishes new versions with the
same rows.

A candidate's run (`--spec`) publishes nothing: its target partitions are compared with what the
table shows for them (rows added, removed, changed), written to the run's `diff.json`.

The outcome goes to the run's `published.json` (`ops.driver.backfill`), and with
`monitoring.pushgateway_url` set its success or failure to the Pushgateway (`ops.pushgateway`,
task `backfill`, as the backfill application pushes its own). Exit codes: 0 done (a
blocked publish included: it is recorded and paged), 2 config error, 4 the table lock is held or a
recovery of the job stayed open.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Mapping, Sequence
from functools import reduce
from operator import and_
from pathlib import Path
from typing import Any

import structlog
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from ops.alerts import Alert, AlertCenter
from ops.atomic import write_atomically
from ops.driver.backfill import BackfillRun
from ops.driver.event_windows import ANY_WINDOW, Coverage
from ops.driver.session import EXIT_CONFIG_ERROR, EXIT_STOPPED, configure_logging
from ops.exceptions import BackfillError, ConfigError, JobBusyError, RecoveryOpenError, WarehouseError
from ops.ledger.store import Ledger
from ops.pushgateway import BatchTask, push_task_outcome
from ops.spec.job import JobSpec, find_job, load_job
from ops.spec.paths import JobPaths
from ops.spec.platform import PlatformConfig, load_platform
from ops.warehouse.compact import BLOCKED_ALERT_KIND, AuditedVersion, settle, write_and_audit
from ops.warehouse.compaction import (
    EXIT_JOB_BUSY,
    LOCK_TIMEOUT_SECONDS,
    RECOVERY_WAIT_SECONDS,
    warehouse_session,
    warehouse_table,
)
from ops.warehouse.rewrite import read_partition
from ops.warehouse.sinklog import SinkPartition, partition_end, sink_partitions
from ops.warehouse.table import BLOCKED, PUBLISHED, WarehouseTable, block, ensure_table
from ops.warehouse.writers import table_writer

log = structlog.get_logger("streamwarden.backfill")


def target_partitions(
    sink: Path, table: WarehouseTable, coverage: Coverage | None
) -> tuple[list[SinkPartition], list[str], list[str]]:
    """The staged sink's partitions the backfill replaces in the table; those it leaves out (no
    event time: they never close); and those it withholds, since the run recomputed their event
    window only in part (`ops.backfill.coverage`: other arrival hours feed it too)."""
    partitions = sink_partitions(sink, table)
    timed = [partition for partition in partitions if partition_end(partition.values) is not None]
    left_out = [partition.key for partition in partitions if partition not in timed]
    if coverage is None:
        return timed, left_out, []
    whole = [p for p in timed if coverage.is_whole(coverage.window_of(p.values) or ANY_WINDOW)]
    return whole, left_out, [partition.key for partition in timed if partition not in whole]


def publish_staged(
    spark: SparkSession,
    ledger: Ledger,
    alerts: AlertCenter,
    spec: JobSpec,
    table: WarehouseTable,
    run_id: str,
    targets: Sequence[SinkPartition],
    sink: Path,
    live: Mapping[str, SinkPartition],
) -> dict[str, Any]:
    """Write and audit every target partition, then publish them all, or block them all and page.

    `live` are the job's live sink partitions by key: a version records the fingerprint of the
    one it replaces, so the nightly compaction publishes the live sink's rows over the backfill's
    only once that partition's committed input changes.
    """
    if not targets:
        return {"status": PUBLISHED, "partitions": []}
    ensure_table(spark, table, read_partition(spark, sink, list(targets[0].files)).schema)
    audited = [
        write_and_audit(
            spark,
            spec,
            ledger,
            table,
            sink,
            partition,
            source="backfill",
            supersedes=live[partition.key].fingerprint if partition.key in live else None,
        )
        for partition in targets
    ]
    failed = [version for version in audited if not version.audit.passed]
    if not failed:
        outcomes = [settle(spark, ledger, alerts, spec, table, version) for version in audited]
        return {
            "status": PUBLISHED,
            "partitions": [
                {
                    "partition": outcome.key,
                    "version": outcome.version,
                    "status": outcome.status,
                    "rows": outcome.output_rows,
                    "rows_before": outcome.rows_before,
                }
                for outcome in outcomes
            ],
        }
    for version in audited:
        block(
            ledger,
            version.staged,
            audit=version.audit.to_dict(),
            output_files=version.rewrite.output_files,
            output_rows=version.rewrite.rows,
        )
    reasons = _blocked_reasons(failed)
    alerts.raise_alert(
        Alert(
            job=spec.name,
            kind=BLOCKED_ALERT_KIND,
            severity="critical",
            state=f"{table.name}: backfill {run_id} not published ({len(targets)} partitions)",
            reason="; ".join(reasons),
            last_batch=None,
            run_url=None,
            runbook=spec.operations.alerts.runbook,
            channel=spec.operations.alerts.channel,
        )
    )
    return {
        "status": BLOCKED,
        "partitions": [
            {
                "partition": version.partition.key,
                "version": version.staged.version,
                "status": BLOCKED,
                "rows": version.rewrite.rows,
                "rows_before": None,
            }
            for version in audited
        ],
        "blocked": reasons,
    }


def _blocked_reasons(failed: Sequence[AuditedVersion]) -> list[str]:
    """`<partition> v<N>: <check> [block]: observed ...`, for each failed blocking check."""
    return [
        f"{version.partition.key} v{version.staged.version}: {check.line()}"
        for version in failed
        for check in version.audit.blocking
    ]


def _partition_label(row: Row, columns: Sequence[str]) -> str:
    return "/".join(f"{column}={row[column]}" for column in columns)


def diff_output(
    side: DataFrame, published: DataFrame, partition_columns: Sequence[str]
) -> list[dict[str, Any]]:
    """A candidate's rows against the published rows, per partition the candidate wrote: rows
    added, removed, and changed (a row of the same identity with other values).

    Only the partitions the candidate wrote are compared; published partitions outside them are
    not its business. A row's identity is its partition and its columns named `*_id`, plus
    `session_start` and `raw` where present; columns only one side has are left out.
    """
    common = [column for column in side.columns if column in published.columns]
    targets = side.select(*partition_columns).distinct()
    same_partition = reduce(and_, (published[c].eqNullSafe(targets[c]) for c in partition_columns))
    # exceptAll matches columns by position, hence the selects.
    reference = published.join(targets, same_partition, "left_semi").select(common)
    side = side.select(common)
    identity = [c for c in common if c.endswith("_id") or c in ("session_start", "raw")]
    key = F.concat_ws(
        "\x1f", *(F.coalesce(F.col(c).cast("string"), F.lit("\x00")) for c in [*partition_columns, *identity])
    )
    added = side.exceptAll(reference).withColumn("_key", key)
    removed = reference.exceptAll(side).withColumn("_key", key)
    changed_keys = added.select("_key").intersect(removed.select("_key")).withColumn("_changed", F.lit(True))

    def counts(rows: DataFrame) -> dict[str, tuple[int, int]]:
        marked = rows.join(changed_keys, "_key", "left").withColumn(
            "_changed", F.coalesce("_changed", F.lit(False))
        )
        grouped = marked.groupBy(*partition_columns).agg(
            F.sum(F.when(F.col("_changed"), 0).otherwise(1)).alias("plain"),
            F.sum(F.when(F.col("_changed"), 1).otherwise(0)).alias("changed"),
        )
        return {
            _partition_label(row, partition_columns): (row["plain"], row["changed"])
            for row in grouped.collect()
        }

    added_counts, removed_counts = counts(added), counts(removed)
    labels = sorted(_partition_label(row, partition_columns) for row in targets.collect())
    return [
        {
            "partition": label,
            "added": added_counts.get(label, (0, 0))[0],
            "removed": removed_counts.get(label, (0, 0))[0],
            "changed": added_counts.get(label, (0, 0))[1],
        }
        for label in labels
    ]


def published_rows(spark: SparkSession, table: WarehouseTable, like: DataFrame) -> DataFrame:
    """What the table shows (no rows with `like`'s schema while nothing was ever published)."""
    if spark.catalog.tableExists(table.name):
        return spark.table(table.name)
    return spark.createDataFrame([], like.schema)


def finish_run(platform: PlatformConfig, run: BackfillRun) -> dict[str, Any]:
    """Publish a finished run's staged output (or diff a candidate's) under the table lock; the
    document written to the run's `published.json` (or `diff.json`)."""
    plan = run.read_plan()
    if not run.is_complete():
        raise BackfillError(
            f"backfill {plan.run_id} has not finished ({len(run.partitions_done())} of "
            f"{len(plan.partitions)} partitions done): nothing to publish"
        )
    spec = load_job(run.spec_file(plan.job))
    installed = find_job(plan.job, platform.conf_dir)
    table = warehouse_table(platform, installed)
    sink = JobPaths.of(run.platform(platform), spec).sink
    targets, left_out, withheld = target_partitions(sink, table, plan.coverage)
    ledger = Ledger.open(platform.resolved_ledger_url)
    with table_writer(
        platform,
        ledger,
        plan.job,
        "backfill publish",
        recovery_wait=RECOVERY_WAIT_SECONDS,
        lock_timeout=LOCK_TIMEOUT_SECONDS,
    ):
        spark = warehouse_session(platform, spec)
        try:
            if plan.candidate:
                diff = []
                if targets:
                    side = read_partition(spark, sink, [path for p in targets for path in p.files])
                    diff = diff_output(side, published_rows(spark, table, side), table.partition_columns)
                write_atomically(run.diff_file, json.dumps(diff, indent=1))
                return {"table": table.name, "diff": diff, "left_out": left_out, "withheld": withheld}
            live_sink = JobPaths.of(platform, installed).sink
            live = {partition.key: partition for partition in sink_partitions(live_sink, table)}
            alerts = AlertCenter(ledger, platform.slack)
            outcome = publish_staged(spark, ledger, alerts, spec, table, plan.run_id, targets, sink, live)
        finally:
            spark.stop()
    document = {"table": table.name, **outcome, "left_out": left_out, "withheld": withheld}
    write_atomically(run.published_file, json.dumps(document, indent=1))
    return document


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ops.warehouse.publish", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--run-dir", required=True, type=Path, help="the finished backfill's run directory")
    args = parser.parse_args(argv)
    run = BackfillRun(args.run_dir.resolve())
    configure_logging(mode="backfill")
    try:
        platform = load_platform()
        job = run.read_plan().job
    except (ConfigError, OSError, ValueError) as exc:
        log.error("cannot publish the backfill", error=str(exc))
        return EXIT_CONFIG_ERROR
    started = time.monotonic()
    try:
        document = finish_run(platform, run)
    except (ConfigError, WarehouseError, BackfillError, ValueError) as exc:
        log.error("cannot publish the backfill", error=str(exc))
        push_task_outcome(platform.monitoring, BatchTask.BACKFILL, job, succeeded=False)
        return EXIT_CONFIG_ERROR
    except (JobBusyError, RecoveryOpenError) as exc:
        log.error("table busy", error=str(exc))
        return EXIT_JOB_BUSY
    except Exception:
        push_task_outcome(platform.monitoring, BatchTask.BACKFILL, job, succeeded=False)
        raise
    for entry in document.get("partitions", document.get("diff", [])):
        log.info("partition", **entry)
    log.info("backfill finished", table=document["table"], status=document.get("status", "diffed"))
    push_task_outcome(
        platform.monitoring,
        BatchTask.BACKFILL,
        job,
        succeeded=True,
        duration_seconds=time.monotonic() - started,
    )
    return EXIT_STOPPED


if __name__ == "__main__":
    raise SystemExit(main())
