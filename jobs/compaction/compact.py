"""Write-audit-publish of a job's closed sink partitions into its warehouse table.

For each partition of the sink that is closed (its event hour, or day, ended more than
`operations.compaction.closed_after_hours` ago) and whose committed input differs from what its
published version was made from (never published, restated, late files), one pass:

1. stage a new version in the ledger (`ops.warehouse.table.stage`),
2. write: the partition's committed files, as target-size Parquet, into the version's directory,
3. audit: Great Expectations, the built-in checks and the job's `operations.quality` suite,
4. publish (one metastore call) unless a blocking check failed; then the version is recorded
   as blocked, nothing is published, and Slack is paged with the check, its observed value and a
   sample. Failed `warn` checks publish and warn.

The job lock is held for the whole run, so compaction, restatement and rewind of one job never
overlap.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from pathlib import Path

import pyspark.sql.functions as F
from pyspark.sql import DataFrame, SparkSession

from jobs.compaction.audit import AuditResult, audit
from jobs.compaction.rewrite import SINK_LOG, Rewrite, read_partition, rewrite_partition
from ops.control.alerts import Alert, AlertCenter
from ops.driver.checkpoint import sink_files
from ops.ledger.store import Ledger
from ops.spec.job import CompactionPolicy, JobSpec
from ops.warehouse.table import (
    BLOCKED,
    PUBLISHED,
    WarehouseTable,
    block,
    ensure_table,
    publish,
    stage,
)

BYTES_PER_MB = 1 << 20
# The directory value Spark's file sink (like Hive) writes for a null partition value.
NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"
BLOCKED_ALERT_KIND = "quality_blocked"
WARNED_ALERT_KIND = "quality_warned"
REPUBLISHED_KIND = "warehouse_republished"


@dataclass(frozen=True)
class SinkPartition:
    """One partition of the sink as its log lists it: the committed files, and their fingerprint."""

    key: str
    values: dict[str, str]
    files: tuple[Path, ...]

    @property
    def fingerprint(self) -> str:
        """What the partition's committed input is: file names and sizes (a rewrite changes both)."""
        digest = hashlib.sha256()
        for path in self.files:
            digest.update(f"{path.name}:{path.stat().st_size}\n".encode())
        return digest.hexdigest()


@dataclass(frozen=True)
class PartitionOutcome:
    """What one partition's pass did: `status` is "published" or "blocked"."""

    key: str
    version: int
    status: str
    input_files: int
    input_rows: int
    output_files: int
    output_rows: int
    rows_before: int | None
    audit: AuditResult
    # Wall seconds of each step: "write" (stage, rewrite), "audit", "publish" (or block).
    seconds: dict[str, float]

    def line(self) -> str:
        before = "new" if self.rows_before is None else f"rows {self.rows_before} -> {self.output_rows}"
        return (
            f"{self.key} v{self.version} {self.status}: {self.input_files} files -> "
            f"{self.output_files}, {self.output_rows} rows ({before})"
        )


def sink_partitions(sink: Path, table: WarehouseTable) -> list[SinkPartition]:
    """The sink's partitions with the files its log lists as committed, sorted by key."""
    by_key: dict[str, list[Path]] = {}
    for path in sink_files(sink / SINK_LOG):
        by_key.setdefault(path.parent.relative_to(sink).as_posix(), []).append(path)
    return [
        SinkPartition(key, table.parse_partition(key), tuple(sorted(files)))
        for key, files in sorted(by_key.items())
    ]


def partition_end(values: Mapping[str, str]) -> datetime | None:
    """When a partition's event time ends: its hour's end, or its day's without `event_hour`;
    None for rows without an event time (dead letters of unparseable lines), which never close:
    they stay in the sink for whoever fixes their source."""
    if "event_date" not in values:
        raise ValueError(f"partition {dict(values)} has no event_date: it never closes")
    if NULL_PARTITION in (values["event_date"], values.get("event_hour")):
        return None
    start = datetime.combine(date.fromisoformat(values["event_date"]), datetime.min.time())
    if "event_hour" in values:
        return start + timedelta(hours=int(values["event_hour"]) + 1)
    return start + timedelta(days=1)


def is_closed(values: Mapping[str, str], policy: CompactionPolicy, now: datetime) -> bool:
    end = partition_end(values)
    return end is not None and end + timedelta(hours=policy.closed_after_hours) <= now.replace(tzinfo=None)


def needs_compaction(ledger: Ledger, table: WarehouseTable, partition: SinkPartition) -> bool:
    """True unless the newest published or blocked version was made from the same input (a
    blocked one would block again; it was paged already)."""
    settled = [
        record
        for record in ledger.partition_versions(table.job, partition.key)
        if record.status in (PUBLISHED, BLOCKED)
    ]
    return not settled or settled[0].input_fingerprint != partition.fingerprint


def compact_partition(
    spark: SparkSession,
    ledger: Ledger,
    alerts: AlertCenter,
    spec: JobSpec,
    table: WarehouseTable,
    sink: Path,
    partition: SinkPartition,
) -> PartitionOutcome:
    """Write, audit and publish (or block) one partition; see the module docstring."""
    policy = spec.operations.compaction or CompactionPolicy()
    started = time.monotonic()
    staged = stage(
        spark,
        ledger,
        table,
        partition.values,
        source="compaction",
        input_files=len(partition.files),
        input_fingerprint=partition.fingerprint,
    )
    rewrite = rewrite_partition(
        spark, sink, partition.values, Path(staged.location), int(policy.target_file_mb * BYTES_PER_MB)
    )
    # The input's rows are known once the write (which counts them as it reads) is done.
    ledger.update_partition_version(staged.id, input_rows=rewrite.input_rows)
    written = time.monotonic()
    result = audit(
        with_partition_values(spark.read.parquet(staged.location), table, partition.values),
        spec.operations.quality,
        expected_rows=rewrite.input_rows,
        partition_values=partition.values,
    )
    audited = time.monotonic()
    if not result.passed:
        blocked = block(
            ledger,
            staged,
            audit=result.to_dict(),
            output_files=rewrite.output_files,
            output_rows=rewrite.rows,
        )
        alerts.raise_alert(_quality_alert(spec, table, partition.key, blocked.version, result, blocking=True))
        seconds = _steps(started, written, audited)
        return _outcome(partition, blocked.version, BLOCKED, rewrite, None, result, seconds)
    published = publish(
        spark,
        ledger,
        table,
        staged,
        output_files=rewrite.output_files,
        output_rows=rewrite.rows,
        audit=result.to_dict(),
    )
    seconds = _steps(started, written, audited)
    if result.warnings:
        alerts.notify(_quality_alert(spec, table, partition.key, published.version, result, blocking=False))
    return _outcome(partition, published.version, PUBLISHED, rewrite, published.rows_before, result, seconds)


def _steps(started: float, written: float, audited: float) -> dict[str, float]:
    return {"write": written - started, "audit": audited - written, "publish": time.monotonic() - audited}


def _outcome(
    partition: SinkPartition,
    version: int,
    status: str,
    rewrite: Rewrite,
    rows_before: int | None,
    result: AuditResult,
    seconds: dict[str, float],
) -> PartitionOutcome:
    return PartitionOutcome(
        key=partition.key,
        version=version,
        status=status,
        input_files=rewrite.input_files,
        input_rows=rewrite.input_rows,
        output_files=rewrite.output_files,
        output_rows=rewrite.rows,
        rows_before=rows_before,
        audit=result,
        seconds=seconds,
    )


def with_partition_values(frame: DataFrame, table: WarehouseTable, values: Mapping[str, str]) -> DataFrame:
    """The staged rows with their partition columns, as a reader of the table sees them."""
    return frame.withColumns({column: F.lit(values[column]) for column in table.partition_columns})


def _quality_alert(
    spec: JobSpec, table: WarehouseTable, key: str, version: int, result: AuditResult, *, blocking: bool
) -> Alert:
    failed = result.blocking if blocking else result.warnings
    verdict = "not published" if blocking else "published with warnings"
    return Alert(
        job=spec.name,
        kind=BLOCKED_ALERT_KIND if blocking else WARNED_ALERT_KIND,
        severity="critical" if blocking else "warning",
        state=f"{table.name} {key} v{version} {verdict}",
        reason="; ".join(check.line() for check in failed),
        last_batch=None,
        run_url=None,
        runbook=spec.operations.alerts.runbook,
        channel=spec.operations.alerts.channel,
    )


def compact(
    spark: SparkSession,
    ledger: Ledger,
    alerts: AlertCenter,
    spec: JobSpec,
    table: WarehouseTable,
    sink: Path,
    now: datetime,
    only: Iterable[str] | None = None,
) -> list[PartitionOutcome]:
    """Compact the sink's closed partitions that changed since they were published (or just
    the partitions `only` names, closed or not, when given). The caller holds the job lock."""
    policy = spec.operations.compaction or CompactionPolicy()
    partitions = sink_partitions(sink, table)
    if only is not None:
        wanted = set(only)
        chosen = [partition for partition in partitions if partition.key in wanted]
        missing = wanted - {partition.key for partition in chosen}
        if missing:
            raise ValueError(
                f"the sink log of {sink} lists no committed file in partitions {sorted(missing)}"
            )
    else:
        chosen = [
            partition
            for partition in partitions
            if is_closed(partition.values, policy, now) and needs_compaction(ledger, table, partition)
        ]
    if not chosen:
        return []
    ensure_table(spark, table, read_partition(spark, sink, list(chosen[0].files)).schema)
    outcomes = [
        compact_partition(spark, ledger, alerts, spec, table, sink, partition) for partition in chosen
    ]
    republished = [o for o in outcomes if o.status == PUBLISHED and o.rows_before is not None]
    if republished:
        # A restatement or late data changed published partitions: say which, with their rows.
        alerts.notify(
            Alert(
                job=spec.name,
                kind=REPUBLISHED_KIND,
                severity="info",
                state=f"{len(republished)} partitions of {table.name} republished",
                reason="; ".join(outcome.line() for outcome in republished),
                last_batch=None,
                run_url=None,
                runbook=spec.operations.alerts.runbook,
                channel=spec.operations.alerts.channel,
            )
        )
    return outcomes
