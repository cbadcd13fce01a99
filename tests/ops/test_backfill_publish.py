"""A backfill published into the warehouse table through the compaction's quality gate, on real
Spark, a real S3 archive, a real Hive metastore on PostgreSQL, real Great Expectations and a real
HTTP Slack stand-in: exactly the target partitions are replaced, and only when every one of them
passes the gate."""

from __future__ import annotations

import shutil
import uuid
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
import yaml
from pyspark.sql import SparkSession

from ops import archive
from ops.alerts import AlertCenter
from ops.backfill import run as backfill_run
from ops.backfill.plan import BackfillRequest
from ops.backfill.run import publication_lines, run_backfill
from ops.cli import main
from ops.ledger.store import Ledger
from ops.spec.job import find_job
from ops.spec.paths import JobPaths
from ops.spec.platform import PlatformConfig, load_platform
from ops.warehouse.compact import needs_compaction
from ops.warehouse.compaction import warehouse_table
from ops.warehouse.sinklog import partition_end, sink_partitions
from tests.ops.test_backfill import FIRST_ARRIVAL, HOURS, NOW, as_fed, live_reference, write_input
from tests.support.drivers import edit_job
from tests.support.slack import SlackReceiver
from tests.support.spark import run_available_now
from tests.support.warehouse import append_to_sink_log, query_table

# Backfills, publishes (in this session and the warehouse process) and readers, with the cores shared.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]
COLUMNS = ("event_id", "route", "event_date", "event_hour", "amount")


@pytest.fixture
def platform(warehouse_platform: PlatformConfig, platform_with_s3: PlatformConfig) -> PlatformConfig:
    """A throwaway platform with a warehouse, the shared S3 server and an archive prefix of its own."""
    path = warehouse_platform.conf_dir / "platform.yaml"
    settings = yaml.safe_load(path.read_text())
    settings["archive"] = {"prefix": f"archive-{uuid.uuid4().hex[:8]}", "seal_after_minutes": 10}
    path.write_text(yaml.safe_dump(settings))
    return load_platform(path.parent)


def purchases_only(spec: dict[str, Any]) -> None:
    """One route (and the dead letters): few partitions, so few audits."""
    spec["pipeline"]["routes"] = [r for r in spec["pipeline"]["routes"] if r["name"] == "purchases"]


def table_rows(platform: PlatformConfig) -> Counter[tuple[str, ...]]:
    rows = query_table(platform, f"SELECT {', '.join(COLUMNS)} FROM warehouse.router")
    return Counter(tuple(str(row[column]) for column in COLUMNS) for row in rows)


def hours(first: int, end: int) -> tuple[str, str]:
    return (FIRST_ARRIVAL + timedelta(hours=first)).isoformat(), (
        FIRST_ARRIVAL + timedelta(hours=end)
    ).isoformat()


def versions(ledger: Ledger) -> dict[str, list[tuple[int, str, str]]]:
    """Each partition's versions, newest first: (version, status, source)."""
    by_partition: dict[str, list[tuple[int, str, str]]] = {}
    for record in ledger.partition_versions("router"):
        by_partition.setdefault(record.partition, []).append((record.version, record.status, record.source))
    return by_partition


@pytest.mark.usefixtures("backfill_in_session")
def test_a_backfill_replaces_exactly_its_partitions_after_the_gate_and_a_failing_gate_publishes_nothing(
    spark: SparkSession,
    platform: PlatformConfig,
    slack_webhook: SlackReceiver,
    capsys: pytest.CaptureFixture[str],
) -> None:
    edit_job(platform, "router", purchases_only)
    by_hour = write_input(platform, "router", seed=21)
    archive.archive_landing(platform, ["events"], NOW)
    ledger = Ledger.open(platform.resolved_ledger_url)
    # The live job ran over the same input: its sink holds the partitions the backfill replaces.
    spec = find_job("router", platform.conf_dir)
    run_available_now(spark, platform, spec)
    table = warehouse_table(platform, spec)
    live_sink = JobPaths.of(platform, spec).sink
    live = [p for p in sink_partitions(live_sink, table) if partition_end(p.values) is not None]

    # The whole range: the table shows the streaming job's output over it.
    whole = BackfillRequest("router", start=FIRST_ARRIVAL, end=FIRST_ARRIVAL + timedelta(hours=HOURS))
    plan, staged = run_backfill(platform, whole, NOW)
    backfill_run.publish_output(platform, staged.run, plan)
    lines, blocked = publication_lines(staged.run)
    assert not blocked, lines
    reference = live_reference(spark, platform, spec, as_fed(plan, by_hour))
    streamed = Counter(
        tuple(str(row[column]) for column in COLUMNS)
        for row in reference.where("event_date IS NOT NULL").select(*COLUMNS).collect()
    )
    assert streamed and table_rows(platform) == streamed
    first = versions(ledger)
    assert all(history == [(1, "published", "backfill")] for history in first.values())
    assert not any("__HIVE_DEFAULT_PARTITION__" in key for key in first)  # dead letters never close
    # The nightly compaction leaves the backfill's versions alone while the live sink is unchanged.
    assert {partition.key for partition in live} == set(first)
    assert not any(needs_compaction(ledger, table, partition) for partition in live)

    # The last two hours again, through the CLI: exactly their partitions are replaced.
    start, end = hours(1, HOURS)
    assert main(["backfill", "router", "--from", start, "--to", end]) == 0
    assert "partitions published" in capsys.readouterr().out
    second = versions(ledger)
    replaced = {key for key, history in second.items() if history[0][0] == 2}
    untouched = set(second) - replaced
    assert "route=purchases/event_date=2025-03-01/event_hour=22" in untouched  # the first hour's
    assert replaced and all(second[key] == [(2, "published", "backfill"), *first[key]] for key in replaced)
    assert all(second[key] == first[key] for key in untouched)
    assert table_rows(platform) == streamed

    # Duplicate event ids land late in the second hour: the gate blocks the whole backfill.
    [second_hour] = by_hour[1]
    duplicate = second_hour.with_name("events-21-again.json")
    shutil.copy2(second_hour, duplicate)
    archive.archive_landing(platform, ["events"], NOW)
    assert main(["backfill", "router", "--from", start, "--to", end]) == 1
    assert "NOTHING PUBLISHED" in capsys.readouterr().out
    third = versions(ledger)
    assert {key for key, history in third.items() if history[0][0] == 3} == replaced
    assert all(
        third[key][0] == (3, "blocked", "backfill") and third[key][1:] == second[key] for key in replaced
    )
    assert all(third[key] == first[key] for key in untouched)
    assert table_rows(platform) == streamed
    AlertCenter(ledger, platform.slack).deliver_due()
    [page] = [m["text"] for m in slack_webhook.messages if "not published" in m["text"]]
    assert "warehouse.router: backfill router-20261120T07-20261120T09-job-" in page
    assert "event_hour=23 v3: expect_column_values_to_be_unique(column=event_id) [block]: observed" in page

    # Late files in a live sink partition: the nightly compaction would publish it again.
    late = live[0].files[0].with_name("part-77777-late.c000.snappy.parquet")
    shutil.copy(live[0].files[0], late)
    append_to_sink_log(live_sink, late)
    [changed] = [p for p in sink_partitions(live_sink, table) if p.key == live[0].key]
    assert needs_compaction(ledger, table, changed)
