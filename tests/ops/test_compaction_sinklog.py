"""A bounded sink log (issue 16, part 4): the router runs through three simulated days with a
nightly compaction each; published partitions past the sink's horizon lose their raw files and
their `_spark_metadata` entries, the log after day 3 is as large as after day 1, the table keeps
every committed row, and a rewind to a savepoint from before the expiry is refused.

Real Spark (the driver and the compactions in their own processes), real Hive metastore on
PostgreSQL, real GX, real SeaweedFS for the savepoints.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml
from pyspark.sql import SparkSession

from ops.alerts import AlertCenter
from ops.control.supervisor import Supervisor
from ops.driver.checkpoint import sink_files
from ops.exceptions import RewindError
from ops.ledger.store import Ledger
from ops.recovery.rewind import rewind_job
from ops.savepoints.store import take_savepoint
from ops.spec.job import find_job
from ops.spec.platform import PlatformConfig, load_platform
from ops.warehouse.compaction import warehouse_table
from ops.warehouse.rewrite import read_partition
from ops.warehouse.sinklog import EXPIRE_ACTION, EXPIRED_MARKER, SINK_LOG, log_size, sink_partitions
from synthetic.generator import write_batch
from tests.support.drivers import edit_job
from tests.support.fake_backend import FakeBackend
from tests.support.spark import run_available_now
from tests.support.warehouse import compact_job, query_table

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]
JOB = "router"
FIRST_DAY = datetime(2025, 3, 1, tzinfo=UTC)
FILES_PER_DAY = 12
EVENTS_PER_FILE = 30
# Each night runs at noon of the next day: a day's partitions (its first hour) are closed that
# night and expire the night after (36 h after their hour ends).
RETENTION_HOURS = 36


def bounded_router(spec: dict[str, Any]) -> None:
    spec["operations"]["trigger"] = {"interval_seconds": 1, "max_files_per_trigger": 1}
    spec["operations"]["compaction"] = {
        "closed_after_hours": 2,
        "target_file_mb": 64,
        "sink_retention_hours": RETENTION_HOURS,
    }
    spec["operations"]["quality"] = {"unique": ["event_id"]}


def spark_keeps_ten_batches(platform: PlatformConfig) -> PlatformConfig:
    """Spark's own purge of old sink-log entries, at a scale a test reaches: it keeps the last 10
    batches (default 100) and deletes at once (default: entries 10 minutes old)."""
    path = platform.conf_dir / "platform.yaml"
    document = yaml.safe_load(path.read_text())
    document.setdefault("spark", {}).setdefault("extra_conf", {}).update(
        {
            "spark.sql.streaming.minBatchesToRetain": "10",
            "spark.sql.streaming.fileSink.log.cleanupDelay": "0",
        }
    )
    path.write_text(yaml.safe_dump(document))
    return load_platform(platform.conf_dir)


def land_day(platform: PlatformConfig, day: int) -> None:
    """FILES_PER_DAY landing files of events in the first hour of simulated day `day` (0-based)."""
    start = FIRST_DAY + timedelta(days=day)
    for index in range(FILES_PER_DAY):
        write_batch(
            platform.landing_root / "events",
            EVENTS_PER_FILE,
            0.0,
            seed=day * 1000 + index,
            start=start,
            span_seconds=3600,
            file_name=f"events-day{day}-{index:02d}.json",
        )


def committed_by_partition(spark: SparkSession, platform: PlatformConfig) -> dict[str, Counter[str]]:
    """The event ids of every partition the sink log lists now."""
    spec = find_job(JOB, platform.conf_dir)
    sink = platform.lake_root / spec.pipeline.sink.path
    return {
        partition.key: Counter(
            row["event_id"] for row in read_partition(spark, sink, list(partition.files)).collect()
        )
        for partition in sink_partitions(sink, warehouse_table(platform, spec))
    }


def table_by_partition(platform: PlatformConfig) -> dict[str, Counter[str]]:
    rows = query_table(platform, f"SELECT event_id, route, event_date, event_hour FROM warehouse.{JOB}")
    table: dict[str, Counter[str]] = {}
    for row in rows:
        key = f"route={row['route']}/event_date={row['event_date']}/event_hour={row['event_hour']}"
        table.setdefault(key, Counter())[row["event_id"]] += 1
    return table


def test_three_days_with_nightly_compaction_keep_the_sink_log_bounded_and_the_table_whole(
    spark: SparkSession,
    warehouse_platform: PlatformConfig,
    platform_with_s3: PlatformConfig,
    ledger: Ledger,
    fake_backend: FakeBackend,
) -> None:
    platform = spark_keeps_ten_batches(load_platform(warehouse_platform.conf_dir))
    edit_job(platform, JOB, bounded_router)
    spec = find_job(JOB, platform.conf_dir)
    sink = platform.lake_root / spec.pipeline.sink.path
    ever_committed: dict[str, Counter[str]] = {}
    log_sizes: list[int] = []
    day_one_savepoint = None
    for day in range(3):
        land_day(platform, day)
        run_available_now(spark, platform, spec)
        if day == 0:
            day_one_savepoint = take_savepoint(platform, ledger, spec)
        committed = committed_by_partition(spark, platform)
        ever_committed.update(committed)
        day_keys = [
            key for key in committed if f"event_date={(FIRST_DAY + timedelta(days=day)).date()}" in key
        ]
        assert day_keys, f"day {day} wrote no partition: {sorted(committed)}"
        day_files = {path for key in day_keys for path in sink.joinpath(key).glob("*.parquet")}

        night = FIRST_DAY + timedelta(days=day + 1, hours=12)
        compact_job(platform, JOB, "--now", night.isoformat())

        log_sizes.append(log_size(sink / SINK_LOG))
        log_files = len(list((sink / SINK_LOG).iterdir()))
        print(f"day {day + 1}: _spark_metadata {log_sizes[-1]:,} bytes in {log_files} files")
        # The table holds every committed row of every closed partition, expired ones included.
        assert table_by_partition(platform) == ever_committed
        # Tonight's partitions are published, their raw files still in the sink (and in its log).
        listed = sink_files(sink / SINK_LOG)
        assert day_files <= listed and all(path.is_file() for path in day_files)
        expired_days = range(day)  # each earlier day's partitions passed the horizon by now
        for earlier in expired_days:
            date = (FIRST_DAY + timedelta(days=earlier)).date()
            gone = [key for key in ever_committed if f"event_date={date}" in key]
            for key in gone:
                assert (sink / key / EXPIRED_MARKER).is_file()
                assert not list((sink / key).glob("*.parquet")), f"{key} keeps raw files"
                assert not any(path.parent == sink / key for path in listed), f"{key} still in the log"

    assert log_sizes[2] <= 1.2 * log_sizes[0], f"sink log grew: {log_sizes}"
    expiries = ledger.decisions(JOB, action=EXPIRE_ACTION)
    assert len(expiries) == 2 and all(row.outcome and row.outcome.startswith("expired") for row in expiries)

    # Events of day 1 arrive two days late, into partitions whose raw files expired: the next
    # night publishes each such partition with its published rows and the late ones.
    write_batch(
        platform.landing_root / "events", 40, 0.0, seed=99, start=FIRST_DAY, file_name="events-late.json"
    )
    run_available_now(spark, platform, spec)
    late = {
        key: ids
        for key, ids in committed_by_partition(spark, platform).items()
        if f"event_date={FIRST_DAY.date()}" in key
    }
    assert late and all((sink / key / EXPIRED_MARKER).is_file() for key in late)
    compact_job(platform, JOB, "--now", (FIRST_DAY + timedelta(days=3, hours=12)).isoformat())
    for key, ids in late.items():
        ever_committed[key] += ids
        [version, before] = ledger.partition_versions(JOB, key)[:2]
        assert (version.status, version.rows_before) == ("published", before.output_rows)
        assert version.output_rows == before.output_rows + sum(ids.values())
    assert table_by_partition(platform) == ever_committed

    # A rewind to the savepoint of day 1 would restore a log naming the expired files: refused,
    # with the cause, before anything is touched.
    assert day_one_savepoint is not None
    supervisor = Supervisor(platform, ledger, fake_backend, AlertCenter(ledger, platform.slack))
    before = {path: path.read_bytes() for path in (sink / SINK_LOG).iterdir() if path.is_file()}
    with pytest.raises(RewindError, match=r"\[sink_expired\]") as refused:
        rewind_job(supervisor, JOB, reason="test: before the horizon", savepoint_id=day_one_savepoint.id)
    assert "have expired since" in str(refused.value)
    [row] = ledger.decisions(JOB, action="rewind")
    assert row.outcome is not None and row.outcome.startswith("refused: ") and "[sink_expired]" in row.outcome
    assert {path: path.read_bytes() for path in (sink / SINK_LOG).iterdir() if path.is_file()} == before
    # A savepoint taken after the expiry copies the bounded log: a rewind to it plans normally.
    plan = rewind_job(
        supervisor,
        JOB,
        reason="test: after the horizon",
        savepoint_id=take_savepoint(platform, ledger, spec).id,
        dry_run=True,
    )
    assert plan.replay_batches == range(plan.batch_id + 1, plan.batch_id + 1)
