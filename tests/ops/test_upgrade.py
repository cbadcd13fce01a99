"""Stateful upgrades under a real supervisor: real drivers, a real S3 server, a real Slack stand-in.

The router's new spec crash-loops once deployed and is rolled back to its savepoint. A team's code
change is a job file naming the new version's code directory (the code's digest makes it a new
config version): a version whose state key changed is refused by its dry run on a savepoint copy
before the running version stops, and the next one is deployed with the running version's state.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.testing import assertDataFrameEqual

from jobs.batch import batch_rows
from ops.control.supervisor import Supervisor, stop_all_jobs
from ops.driver.checkpoint import log_entries
from ops.exceptions import UpgradeError
from ops.ledger.store import Ledger
from ops.recovery.upgrade import upgrade
from ops.spec.job import find_job
from ops.spec.platform import PlatformConfig
from synthetic.generator import write_batch
from tests.support.drivers import caught_up, edit_job, edited_job_file, fast_trigger, files_read, wait_for
from tests.support.slack import SlackReceiver
from tests.support.team_jobs import (
    WINDOWED_JOB,
    WINDOWS_MODULE,
    windowed_job_spec,
    windows_closed,
    write_flush_event,
    write_hourly_events,
    write_team_job,
    write_windowed_code,
)

# The team's next versions of its windowed counts: one keyed by country and user (the state's key
# changes, so it cannot take over the running version's state), and one that leaves out
# zero-amount purchases (card checks), over the same state.
REKEYED_WINDOWS = WINDOWS_MODULE.replace(
    '            F.coalesce("country", F.lit("unknown")).alias("country"),\n',
    '            F.coalesce("country", F.lit("unknown")).alias("country"),\n            "user_id",\n',
)
PAID_WINDOWS = WINDOWS_MODULE.replace(
    'events.where(F.col("event_type") == "purchase")',
    'events.where((F.col("event_type") == "purchase") & (F.col("amount") > 0))',
)


def driver_report(supervisor: Supervisor, ledger: Ledger, job: str) -> str:
    """Whether the job's current driver lives, its committed batches and its log's last lines: what
    a wait for its output that timed out needs to be told apart (a dead, idle or slow driver)."""
    run = ledger.current_run(job)
    alive = run is not None and supervisor.backend.is_alive(run)
    platform = supervisor.platform
    commits = sorted(log_entries(platform.checkpoint_root / job / "commits"))
    # The newest run's log, the current one's while it runs (the ledger lists the newest first).
    newest = next(iter(ledger.runs(job)), None)
    log = Path(newest.log_path) if newest is not None and newest.log_path else None
    tail = (
        log.read_text(errors="replace").splitlines()[-20:] if log and log.is_file() else ["(no driver log)"]
    )
    return "\n".join(
        [
            f"driver alive: {alive}; committed batches: {commits}; files read: {files_read(platform, job)}",
            *tail,
        ]
    )


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

    new = edited_job_file(platform, "router", failing_purchases, tmp_path / "router-v2.yaml")

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


def test_a_teams_code_change_is_refused_when_its_state_cannot_follow_and_deployed_with_it_otherwise(
    platform_with_s3: PlatformConfig, ledger: Ledger, spark: SparkSession, tmp_path: Path
) -> None:
    platform, job = platform_with_s3, WINDOWED_JOB
    assert REKEYED_WINDOWS != WINDOWS_MODULE and PAID_WINDOWS != WINDOWS_MODULE
    write_team_job(platform, windowed_job_spec(write_windowed_code(tmp_path / "code-v1")))
    supervisor = Supervisor.for_platform(platform)

    def new_code(version: str, module: str) -> Path:
        def edit(spec: dict[str, Any]) -> None:
            spec["pipeline"]["code"] = str(write_windowed_code(tmp_path / f"code-{version}", module))

        return edited_job_file(platform, job, edit, tmp_path / f"{job}-{version}.yaml")

    try:
        # An hour of events: its last windows are still open, in the first version's state.
        write_hourly_events(platform.landing_root, 0)
        wait_for(lambda: supervisor.reconcile(job).state == "RUNNING", 300, "the first version RUNNING")
        wait_for(lambda: caught_up(platform, job, files=1), 180, "the first version's file")
        first = find_job(job, platform.conf_dir)
        running = ledger.current_run(job)
        assert running is not None
        before_upgrade = tmp_path / "landing-v1"
        shutil.copytree(platform.landing_root, before_upgrade)

        # The dry run loads the savepoint's state on a copy: the new key does not fit it.
        with pytest.raises(UpgradeError, match="STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE"):
            upgrade(supervisor, job, new_code("v2", REKEYED_WINDOWS), reason="per user", readiness_timeout=60)
        still = ledger.current_run(job)
        assert find_job(job, platform.conf_dir).config_version == first.config_version
        assert still is not None and still.run_id == running.run_id
        assert supervisor.backend.is_alive(still), "the running version must not be stopped"
        outcome = ledger.decisions(job, action="upgrade")[0].outcome
        assert outcome is not None and outcome.startswith("refused: ")

        # The next hour and a flush arrive once the new version runs: its readiness batches.
        def feed_the_new_version() -> None:
            wait_for(
                lambda: (ledger.current_run(job) or running).run_id != running.run_id, 120, "the new run"
            )
            write_hourly_events(platform.landing_root, 1)
            write_flush_event(platform.landing_root)

        feeder = threading.Thread(target=feed_the_new_version)
        feeder.start()
        result = upgrade(
            supervisor, job, new_code("v3", PAID_WINDOWS), reason="card checks", readiness_timeout=180
        )
        feeder.join()
        assert result.outcome == "upgraded", result.line()
        second = find_job(job, platform.conf_dir)
        assert second.config_version != first.config_version
        assert second.pipeline.code == str(tmp_path / "code-v3")
        try:
            wait_for(lambda: windows_closed(platform, job, files=3), 180, "the new version's windows")
        except AssertionError as timeout:
            raise AssertionError(f"{timeout}\n{driver_report(supervisor, ledger, job)}") from None
    finally:
        stop_all_jobs(platform)

    # The windows the first version left open in its state are appended by the second one, with the
    # first version's counts: the state came across. Each later window is the new code's.
    after_upgrade = tmp_path / "landing-v3" / "events"
    after_upgrade.mkdir(parents=True)
    shutil.copy2(platform.landing_root / "events" / "events-001.json", after_upgrade)
    by_first = batch_rows(spark, platform, first, before_upgrade)
    by_second = batch_rows(spark, platform, second, after_upgrade.parent).select(*by_first.columns)
    sink = spark.read.parquet(str(platform.lake_root / second.pipeline.sink.path))
    assertDataFrameEqual(sink.select(*by_first.columns), by_first.collect() + by_second.collect())
    assert [run.config_version for run in ledger.runs(job)] == [second.config_version, first.config_version]
