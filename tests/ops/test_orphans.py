"""Sink files of batches that never committed: a router driver killed mid-batch, then the
supervisor's cleanup; and housekeeping's age rule while a driver may run."""

from __future__ import annotations

import os
import shutil
import signal
import time
import uuid
from pathlib import Path
from urllib.parse import quote

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from ops.alerts import AlertCenter
from ops.control.launcher import LocalProcessBackend
from ops.control.supervisor import Supervisor, stop_all_jobs
from ops.driver.checkpoint import log_entries, sink_files
from ops.exceptions import SinkCleanupError
from ops.ledger.store import Ledger
from ops.recovery.orphans import find_orphaned_output
from ops.spec.job import find_job
from ops.spec.paths import JobPaths
from ops.spec.platform import PlatformConfig
from synthetic.generator import write_batch
from tests.support.drivers import caught_up, edit_job, wait_for
from tests.support.platform import job_paths

LANDING_FILES = 10


def part_files(sink: Path) -> list[Path]:
    return sorted(p for p in sink.rglob("part-*") if "_spark_metadata" not in p.parts)


def unlisted(paths: JobPaths) -> list[Path]:
    listed = sink_files(paths.sink_log)
    return [path for path in part_files(paths.sink) if path not in listed]


def directory_rows(sink: Path) -> int:
    """Rows as a reader that lists the directory sees them (pyarrow skips `_`/`.` entries).

    Without partition columns: the dead-letter route's null partitions defeat pyarrow's
    dictionary unification, and the row count does not need them."""
    return pq.read_table(sink, partitioning=None).num_rows


def kill_mid_batch(paths: JobPaths, ledger: Ledger, timeout: float = 300) -> None:
    """SIGKILL the router's process group while a batch after the first is planned but not
    committed and has already written part files that the sink log does not list."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = ledger.current_run("router")
        offsets, commits = log_entries(paths.offsets), log_entries(paths.commits)
        in_flight = bool(commits) and max(offsets) > max(commits)
        if run is not None and run.pid is not None and in_flight and unlisted(paths):
            os.killpg(run.pid, signal.SIGKILL)
            return
        time.sleep(0.02)
    raise AssertionError("never saw a batch in flight with files written")


def test_a_batch_killed_mid_write_leaves_files_the_supervisor_removes_before_relaunch(
    spark: SparkSession, platform_conf: PlatformConfig, ledger: Ledger
) -> None:
    platform = platform_conf
    edit_job(
        platform,
        "router",
        lambda s: s["operations"].update(trigger={"interval_seconds": 1, "max_files_per_trigger": 2}),
    )
    paths = job_paths(platform, "router")
    (landing,) = paths.landing.values()
    for seed in range(LANDING_FILES):
        write_batch(landing, 3000, 0.01, seed)
    backend = LocalProcessBackend(platform)
    supervisor = Supervisor(platform, ledger, backend, AlertCenter(ledger, platform.slack))
    try:
        supervisor.reconcile("router")
        kill_mid_batch(paths, ledger)
        killed = ledger.current_run("router")
        assert killed is not None
        wait_for(lambda: not backend.is_alive(killed), 30, "the killed driver to be gone")

        # A stray part file as Spark names them, holding committed rows again, for certain.
        listed = sorted(sink_files(paths.sink_log))
        stray = listed[0].parent / f"part-00000-{uuid.uuid4()}.c000.snappy.parquet"
        shutil.copy(listed[0], stray)
        orphans = unlisted(paths)
        assert stray in orphans
        orphan_bytes = sum(path.stat().st_size for path in orphans)
        spark_rows = spark.read.parquet(str(paths.sink)).count()
        try:
            before: int | None = directory_rows(paths.sink)
        except (OSError, ValueError):
            before = None  # a file the kill cut short: a directory reader fails outright
        assert before is None or before > spark_rows, (before, spark_rows)

        # The pass that finds the driver dead closes its run and removes what it left.
        supervisor.reconcile("router")
        assert [p for p in orphans if p.exists()] == []
        (decision,) = ledger.decisions("router", action="remove_orphans")
        assert decision.run_id == killed.run_id
        assert (decision.inputs["files"], decision.inputs["bytes"]) == (len(orphans), orphan_bytes)
        assert decision.inputs["rows"] >= pq.ParquetFile(listed[0]).metadata.num_rows
        assert decision.outcome is not None and decision.outcome.startswith(f"removed {len(orphans)} ")

        # After the backoff it relaunches; the relaunched driver re-runs the batch and reads the rest.
        wait_for(
            lambda: (
                supervisor.reconcile("router").state in ("SUBMITTED", "RUNNING")
                and ledger.current_run("router") is not None
            ),
            60,
            "the relaunch",
        )
        wait_for(lambda: caught_up(platform, "router", files=LANDING_FILES), 300, "the router to catch up")
    finally:
        stop_all_jobs(platform)

    spark_rows = spark.read.parquet(str(paths.sink)).count()
    assert unlisted(paths) == []
    assert directory_rows(paths.sink) == spark_rows
    assert len(pd.read_parquet(paths.sink, partitioning=None)) == spark_rows


def write_part(directory: Path, rows: int, mtime: float) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"part-00000-{uuid.uuid4()}.c000.snappy.parquet"
    pq.write_table(pa.table({"event_id": [f"e{i}" for i in range(rows)]}), path)
    (directory / f".{path.name}.crc").write_bytes(b"crc")
    os.utime(path, (mtime, mtime))
    return path


def test_housekeeping_removes_only_orphans_older_than_the_newest_commit(
    platform_conf: PlatformConfig, ledger: Ledger
) -> None:
    platform = platform_conf
    # A space and an escaped partition value: Spark logs both percent-encoded.
    edit_job(platform, "router", lambda s: s["pipeline"]["sink"].update(path="router out"))
    spec = find_job("router", platform.conf_dir)
    paths = JobPaths.of(platform, spec)
    committed_at = time.time() - 600
    listed = write_part(paths.sink / "route=a%3Ab", 2, committed_at - 60)
    old_orphan = write_part(paths.sink / "route=a%3Ab", 3, committed_at - 30)
    in_flight = write_part(paths.sink / "route=c", 4, committed_at + 30)
    paths.sink_log.mkdir(parents=True)
    (paths.sink_log / "0").write_text(f'v1\n{{"path":"file://{quote(str(listed))}","action":"add"}}\n')
    paths.commits.mkdir(parents=True)
    (paths.commits / "0").write_text('v1\n{"nextBatchWatermarkMs":0}\n')
    os.utime(paths.commits / "0", (committed_at, committed_at))
    supervisor = Supervisor(
        platform, ledger, LocalProcessBackend(platform), AlertCenter(ledger, platform.slack)
    )

    old_bytes = old_orphan.stat().st_size
    assert supervisor.remove_all_orphaned_output() == [
        f"router: removed 1 orphaned files ({old_bytes:,} bytes, 3 rows)"
    ]
    assert not old_orphan.exists() and not (old_orphan.parent / f".{old_orphan.name}.crc").exists()
    assert listed.exists() and in_flight.exists()
    (decision,) = ledger.decisions("router", action="remove_orphans")
    assert (decision.inputs["files"], decision.inputs["rows"]) == (1, 3)
    assert decision.inputs["examples"] == [str(old_orphan.relative_to(paths.sink))]
    assert supervisor.remove_all_orphaned_output() == []

    # With the driver gone (before a launch) the newer one goes too, and its emptied partition.
    outcome = supervisor.remove_orphaned_output(spec, "test", driver_gone=True)
    assert outcome is not None and outcome.startswith("removed 1 orphaned files")
    assert not in_flight.parent.exists() and listed.exists()

    # A log whose files are not on disk cannot tell orphans apart: nothing is removed.
    another = write_part(paths.sink / "route=a%3Ab", 1, committed_at - 30)
    listed.unlink()
    (line,) = supervisor.remove_all_orphaned_output()
    assert "not on disk" in line and another.exists()
    with pytest.raises(SinkCleanupError, match="not on disk"):
        find_orphaned_output(paths, written_before=None)
