"""Write-audit-publish end to end: a real router sink of many small batches, the compaction entry
point in its own Spark process, the table read with SQL by another, over a real Hive metastore
on PostgreSQL. A team's jobs, their code outside the repository (a stateless and a windowed python
job, a SQL join), are published into tables of their own the same way."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from ops.ledger.store import Ledger
from ops.pushgateway import LAST_DURATION, LAST_FAILURE, LAST_SUCCESS, BatchTask
from ops.spec.job import find_job
from ops.spec.platform import PlatformConfig
from ops.warehouse.rewrite import read_partition
from synthetic.scenarios import impressions_plays_scenario, router_scenario
from tests.monitoring.servers import pushed, pushgateway
from tests.support.drivers import edit_job
from tests.support.secrets import configure_platform
from tests.support.spark import run_available_now
from tests.support.team_jobs import (
    SQL_JOB,
    TEAM_JOB,
    WINDOWED_JOB,
    sql_job_spec,
    team_job_spec,
    windowed_job_spec,
    write_hourly_events,
    write_team_code,
    write_team_job,
    write_windowed_code,
)
from tests.support.warehouse import (
    append_to_sink_log,
    compact_job,
    one_file_per_batch,
    query_table,
    warehouse_process,
)

# Several Spark processes (driver, compactions, readers), each a cold start with the cores shared.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]
LATER = "2030-01-01T00:00:00"


def small_batches(spec: dict[str, Any]) -> None:
    one_file_per_batch(spec)
    spec["operations"]["quality"] = {"unique": ["event_id"]}


def add_late_rows(platform: PlatformConfig, key: str, count: int) -> None:
    """A late batch's file in partition `key`: `count` rows with new event ids."""
    sink = platform.lake_root / "router"
    first = sorted((sink / key).glob("*.parquet"))[0]
    rows = pq.read_table(first).slice(0, count)
    late_ids = pa.array([f"late-{n}" for n in range(count)])
    rows = rows.set_column(rows.schema.get_field_index("event_id"), "event_id", late_ids)
    late_file = sink / key / "part-88888-late.c000.snappy.parquet"
    pq.write_table(rows, late_file, coerce_timestamps="us", allow_truncated_timestamps=True)
    append_to_sink_log(sink, late_file)


def committed_rows(spark: SparkSession, platform: PlatformConfig) -> Counter[tuple[str, ...]]:
    """(event_id, route, event_date, event_hour) of every row the sink log lists as committed."""
    from ops.warehouse.compaction import warehouse_table
    from ops.warehouse.sinklog import NULL_PARTITION, sink_partitions

    spec = find_job("router", platform.conf_dir)
    sink = platform.lake_root / spec.pipeline.sink.path
    rows: Counter[tuple[str, ...]] = Counter()
    for partition in sink_partitions(sink, warehouse_table(platform, spec)):
        if NULL_PARTITION in partition.key:
            continue  # dead letters without an event time never close
        frame = read_partition(spark, sink, list(partition.files))
        for row in frame.select("event_id", "route", "event_date", "event_hour").collect():
            rows[tuple(str(value) for value in row)] += 1
    return rows


@pytest.mark.prometheus
def test_nightly_compaction_publishes_the_committed_rows_in_target_size_files(
    spark: SparkSession, warehouse_platform: PlatformConfig, tmp_path: Path
) -> None:
    platform = warehouse_platform
    edit_job(platform, "router", small_batches)
    for seed in (1, 2):
        router_scenario(platform.landing_root, 240, seed)
    run_available_now(spark, platform, find_job("router", platform.conf_dir))

    # With a Pushgateway configured, the run pushes its outcome, which the batch-task alert reads;
    # one that fails (a partition the sink has not) pushes its failure after it.
    with pushgateway(tmp_path) as gateway:
        configure_platform(platform, "monitoring", pushgateway_url=gateway.url)
        before = time.time()
        compact_job(platform, "router", "--now", LATER)
        succeeded = pushed(gateway, "router", BatchTask.COMPACTION)
        assert succeeded.keys() == {LAST_SUCCESS, LAST_DURATION}
        assert before <= succeeded[LAST_SUCCESS] <= time.time() and succeeded[LAST_DURATION] > 0
        failed = warehouse_process().run_application(
            platform, "ops.warehouse.compaction", ["--job", "router", "--partition", "route=none"]
        )
        assert failed.returncode == 2 and "lists no committed file" in failed.stderr
        assert pushed(gateway, "router", BatchTask.COMPACTION)[LAST_FAILURE] > succeeded[LAST_SUCCESS]
        configure_platform(platform, "monitoring", pushgateway_url=None)

    ledger = Ledger.open(platform.resolved_ledger_url)
    versions = ledger.partition_versions("router")
    failed = [
        (version.partition, check["check"], check["observed"], check["sample"])
        for version in versions
        for check in (version.audit or {}).get("checks", [])
        if not check["passed"]
    ]
    assert versions and not failed
    for version in versions:
        assert version.input_rows == version.output_rows
        assert version.input_files is not None and version.input_files > 1
        assert version.output_files == 1 == len(list(Path(version.location).glob("*.parquet")))
        assert version.audit is not None and version.audit["passed"]
    table_rows = query_table(platform, "SELECT event_id, route, event_date, event_hour FROM warehouse.router")
    published = Counter(tuple(str(value) for value in row.values()) for row in table_rows)
    assert published == committed_rows(spark, platform)

    # Nothing changed: the next night publishes nothing new.
    compact_job(platform, "router", "--now", LATER)
    assert len(ledger.partition_versions("router")) == len(versions)

    # Late rows land in one partition: the next night compacts exactly that one again.
    late_partition = next(version.partition for version in versions if "purchases" in version.partition)
    add_late_rows(platform, late_partition, count=5)
    compact_job(platform, "router", "--now", LATER)
    republished = [version for version in ledger.partition_versions("router") if version.version == 2]
    assert [version.partition for version in republished] == [late_partition]
    before = next(version for version in versions if version.partition == late_partition)
    assert (republished[0].rows_before, republished[0].output_rows) == (
        before.output_rows,
        before.output_rows + 5,
    )
    [notice] = [alert for alert in ledger.alerts("router") if alert.kind == "warehouse_republished"]
    assert f"{late_partition} v2 published" in notice.payload["alert"]["reason"]
    assert f"rows {before.output_rows} -> {before.output_rows + 5}" in notice.payload["alert"]["reason"]
    table_rows = query_table(platform, "SELECT event_id, route, event_date, event_hour FROM warehouse.router")
    published = Counter(tuple(str(value) for value in row.values()) for row in table_rows)
    assert published == committed_rows(spark, platform)


@dataclass(frozen=True)
class TeamTable:
    """A team's job (its file, given a directory for its code), how to write its input, and the
    columns its table is compared on."""

    job: str
    spec: Callable[[Path], dict[str, Any]]
    write_input: Callable[[Path], object]
    columns: tuple[str, ...]


def _scored(code_dir: Path) -> dict[str, Any]:
    spec = team_job_spec(write_team_code(code_dir))
    spec["operations"]["quality"] = {"unique": ["event_id"]}
    return spec


TEAM_TABLES = [
    TeamTable(
        TEAM_JOB,
        _scored,
        lambda landing: [router_scenario(landing, 240, seed) for seed in (1, 2)],
        ("event_id", "size", "event_date", "event_hour"),
    ),
    TeamTable(
        WINDOWED_JOB,
        lambda code_dir: windowed_job_spec(write_windowed_code(code_dir)),
        lambda landing: [write_hourly_events(landing, seed) for seed in range(3)],
        ("country", "window_start", "purchases", "largest", "event_date", "event_hour"),
    ),
    TeamTable(
        SQL_JOB,
        lambda _: sql_job_spec(),
        lambda landing: impressions_plays_scenario(landing, 300, 1),
        ("impression_id", "play_id", "outcome", "event_date", "event_hour"),
    ),
]


@pytest.mark.parametrize("case", TEAM_TABLES, ids=lambda case: case.job)
def test_a_team_jobs_closed_partitions_are_published_into_its_table(
    case: TeamTable, spark: SparkSession, warehouse_platform: PlatformConfig, tmp_path: Path
) -> None:
    platform = warehouse_platform
    write_team_job(platform, case.spec(tmp_path / "team-code"))
    case.write_input(platform.landing_root)
    team_job = find_job(case.job, platform.conf_dir)
    run_available_now(spark, platform, team_job)

    compact_job(platform, case.job, "--now", LATER)

    versions = Ledger.open(platform.resolved_ledger_url).partition_versions(case.job)
    assert versions and all(version.audit is not None and version.audit["passed"] for version in versions)
    # As text on both sides: the warehouse process and this session render timestamps alike.
    as_text = [f"CAST({column} AS STRING) AS {column}" for column in case.columns]
    table_rows = query_table(platform, f"SELECT {', '.join(as_text)} FROM warehouse.{case.job}")
    published = Counter(tuple(row.values()) for row in table_rows)
    sink = spark.read.parquet(str(platform.lake_root / team_job.pipeline.sink.path)).where(
        "event_date IS NOT NULL"
    )
    rows = sink.selectExpr(*as_text).collect()
    assert rows and published == Counter(tuple(row) for row in rows)
