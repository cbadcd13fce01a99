"""Write-audit-publish when things go wrong, on a real router sink, catalog and GX: a failing
blocking expectation publishes nothing and pages; a compaction killed with SIGKILL before or
after its staging write leaves nothing half-published and the rerun publishes once; a rollback
shows the earlier version again; `warden table history` tells the story."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from ops.ledger.records import PartitionVersionRecord
from ops.ledger.store import Ledger
from ops.spec.job import find_job
from ops.spec.platform import CONF_DIR_ENV, PlatformConfig
from ops.warehouse.compaction import warehouse_table
from ops.warehouse.sinklog import sink_partitions
from synthetic.scenarios import router_scenario
from tests.support.drivers import edit_job
from tests.support.spark import run_available_now
from tests.support.warehouse import (
    REPO_ROOT,
    append_to_sink_log,
    compact_job,
    one_file_per_batch,
    query_table,
    run_module,
)

# Several Spark processes (driver, compactions, readers), each a cold start with the cores shared.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


def with_unique_event_ids(spec: dict[str, object]) -> None:
    one_file_per_batch(spec)
    spec["operations"]["quality"] = {"unique": ["event_id"]}  # type: ignore[index]


def duplicate_a_committed_file(sink: Path, files: tuple[Path, ...]) -> tuple[Path, Path]:
    """A batch that committed a copy of an earlier file: every event id in it twice. Returns
    the copy and its log entry."""
    copy = files[0].with_name("part-99999-duplicate.c000.snappy.parquet")
    shutil.copy(files[0], copy)
    return copy, append_to_sink_log(sink, copy)


def table_count(platform: PlatformConfig, where: str) -> int:
    [row] = query_table(platform, f"SELECT count(*) AS n FROM warehouse.router WHERE {where}")
    return int(row["n"])


def kill_when(platform: PlatformConfig, key: str, ledger: Ledger, ready: str) -> None:
    """Start a compaction of `key` and SIGKILL it once its staged version exists and its
    directory is (`ready="written"`) or is not yet (`ready="staged"`) written."""
    process = subprocess.Popen(
        [sys.executable, "-m", "ops.warehouse.compaction", "--job", "router", "--partition", key],
        cwd=REPO_ROOT,
        env={**os.environ, CONF_DIR_ENV: str(platform.conf_dir)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 600
    try:
        while time.monotonic() < deadline and process.poll() is None:
            staged = [
                v for v in ledger.partition_versions("router", key) if v.status == "staged" and v.location
            ]
            written = bool(staged) and (Path(staged[0].location) / "_SUCCESS").exists()
            if staged and (written if ready == "written" else not written):
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                return
            time.sleep(0.05)
        raise AssertionError(f"the compaction ended or hung before it was {ready}")
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)


def statuses(versions: list[PartitionVersionRecord]) -> list[tuple[int, str, str]]:
    return [(v.version, v.status, v.source) for v in sorted(versions, key=lambda v: v.version)]


def test_blocked_killed_and_rolled_back_compactions_never_show_a_half_published_partition(
    spark: SparkSession, warehouse_platform: PlatformConfig
) -> None:
    platform = warehouse_platform
    edit_job(platform, "router", with_unique_event_ids)
    router_scenario(platform.landing_root, 300, 1)
    spec = find_job("router", platform.conf_dir)
    run_available_now(spark, platform, spec)
    sink = platform.lake_root / spec.pipeline.sink.path
    partition = next(
        p for p in sink_partitions(sink, warehouse_table(platform, spec)) if "purchases" in p.key
    )
    key, where = (
        partition.key,
        " AND ".join(f"{column} = '{value}'" for column, value in partition.values.items()),
    )
    ledger = Ledger.open(platform.resolved_ledger_url)

    compact_job(platform, "router", "--partition", key)
    [first] = ledger.partition_versions("router", key)
    assert first.status == "published" and table_count(platform, where) == first.output_rows

    # Duplicate event ids: the unique check blocks, nothing is published, Slack is paged.
    duplicate = duplicate_a_committed_file(sink, partition.files)
    compact_job(platform, "router", "--partition", key)
    blocked = ledger.partition_versions("router", key)[0]
    assert (blocked.version, blocked.status) == (2, "blocked")
    [page] = [alert for alert in ledger.alerts("router") if alert.kind == "quality_blocked"]
    reason = page.payload["alert"]["reason"]
    assert "expect_column_values_to_be_unique(column=event_id) [block]: observed" in reason
    assert key in page.payload["alert"]["state"] and page.severity == "critical"
    assert table_count(platform, where) == first.output_rows
    for path in duplicate:
        path.unlink()

    # Killed before and after the staging write: the table keeps version 1 throughout.
    kill_when(platform, key, ledger, ready="staged")
    kill_when(platform, key, ledger, ready="written")
    assert table_count(platform, where) == first.output_rows
    # The second run settled what the first left (abandoned, its files deleted); the second's is left.
    assert statuses(ledger.partition_versions("router", key))[2:] == [
        (3, "abandoned", "compaction"),
        (4, "staged", "compaction"),
    ]

    # The rerun settles what the killed runs left and publishes once.
    compact_job(platform, "router", "--partition", key)
    versions = ledger.partition_versions("router", key)
    assert statuses(versions) == [
        (1, "published", "compaction"),
        (2, "blocked", "compaction"),
        (3, "abandoned", "compaction"),
        (4, "abandoned", "compaction"),
        (5, "published", "compaction"),
    ]
    assert not any(Path(v.location).exists() for v in versions if v.status == "abandoned")
    assert (versions[0].rows_before, versions[0].output_rows) == (first.output_rows, first.output_rows)
    assert table_count(platform, where) == first.output_rows

    rolled = run_module(
        platform, "ops.cli", ["table", "rollback", "router", "--partition", key, "--version", "1"]
    )
    assert rolled.returncode == 0, rolled.stderr[-4000:]
    assert "now shows version 1's files (recorded as version 6" in rolled.stdout
    current = ledger.partition_versions("router", key)[0]
    assert (current.source, current.location) == ("rollback", first.location)
    assert table_count(platform, where) == first.output_rows

    history = run_module(platform, "ops.cli", ["table", "history", "router", "--partition", key])
    assert history.returncode == 0, history.stderr
    lines = history.stdout.splitlines()
    assert len(lines) == 1 + 6
    assert "rollback" in lines[1]
    assert "expect_column_values_to_be_unique(column=event_id) [block] observed" in lines[-2]
