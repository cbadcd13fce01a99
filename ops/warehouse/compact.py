"""Write-audit-publish of a job's closed sink partitions into its warehouse table.

For each partition of the sink that is closed (its event hour, or day, ended more than
`operations.compaction.closed_after_hours` ago) and whose committed input differs from what its
published version was made from (never published, restated, late files), one pass:

1. stage a new version in the ledger (`ops.warehouse.table.stage`),
2. write: the partition's committed files, as target-size Parquet, into the version's directory
   (for a partition whose raw files expired, the files that landed late and the rows of its
   published version, which holds the only copy of the expired ones),
3. audit: Great Expectations, the built-in checks and the job's `operations.quality` suite,
4. publish (one metastore call) unless a blocking check failed; then the version is recorded
   as blocked, nothing is published, and Slack is paged with the check, its observed value and a
   sample. Failed `warn` checks publish and warn.

The table lock is held for the whole run, with no rewind, restate or upgrade of the job open
(`ops.warehouse.writers`), so a compaction never reads a sink a recovery is rewriting. A version's
input fingerprint is the one of the listing its files were read from.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import pyspark.sql.functions as F
from pyspark.sql import DataFrame, SparkSession

from ops.alerts import Alert, AlertCenter
from ops.exceptions import WarehouseError
from ops.ledger.records import PartitionVersionRecord
from ops.ledger.store import Ledger
from ops.spec.job import CompactionPolicy, JobSpec
from ops.warehouse.audit import AuditResult, audit
from ops.warehouse.rewrite import Rewrite, read_partition, read_staged, rewrite_partition
from ops.warehouse.sinklog import SinkPartition, is_expired, partition_end, sink_partitions
from ops.warehouse.table import (
    BLOCKED,
    PUBLISHED,
    WarehouseTable,
    block,
    current_version,
    ensure_table,
    publish,
    stage,
)

BYTES_PER_MB = 1 << 20
BLOCKED_ALERT_KIND = "quality_blocked"
WARNED_ALERT_KIND = "quality_warned"
REPUBLISHED_KIND = "warehouse_republished"


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


@dataclass(frozen=True)
class AuditedVersion:
    """A staged version of one partition, written and audited, not yet published or blocked."""

    partition: SinkPartition
    staged: PartitionVersionRecord
    rewrite: Rewrite
    audit: AuditResult
    # time.monotonic() when the pass began, when the write ended and when the audit ended.
    started: float
    written: float
    audited: float


def write_and_audit(
    spark: SparkSession,
    spec: JobSpec,
    ledger: Ledger,
    table: WarehouseTable,
    sink: Path,
    partition: SinkPartition,
    *,
    source: str = "compaction",
    supersedes: str | None = None,
) -> AuditedVersion:
    """Steps 1-3 of the module docstring for one partition: stage a version, write the committed
    files into it, audit it. `settle` then publishes or blocks it (a backfill gates every
    partition before it publishes any).

    The version records `supersedes` as its input fingerprint when given (a backfill: the job's
    live sink partition it replaces), so `needs_compaction` republishes the partition from the
    live sink only once that changes; by default, `partition`'s own."""
    policy = spec.operations.compaction or CompactionPolicy()
    started = time.monotonic()
    staged = stage(
        spark,
        ledger,
        table,
        partition.values,
        source=source,
        input_files=len(partition.files),
        input_fingerprint=supersedes or partition.fingerprint,
    )
    rewrite = rewrite_partition(
        spark,
        sink,
        partition.values,
        Path(staged.location),
        int(policy.target_file_mb * BYTES_PER_MB),
        published=_rows_kept_in_warehouse(ledger, table, sink, partition),
    )
    # The input's rows are known once the write (which counts them as it reads) is done.
    ledger.update_partition_version(staged.id, input_rows=rewrite.input_rows)
    written = time.monotonic()
    result = audit(
        with_partition_values(read_staged(spark, rewrite), table, partition.values),
        spec.operations.quality,
        expected_rows=rewrite.input_rows,
        partition_values=partition.values,
    )
    return AuditedVersion(partition, staged, rewrite, result, started, written, time.monotonic())


def _rows_kept_in_warehouse(
    ledger: Ledger, table: WarehouseTable, sink: Path, partition: SinkPartition
) -> Path | None:
    """Where the published rows of a partition whose raw files expired are (the only copy left):
    files landing there late add to them; None for a partition whose raw files are all there."""
    if not is_expired(sink, partition.key):
        return None
    published = current_version(ledger, table, partition.key)
    if published is None:
        raise WarehouseError(
            f"{table.name} {partition.key}: its raw files expired but no version of it is published"
        )
    return Path(published.location)


def settle(
    spark: SparkSession,
    ledger: Ledger,
    alerts: AlertCenter,
    spec: JobSpec,
    table: WarehouseTable,
    version: AuditedVersion,
) -> PartitionOutcome:
    """Step 4: publish an audited version, or block it and page when a blocking check failed."""
    partition, rewrite, result = version.partition, version.rewrite, version.audit
    if not result.passed:
        blocked = block(
            ledger,
            version.staged,
            audit=result.to_dict(),
            output_files=rewrite.output_files,
            output_rows=rewrite.rows,
        )
        alerts.raise_alert(_quality_alert(spec, table, partition.key, blocked.version, result, blocking=True))
        seconds = _steps(version.started, version.written, version.audited)
        return _outcome(partition, blocked.version, BLOCKED, rewrite, None, result, seconds)
    published = publish(
        spark,
        ledger,
        table,
        version.staged,
        output_files=rewrite.output_files,
        output_rows=rewrite.rows,
        audit=result.to_dict(),
    )
    seconds = _steps(version.started, version.written, version.audited)
    if result.warnings:
        alerts.notify(_quality_alert(spec, table, partition.key, published.version, result, blocking=False))
    return _outcome(partition, published.version, PUBLISHED, rewrite, published.rows_before, result, seconds)


def compact_partition(
    spark: SparkSession,
    ledger: Ledger,
    alerts: AlertCenter,
    spec: JobSpec,
    table: WarehouseTable,
    sink: Path,
    partition: SinkPartition,
    source: str = "compaction",
) -> PartitionOutcome:
    """Write, audit and publish (or block) one partition; see the module docstring."""
    return settle(
        spark,
        ledger,
        alerts,
        spec,
        table,
        write_and_audit(spark, spec, ledger, table, sink, partition, source=source),
    )


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
    source: str = "compaction",
) -> list[PartitionOutcome]:
    """Compact the sink's closed partitions that changed since they were published (or just
    the partitions `only` names, closed or not, when given); `source` is what the versions
    record as their origin ("restatement" for a restatement's republish). The caller holds the
    table lock (`ops.warehouse.writers.table_writer`)."""
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
        compact_partition(spark, ledger, alerts, spec, table, sink, partition, source) for partition in chosen
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
