"""A job's warehouse table and its versioned partitions: stage, publish, history, rollback, expiry.

`warehouse.<job>` is an external Parquet table in the shared Hive metastore (`ops.warehouse.
metastore`), partitioned like the job's sink. Every version of a partition is its own directory,

    <warehouse.root>/<job>/<col>=<value>/.../v<NNNNN>/

and the catalog partition points at exactly one of them. Publishing is one metastore call
(`ALTER TABLE ... PARTITION (...) SET LOCATION`, or `ADD PARTITION ... LOCATION` the first time),
so a reader plans against the old files or the new ones, never a mix; the old directory stays
until the retention period ends, so a query planned before the swap still finds its files and
`rollback` can point the partition back.

The publish API, shared by compaction and backfill (write-audit-publish):

    staged = stage(spark, ledger, table, partition, source="backfill", input_rows=...)
    ... write the partition's Parquet files (no partition columns) into staged.location ...
    ... audit them (ops.warehouse.audit) ...
    publish(spark, ledger, table, staged, output_files=..., output_rows=..., audit=result.to_dict())
    # or, when a blocking expectation failed:
    block(ledger, staged, audit=result.to_dict())

Every step is recorded in the ledger (`partition_versions`) before the next one, so a process
killed at any point leaves nothing half-published: the next `stage` of the partition finds the
versions its predecessor left "staged", keeps one the catalog already points at (killed between
the metastore call and the ledger update) as published, and deletes the others' files.

Spark sessions are passed in (configured with `metastore_conf`); pyspark is never imported here.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ops.clock import utcnow
from ops.exceptions import WarehouseError
from ops.ledger.records import PartitionVersionRecord
from ops.ledger.store import Ledger
from ops.spec.platform import PlatformConfig

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

STAGED, PUBLISHED, BLOCKED, ABANDONED = "staged", "published", "blocked", "abandoned"
SOURCES = ("compaction", "restatement", "backfill", "rollback")
VERSION_DIR_PREFIX = "v"


@dataclass(frozen=True)
class WarehouseTable:
    """Where one job's table lives: its catalog name, partition columns and versions' root."""

    job: str
    database: str
    partition_columns: tuple[str, ...]
    root: Path

    @classmethod
    def of(cls, platform: PlatformConfig, job: str, partition_columns: tuple[str, ...]) -> WarehouseTable:
        """The table of `job`, partitioned like its sink (`spec.pipeline.partition_columns`)."""
        if not partition_columns:
            raise WarehouseError(f"the warehouse table of {job!r} needs its sink's partition columns")
        return cls(job, platform.warehouse.database, partition_columns, platform.warehouse_root / job)

    @property
    def name(self) -> str:
        return f"{self.database}.{self.job}"

    def partition_key(self, partition: Mapping[str, object]) -> str:
        """The partition as a path, `route=a/event_date=2026-11-24/event_hour=10`: its id in the ledger.

        Raises WarehouseError unless `partition` names exactly the table's partition columns.
        """
        if tuple(partition) != self.partition_columns:
            raise WarehouseError(
                f"partition {dict(partition)} of {self.name} must name its partition columns "
                f"{list(self.partition_columns)}, in that order"
            )
        return "/".join(f"{column}={value}" for column, value in partition.items())

    def parse_partition(self, key: str) -> dict[str, str]:
        """The partition a key (`route=a/event_hour=10`) names; WarehouseError for a malformed one."""
        pairs = [part.partition("=") for part in key.strip("/").split("/")]
        partition = {column: value for column, _, value in pairs}
        if any(not sep for _, sep, _ in pairs) or tuple(partition) != self.partition_columns:
            raise WarehouseError(
                f"{key!r} is not a partition of {self.name}: write it as "
                + "/".join(f"{column}=VALUE" for column in self.partition_columns)
            )
        return partition

    def version_location(self, partition_key: str, version: int) -> Path:
        return self.root / partition_key / f"{VERSION_DIR_PREFIX}{version:05d}"

    def partition_clause(self, partition: Mapping[str, object]) -> str:
        """`PARTITION (route='a', event_hour='10')`: Hive casts each quoted value to its column's type."""
        values = ", ".join(f"`{column}`={_sql_string(value)}" for column, value in partition.items())
        return f"PARTITION ({values})"


def _sql_string(value: object) -> str:
    text = str(value).replace("\\", "\\\\").replace("'", "\\'")
    return f"'{text}'"


def ensure_table(spark: SparkSession, table: WarehouseTable, schema: StructType) -> None:
    """Create the database and the table (if missing) from the sink's schema, partition columns
    included; their types come from `schema`."""
    fields = {field.name: field for field in schema.fields}
    missing = [column for column in table.partition_columns if column not in fields]
    if missing:
        raise WarehouseError(f"the rows of {table.name} lack its partition columns {missing}")

    def ddl(name: str) -> str:
        return f"`{name}` {fields[name].dataType.simpleString()}"

    data = [ddl(name) for name in fields if name not in table.partition_columns]
    partitions = [ddl(name) for name in table.partition_columns]
    spark.sql(f"CREATE DATABASE IF NOT EXISTS `{table.database}`")
    spark.sql(
        f"CREATE EXTERNAL TABLE IF NOT EXISTS {table.name} ({', '.join(data)}) "
        f"PARTITIONED BY ({', '.join(partitions)}) STORED AS PARQUET LOCATION '{table.root}'"
    )


def catalog_location(
    spark: SparkSession, table: WarehouseTable, partition: Mapping[str, object]
) -> str | None:
    """Where the catalog partition points now (a `file:` URI), or None when it is not in the table."""
    if not spark.catalog.tableExists(table.name):
        return None
    if not _has_partition(spark, table, partition):
        return None
    rows = spark.sql(f"DESCRIBE FORMATTED {table.name} {table.partition_clause(partition)}").collect()
    return next((str(row["data_type"]) for row in rows if row["col_name"] == "Location"), None)


def _has_partition(spark: SparkSession, table: WarehouseTable, partition: Mapping[str, object]) -> bool:
    """Whether the catalog has the partition: the metastore looks up that one partition (listing
    them all grows with the table)."""
    shown = spark.sql(f"SHOW PARTITIONS {table.name} {table.partition_clause(partition)}").collect()
    return any(row["partition"] == table.partition_key(partition) for row in shown)


def _same_location(catalog: str | None, location: str) -> bool:
    return catalog is not None and catalog.removeprefix("file:").rstrip("/") == location.rstrip("/")


def current_version(
    ledger: Ledger, table: WarehouseTable, partition_key: str
) -> PartitionVersionRecord | None:
    """The version the catalog partition points at: the newest published one (None: never published)."""
    return next(
        (
            record
            for record in ledger.partition_versions(table.job, partition_key)
            if record.status == PUBLISHED
        ),
        None,
    )


def stage(
    spark: SparkSession,
    ledger: Ledger,
    table: WarehouseTable,
    partition: Mapping[str, object],
    *,
    source: str,
    input_files: int | None = None,
    input_rows: int | None = None,
    input_fingerprint: str | None = None,
) -> PartitionVersionRecord:
    """Record a new version of `partition` as staged and return it; write its files into
    `record.location` (it does not exist yet), then `publish` or `block` it.

    First settles what a killed predecessor left (see the module docstring). The caller holds
    the job lock, so no other writer of the job's table runs meanwhile.
    """
    if source not in SOURCES:
        raise WarehouseError(f"unknown version source {source!r}; one of {list(SOURCES)}")
    key = table.partition_key(partition)
    _settle_staged(spark, ledger, table, partition, key)
    record = ledger.add_partition_version(
        table.job,
        key,
        location="",
        source=source,
        input_files=input_files,
        input_rows=input_rows,
        input_fingerprint=input_fingerprint,
    )
    location = table.version_location(key, record.version)
    # A directory left by a version number the ledger never committed (a crash inside the insert).
    shutil.rmtree(location, ignore_errors=True)
    ledger.update_partition_version(record.id, location=str(location))
    return _reload(ledger, record)


def _reload(ledger: Ledger, record: PartitionVersionRecord) -> PartitionVersionRecord:
    return next(r for r in ledger.partition_versions(record.job, record.partition) if r.id == record.id)


def _settle_staged(
    spark: SparkSession, ledger: Ledger, table: WarehouseTable, partition: Mapping[str, object], key: str
) -> None:
    """Versions a killed process left "staged": published if the catalog points at one, else
    abandoned and their files deleted."""
    leftovers = [record for record in ledger.partition_versions(table.job, key) if record.status == STAGED]
    if not leftovers:
        return
    catalog = catalog_location(spark, table, partition)
    for record in leftovers:
        if record.location and _same_location(catalog, record.location):
            ledger.update_partition_version(record.id, status=PUBLISHED, published_at=utcnow())
            continue
        if record.location:
            shutil.rmtree(record.location, ignore_errors=True)
        ledger.update_partition_version(record.id, status=ABANDONED)


def publish(
    spark: SparkSession,
    ledger: Ledger,
    table: WarehouseTable,
    staged: PartitionVersionRecord,
    *,
    output_files: int,
    output_rows: int,
    audit: Mapping[str, Any] | None,
) -> PartitionVersionRecord:
    """Point the catalog partition at `staged.location` in one metastore call and record it.

    `audit` (an `AuditResult.to_dict()`) is stored with the version; the caller publishes only
    versions without a failed blocking check. Returns the published record, with `rows_before`
    the rows of the version it replaced (None for a partition's first version).
    """
    if staged.status != STAGED:
        raise WarehouseError(
            f"version {staged.version} of {table.name} {staged.partition} is {staged.status}, not staged"
        )
    previous = current_version(ledger, table, staged.partition)
    ledger.update_partition_version(
        staged.id,
        output_files=output_files,
        output_rows=output_rows,
        audit=dict(audit) if audit is not None else None,
        rows_before=None if previous is None else previous.output_rows,
    )
    _point(spark, table, table.parse_partition(staged.partition), staged.location)
    ledger.update_partition_version(staged.id, status=PUBLISHED, published_at=utcnow())
    return _reload(ledger, staged)


def _point(
    spark: SparkSession, table: WarehouseTable, partition: Mapping[str, object], location: str
) -> None:
    """The one metastore call of a publish: add the partition at `location`, or move it there."""
    clause = table.partition_clause(partition)
    if _has_partition(spark, table, partition):
        spark.sql(f"ALTER TABLE {table.name} {clause} SET LOCATION '{location}'")
    else:
        spark.sql(f"ALTER TABLE {table.name} ADD {clause} LOCATION '{location}'")


def block(
    ledger: Ledger,
    staged: PartitionVersionRecord,
    *,
    audit: Mapping[str, Any],
    output_files: int,
    output_rows: int,
) -> PartitionVersionRecord:
    """Record that `staged` failed its audit: never published. Its files stay until retention
    ends, for whoever investigates."""
    ledger.update_partition_version(
        staged.id, status=BLOCKED, audit=dict(audit), output_files=output_files, output_rows=output_rows
    )
    return _reload(ledger, staged)


def rollback(
    spark: SparkSession, ledger: Ledger, table: WarehouseTable, partition_key: str, version: int
) -> PartitionVersionRecord:
    """Point the partition back at an earlier published `version`, recorded as a new version
    (source "rollback") so the history keeps what was current when."""
    records = ledger.partition_versions(table.job, partition_key)
    target = next((record for record in records if record.version == version), None)
    if target is None or target.status != PUBLISHED:
        published = sorted(record.version for record in records if record.status == PUBLISHED)
        raise WarehouseError(
            f"{table.name} {partition_key} has no published version {version} to roll back to "
            f"(published: {published or 'none'})"
        )
    if target.expired_at is not None or not Path(target.location).is_dir():
        raise WarehouseError(
            f"version {version} of {table.name} {partition_key} is past retention: its files are deleted"
        )
    current = current_version(ledger, table, partition_key)
    if current is not None and current.location == target.location:
        raise WarehouseError(f"{table.name} {partition_key} already shows version {version}'s files")
    record = ledger.add_partition_version(
        table.job,
        partition_key,
        location=target.location,
        source="rollback",
        input_files=target.input_files,
        input_rows=target.input_rows,
        input_fingerprint=target.input_fingerprint,
    )
    return publish(
        spark,
        ledger,
        table,
        record,
        output_files=target.output_files or 0,
        output_rows=target.output_rows or 0,
        audit=target.audit,
    )


def expire_versions(
    ledger: Ledger, table: WarehouseTable, retention: timedelta, now: datetime | None = None
) -> list[PartitionVersionRecord]:
    """Delete the files of versions no partition shows that were replaced (or blocked, or
    abandoned) more than `retention` ago; returns them. A location the current version of its
    partition shares (after a rollback) is kept."""
    now = now or utcnow()
    expired = []
    records = ledger.partition_versions(table.job)
    current_locations = {
        current.location
        for key in {record.partition for record in records}
        if (current := current_version(ledger, table, key)) is not None
    }
    replaced_at = _replacement_times(records)
    for record in records:
        if record.expired_at is not None or record.status == STAGED or record.location in current_locations:
            continue
        since = replaced_at.get(record.id, record.created_at)
        if now - since < retention:
            continue
        if record.location:
            shutil.rmtree(record.location, ignore_errors=True)
        ledger.update_partition_version(record.id, expired_at=now)
        expired.append(record)
    return expired


def _replacement_times(records: list[PartitionVersionRecord]) -> dict[int, datetime]:
    """For each published version, when the next version of its partition was published."""
    times: dict[int, datetime] = {}
    by_partition: dict[str, list[PartitionVersionRecord]] = {}
    for record in records:
        if record.status == PUBLISHED and record.published_at is not None:
            by_partition.setdefault(record.partition, []).append(record)
    for versions in by_partition.values():
        versions.sort(key=lambda record: record.version)
        for older, newer in zip(versions, versions[1:], strict=False):
            assert newer.published_at is not None
            times[older.id] = newer.published_at
    return times
