"""Stateful upgrades under a real supervisor: real drivers, a real S3 server, a real Slack stand-in."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pyspark.sql import SparkSession
from pyspark.testing import assertDataFrameEqual

from jobs.batch import batch_rows
from ops.control.supervisor import Supervisor, stop_all_jobs
from ops.exceptions import UpgradeError
from ops.ledger.store import Ledger
from ops.recovery.upgrade import upgrade
from ops.spec.job import find_job
from ops.spec.platform import PlatformConfig
from synthetic.generator import write_batch
from tests.support.drivers import caught_up, edit_job, fast_trigger, wait_for, write_sessions_input
from tests.support.slack import SlackReceiver


def candidate(platform: PlatformConfig, job: str, edit: Callable[[dict[str, Any]], None], path: Path) -> Path:
    spec = yaml.safe_load((platform.conf_dir / "jobs" / f"{job}.yaml").read_text())
    edit(spec)
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


@pytest.fixture
def supervised(platform_with_s3: PlatformConfig, slack_webhook: SlackReceiver) -> Iterator[Supervisor]:
    def quick_restarts(spec: dict[str, Any]) -> None:
        fast_trigger(spec)
        spec["operations"]["restart"]["initial_backoff_seconds"] = 1

    edit_job(platform_with_s3, "router", quick_restarts)
    supervisor = Supervisor.for_platform(platform_with_s3)
    yield supervisor
    stop_all_jobs(platform_with_s3)


def test_an_upgrade_that_crash_loops_is_rolled_back_to_its_savepoint(
    supervised: Supervisor, ledger: Ledger, slack_webhook: SlackReceiver, spark: SparkSession, tmp_path: Path
) -> None:
    platform = supervised.platform
    landing = platform.landing_root / "events"
    for seed in range(4):
        write_batch(landing, 50, 0.0, seed)
    supervised.request("router", "resume", "test")
    supervised.reconcile("router")
    wait_for(lambda: caught_up(platform, "router", files=4), 120, "the first files")
    old_version = find_job("router", platform.conf_dir).config_version
    old_run = ledger.current_run("router")

    def failing_purchases(spec: dict[str, Any]) -> None:
        # Valid to the analyzer (so the dry run passes), fails on the first row it routes.
        spec["pipeline"]["routes"][0]["filter"] = "raise_error(concat('bad version ', event_id)) IS NULL"

    new = candidate(platform, "router", failing_purchases, tmp_path / "router-v2.yaml")

    # New input arrives once the new version runs, so it is the one to meet it and crash.
    def feed_the_new_version() -> None:
        wait_for(
            lambda: (ledger.current_run("router") or old_run).run_id != old_run.run_id, 120, "the new version"
        )
        for seed in range(4, 6):
            write_batch(landing, 50, 0.0, seed)

    feeder = threading.Thread(target=feed_the_new_version)
    feeder.start()
    result = upgrade(supervised, "router", new, reason="test rollback", readiness_timeout=120)
    feeder.join()

    assert result.outcome == "rolled back" and "did not stay up" in result.detail
    assert find_job("router", platform.conf_dir).config_version == old_version
    wait_for(lambda: caught_up(platform, "router", files=6), 180, "the old version to catch up")
    spec = find_job("router", platform.conf_dir)
    sink = spark.read.parquet(str(platform.lake_root / spec.pipeline.sink.path))
    clean = batch_rows(spark, platform, spec, platform.landing_root)
    assertDataFrameEqual(sink.select(*clean.columns), clean)
    pages = [m["text"] for m in slack_webhook.messages if "upgrade rolled back" in m["text"]]
    assert len(pages) == 1 and "CRITICAL" in pages[0]
    assert ledger.decisions("router", action="upgrade")[0].outcome.startswith("rolled back")


@pytest.mark.spark
def test_an_incompatible_upgrade_is_refused_before_the_running_job_stops(
    platform_with_s3: PlatformConfig, ledger: Ledger, tmp_path: Path
) -> None:
    platform = platform_with_s3
    edit_job(platform, "sessionizer", fast_trigger)
    supervisor = Supervisor.for_platform(platform)
    try:
        for seed in range(2):
            write_sessions_input(platform, seed)
        supervisor.request("sessionizer", "resume", "test")
        supervisor.reconcile("sessionizer")
        wait_for(lambda: caught_up(platform, "sessionizer", files=2), 180, "the sessionizer")
        running = ledger.current_run("sessionizer")
        old_version = find_job("sessionizer", platform.conf_dir).config_version

        # Sessions keyed by user and device: the state's key schema changes.
        def rekeyed(spec: dict[str, Any]) -> None:
            spec["pipeline"]["key_fields"] = ["user_id", "device"]

        new = candidate(platform, "sessionizer", rekeyed, tmp_path / "sessionizer-v2.yaml")
        # A device is only a key field if every source has it as a key type: it is a string.
        with pytest.raises(UpgradeError, match="STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE"):
            upgrade(supervisor, "sessionizer", new, reason="key by device too", readiness_timeout=60)

        assert find_job("sessionizer", platform.conf_dir).config_version == old_version
        still = ledger.current_run("sessionizer")
        assert still is not None and running is not None and still.run_id == running.run_id
        assert supervisor.backend.is_alive(still), "the running version must not be stopped"
        outcome = ledger.decisions("sessionizer", action="upgrade")[0].outcome
        assert outcome is not None and outcome.startswith("refused: ")
    finally:
        stop_all_jobs(platform)
