"""A restate of a day already compacted republishes exactly the partitions it changed (issue 16):
the router runs as a real driver under the supervisor, a wrong version writes hour 1 of the day,
the nightly compaction publishes every partition, then `warden restate` from the savepoint taken
before the wrong version replays hour 1 with the right code and republishes hour 1's partitions,
and no other (its rewind waits for a compaction reading the sink, and a compaction started while
it is open skips the job rather than publish the rewound sink); the table then equals a clean run
of the right version, and the restate's summary, its `republish` decision and `warden table
history` name each republished partition with its rows before and after."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pyspark.sql import SparkSession

from jobs.batch import batch_rows
from ops.control.supervisor import Supervisor, stop_all_jobs
from ops.ledger.locks import table_lock
from ops.ledger.store import Ledger
from ops.recovery.restate import REPUBLISH_ACTION
from ops.spec.job import find_job
from ops.spec.paths import JobPaths
from ops.spec.platform import CONF_DIR_ENV, PlatformConfig, load_platform
from ops.warehouse.writers import SKIPPED_ACTION
from synthetic.generator import write_batch
from tests.dags.test_restate import RIGHT, WRONG, warden
from tests.support.drivers import caught_up, edit_job, wait_for
from tests.support.warehouse import REPO_ROOT, compact_job, query_table

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]
DAY = datetime(2025, 3, 1, tzinfo=UTC)
LATER = "2030-01-01T00:00:00"


def router_version(purchases: str) -> Callable[[dict[str, Any]], None]:
    def edit(spec: dict[str, Any]) -> None:
        spec["operations"]["trigger"] = {"interval_seconds": 1, "max_files_per_trigger": 1}
        spec["operations"]["restart"]["initial_backoff_seconds"] = 1
        spec["operations"]["compaction"] = {"closed_after_hours": 2, "target_file_mb": 64}
        spec["operations"]["quality"] = {"unique": ["event_id"]}
        spec["pipeline"]["routes"][0]["filter"] = purchases

    return edit


@pytest.fixture
def platform(
    warehouse_platform: PlatformConfig, platform_with_s3: PlatformConfig
) -> Iterator[PlatformConfig]:
    platform = load_platform(warehouse_platform.conf_dir)
    edit_job(platform, "router", router_version(RIGHT))
    yield platform
    stop_all_jobs(platform)


def land_hour(platform: PlatformConfig, hour: int, seeds: range) -> None:
    for seed in seeds:
        write_batch(
            platform.landing_root / "events",
            60,
            0.0,
            seed,
            start=DAY + timedelta(hours=hour),
            span_seconds=3600,
            file_name=f"events-h{hour}-{seed}.json",
        )


def table_rows(platform: PlatformConfig) -> Counter[tuple[str, ...]]:
    rows = query_table(platform, "SELECT event_id, route, event_date, event_hour FROM warehouse.router")
    return Counter(tuple(str(value) for value in row.values()) for row in rows)


def _step(ledger: Ledger) -> str | None:
    operation = ledger.operation("router")
    return None if operation is None else operation.step


def test_a_restate_of_a_compacted_day_republishes_exactly_the_partitions_it_changed(
    platform: PlatformConfig, ledger: Ledger, spark: SparkSession
) -> None:
    supervisor = Supervisor.for_platform(platform)
    land_hour(platform, 0, range(2))
    supervisor.request("router", "resume", "test")
    supervisor.reconcile("router")
    wait_for(lambda: caught_up(platform, "router", files=2), 240, "hour 0")
    savepoint = supervisor.savepoint("router", "before the deploy").savepoint

    edit_job(platform, "router", router_version(WRONG))
    supervisor.request("router", "restart", "deploy the wrong version")
    supervisor.reconcile("router")
    land_hour(platform, 1, range(2, 4))
    wait_for(lambda: caught_up(platform, "router", files=4), 240, "hour 1, by the wrong version")
    edit_job(platform, "router", router_version(RIGHT))

    compact_job(platform, "router", "--now", LATER)
    published = {v.partition: v for v in ledger.partition_versions("router")}
    hour_one = sorted(key for key in published if key.endswith("event_hour=1"))
    assert len(hour_one) == 3 and len(published) == 6, sorted(published)

    # A nightly compaction is reading the sink (the test holds the table lock as one would) when
    # the restate is asked for: the restate's rewind waits for it, with nothing removed.
    sink_log = sorted(
        p.name for p in JobPaths.of(platform, find_job("router", platform.conf_dir)).sink_log.iterdir()
    )
    with table_lock(platform, "router", "a compaction reading the sink"):
        restating = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "ops.cli",
                "restate",
                "router",
                "--savepoint",
                savepoint.id,
                "--reason",
                "zero-amount purchases",
            ],
            cwd=REPO_ROOT,
            env={**os.environ, CONF_DIR_ENV: str(platform.conf_dir)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        wait_for(lambda: _step(ledger) == "rewind", 600, "the restate's rewind")
        # The next night's compaction finds the restate open: it skips the job, publishing nothing.
        during = compact_job(platform, "router", "--now", LATER, "--recovery-wait", "0")
        assert "compaction skipped" in during.stderr + during.stdout
        [skipped] = ledger.decisions("router", action=SKIPPED_ACTION)
        assert skipped.outcome is not None and "its restate (step rewind" in skipped.outcome
        assert {v.partition: v for v in ledger.partition_versions("router")} == published
        assert _step(ledger) == "rewind"
        paths = JobPaths.of(platform, find_job("router", platform.conf_dir))
        assert sorted(p.name for p in paths.sink_log.iterdir()) == sink_log
    stdout, stderr = restating.communicate(timeout=900)
    restated = subprocess.CompletedProcess(restating.args, restating.returncode, stdout, stderr)
    assert restated.returncode == 0, restated.stdout + restated.stderr[-6000:]
    print(restated.stdout)

    republished = [v for v in ledger.partition_versions("router") if v.source == "restatement"]
    assert sorted(v.partition for v in republished) == hour_one
    # Readers saw each partition's old version, then its restated one: nothing in between.
    assert len(ledger.partition_versions("router")) == len(published) + len(hour_one)
    assert all(v.status == "published" and v.version == 2 for v in republished)
    for version in republished:
        assert version.rows_before == published[version.partition].output_rows
        line = f"{version.partition} v2 published, rows {version.rows_before:,} -> {version.output_rows:,}"
        assert line in restated.stdout
    purchases = next(v for v in republished if "route=purchases" in v.partition)
    assert purchases.output_rows is not None and purchases.rows_before is not None
    assert purchases.output_rows < purchases.rows_before, "the zero-amount purchases are gone"
    [decision] = ledger.decisions("router", action=REPUBLISH_ACTION)
    assert decision.outcome is not None and decision.outcome.startswith("republished 3 partitions")

    spec = find_job("router", platform.conf_dir)
    clean = batch_rows(spark, platform, spec, platform.landing_root)
    expected = Counter(
        tuple(str(value) for value in row)
        for row in clean.select("event_id", "route", "event_date", "event_hour").collect()
    )
    assert table_rows(platform) == expected

    history = warden(platform, "table", "history", "router", "--partition", purchases.partition)
    assert history.returncode == 0, history.stderr
    [row] = [line for line in history.stdout.splitlines() if " restatement " in line]
    assert f"{purchases.rows_before}" in row and f"{purchases.output_rows}" in row
