"""Rewind and replay against real drivers, a real S3 server and real Spark checkpoints.

The differential check: a job runs with savepoints, a wrong version of it runs for a while, the
job is rewound to the savepoint taken before the switch and replayed with the right version;
its sink must then equal, row for row, one clean run of the right version over the same input.
The history before a rewind is the job's real query run in the test's session; the replay after
it is a driver's, the process that replays.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from pyspark.sql import SparkSession
from pyspark.testing import assertDataFrameEqual

from jobs.batch import batch_rows
from jobs.router.transform import read_route
from ops import archive
from ops.control.supervisor import Supervisor
from ops.driver.replay import pending_replay
from ops.exceptions import RewindError
from ops.ledger.locks import job_lock
from ops.ledger.store import Ledger
from ops.recovery.restate import last_commit
from ops.recovery.rewind import rewind_job
from ops.savepoints.store import take_savepoint
from ops.spec.job import find_job
from ops.spec.platform import PlatformConfig, load_platform
from synthetic.generator import write_batch
from tests.support.drivers import Driver, caught_up, edit_job, fast_trigger
from tests.support.platform import job_paths
from tests.support.spark import run_available_now

JOB = "router"
RIGHT_FILTER = "event_type = 'purchase' AND amount > 0"
# The wrong version's bug: zero-amount purchases are routed too.
WRONG_FILTER = "event_type = 'purchase'"


def set_purchase_filter(expression: str) -> Callable[[dict[str, Any]], None]:
    def edit(spec: dict[str, Any]) -> None:
        fast_trigger(spec)
        spec["pipeline"]["routes"][0]["filter"] = expression

    return edit


def run_until_read(driver: Driver, platform: PlatformConfig, files: int) -> None:
    """Wait until the driver has committed every batch it planned and read all `files`, then stop it."""
    driver.wait_heartbeat(lambda _: caught_up(platform, JOB, files), timeout=120)
    driver.process.send_signal(signal.SIGTERM)
    assert driver.wait_exit() == 0, driver.log()


def snapshot(directory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()
    }


@pytest.fixture
def platform(platform_with_s3: PlatformConfig) -> PlatformConfig:
    edit_job(platform_with_s3, JOB, set_purchase_filter(RIGHT_FILTER))
    return platform_with_s3


def test_restating_the_router_from_a_savepoint_equals_a_clean_run(
    spark: SparkSession, platform: PlatformConfig, ledger: Ledger, start_driver: Callable[..., Driver]
) -> None:
    landing = platform.landing_root / find_job(JOB, platform.conf_dir).pipeline.source.path
    for seed in range(6):
        write_batch(landing, 60, 0.05, seed)
    run_available_now(spark, platform, find_job(JOB, platform.conf_dir))
    savepoint = take_savepoint(platform, ledger, find_job(JOB, platform.conf_dir))

    edit_job(platform, JOB, set_purchase_filter(WRONG_FILTER))
    for seed in range(6, 12):
        write_batch(landing, 60, 0.05, seed)
    run_available_now(spark, platform, find_job(JOB, platform.conf_dir))
    checkpoint = platform.checkpoint_root / JOB
    last_batch = last_commit(platform, JOB)
    original_offsets = {
        k: (checkpoint / "offsets" / str(k)).read_bytes()
        for k in range(savepoint.batch_id + 1, last_batch + 1)
    }

    spec = find_job(JOB, platform.conf_dir)
    sink = platform.lake_root / spec.pipeline.sink.path
    wrong_rows = read_route(spark, sink, "purchases", ["amount"]).where("amount = 0").count()
    assert wrong_rows > 0, "the wrong version routed zero-amount purchases"

    edit_job(platform, JOB, set_purchase_filter(RIGHT_FILTER))
    supervisor = Supervisor.for_platform(platform)
    dry = rewind_job(supervisor, JOB, reason="test dry run", savepoint_id=savepoint.id, dry_run=True)
    assert dry.replay_batches == range(savepoint.batch_id + 1, last_batch + 1)
    assert len(dry.input_files) == 6 and dry.sink_rows > 0
    assert not job_paths(platform, JOB).replay.exists(), "a dry run touches nothing"

    plan = rewind_job(supervisor, JOB, reason="wrong purchase filter", savepoint_id=savepoint.id)
    assert plan.replay_batches == dry.replay_batches and plan.sink_rows == dry.sink_rows
    assert pending_replay(job_paths(platform, JOB)) == list(plan.replay_batches)
    assert not any(path.exists() for path in plan.sink_files)
    assert (
        max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit()) == savepoint.batch_id
    )

    for seed in range(12, 14):
        write_batch(landing, 60, 0.05, seed)
    run_until_read(start_driver("right-2"), platform, files=14)
    replayed = {k: (checkpoint / "offsets" / str(k)).read_bytes() for k in original_offsets}
    assert replayed == original_offsets, "each replayed batch ran with its original offsets"

    spec = find_job(JOB, platform.conf_dir)
    clean = batch_rows(spark, platform, spec, platform.landing_root)
    restated = spark.read.parquet(str(sink))
    assertDataFrameEqual(restated.select(*clean.columns), clean)
    decision = ledger.decisions(JOB, action="rewind")[0]
    assert decision.outcome is not None and decision.outcome.startswith(
        f"rewound to batch {savepoint.batch_id}"
    )


def test_rewind_past_input_retention_is_refused_before_anything_is_touched(
    spark: SparkSession, platform: PlatformConfig, ledger: Ledger
) -> None:
    landing = platform.landing_root / "events"
    for seed in range(2):
        write_batch(landing, 40, 0.0, seed)
    run_available_now(spark, platform, find_job(JOB, platform.conf_dir))
    savepoint = take_savepoint(platform, ledger, find_job(JOB, platform.conf_dir))
    later = [write_batch(landing, 40, 0.0, seed) for seed in range(2, 4)]
    run_available_now(spark, platform, find_job(JOB, platform.conf_dir))
    later[0].path.unlink()
    before = snapshot(platform.checkpoint_root / JOB), snapshot(platform.lake_root / "router")

    with pytest.raises(RewindError, match="no longer retained") as refused:
        rewind_job(Supervisor.for_platform(platform), JOB, reason="test", savepoint_id=savepoint.id)
    assert str(later[0].path) in str(refused.value) and "[input_gone]" in str(refused.value)
    assert (snapshot(platform.checkpoint_root / JOB), snapshot(platform.lake_root / "router")) == before
    assert not job_paths(platform, JOB).replay.exists()
    (decision,) = ledger.decisions(JOB, action="rewind")
    assert decision.outcome == f"refused: {refused.value}"
    assert decision.inputs["refused"][0]["cause"] == "input_gone"


def test_a_rewind_reads_replay_input_the_landing_zone_no_longer_holds_from_the_archive(
    spark: SparkSession, platform: PlatformConfig, ledger: Ledger, start_driver: Callable[..., Driver]
) -> None:
    settings_file = platform.conf_dir / "platform.yaml"
    settings = yaml.safe_load(settings_file.read_text())
    settings["archive"] = {"prefix": f"archive-{uuid.uuid4().hex[:8]}"}
    settings_file.write_text(yaml.safe_dump(settings))
    platform = load_platform(platform.conf_dir)
    landing = platform.landing_root / "events"
    for seed in range(2):
        write_batch(landing, 60, 0.05, seed)
    run_available_now(spark, platform, find_job(JOB, platform.conf_dir))
    savepoint = take_savepoint(platform, ledger, find_job(JOB, platform.conf_dir))
    later = [write_batch(landing, 60, 0.05, seed) for seed in range(2, 4)]
    run_available_now(spark, platform, find_job(JOB, platform.conf_dir))
    # The input arrived two hours ago and was archived; then the landing zone let one file go.
    arrived = time.time() - 2 * 3600
    for path in landing.glob("*.json"):
        os.utime(path, (arrived, arrived))
    archive.archive_landing(platform, ["events"], datetime.now(UTC))
    content = later[0].path.read_bytes()
    later[0].path.unlink()

    plan = rewind_job(
        Supervisor.for_platform(platform), JOB, reason="replay from the archive", savepoint_id=savepoint.id
    )

    assert [path for path, _, _ in plan.from_archive] == [later[0].path]
    assert later[0].path.read_bytes() == content
    run_until_read(start_driver("r-3"), platform, files=4)
    spec = find_job(JOB, platform.conf_dir)
    clean = batch_rows(spark, platform, spec, platform.landing_root)
    restated = spark.read.parquet(str(platform.lake_root / spec.pipeline.sink.path))
    assertDataFrameEqual(restated.select(*clean.columns), clean)


def test_two_rewinds_at_once_run_one_after_the_other(
    spark: SparkSession, platform: PlatformConfig, ledger: Ledger
) -> None:
    landing = platform.landing_root / "events"
    write_batch(landing, 40, 0.0, 1)
    run_available_now(spark, platform, find_job(JOB, platform.conf_dir))
    savepoint = take_savepoint(platform, ledger, find_job(JOB, platform.conf_dir))
    supervisor = Supervisor.for_platform(platform)
    errors: list[BaseException] = []

    def rewind() -> None:
        try:
            rewind_job(supervisor, JOB, reason="concurrent", savepoint_id=savepoint.id)
        except BaseException as exc:  # reported to the test thread
            errors.append(exc)

    threads = [threading.Thread(target=rewind) for _ in range(2)]
    with job_lock(platform, JOB, "a savepoint"):
        for thread in threads:
            thread.start()
        time.sleep(1.0)
        assert all(thread.is_alive() for thread in threads), "both rewinds wait for the lock"
        assert not ledger.decisions(JOB, action="rewind")
    for thread in threads:
        thread.join(60)
    assert not errors
    outcomes = [d.outcome for d in ledger.decisions(JOB, action="rewind")]
    assert len(outcomes) == 2 and all(
        o and o.startswith(f"rewound to batch {savepoint.batch_id}") for o in outcomes
    )
