"""The restatement invariant, differentially: after a wrong version ran and the job was rewound to
the savepoint taken before it and replayed with the right version, the sink equals, row for row,
one clean run of the right version over the same input (docs/architecture.md §5).

Runs in this process on the session's Spark (a stream per phase, one landing file per source per
batch), so every job and checkpoint format can be covered in seconds; `test_rewind.py` does the
same with real driver processes. The stateful case is the sessionizer (RocksDB state, checkpoint
format v1 and v2): its wrong version has a 5-minute gap, so it closes sessions the right version
keeps open, and the restated sink must still equal the clean run. A team's jobs, their code
outside the repository, get a deploy of buggy code and are restated with the fixed code: the
stateless python job, the stateful one (windowed counts: the state at the savepoint holds the
windows still open) and the SQL job (a stream-stream join: its code is its query).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.testing import assertDataFrameEqual

from jobs.runner import plan_job
from jobs.runtime import ShutdownRequest, replay_pending, with_trigger
from ops.control.supervisor import Supervisor
from ops.driver.listener import TelemetryListener
from ops.driver.session import state_conf
from ops.exceptions import RewindError
from ops.ledger.store import Ledger
from ops.recovery.rewind import rewind_job
from ops.savepoints.store import take_savepoint
from ops.spec.job import find_job
from ops.spec.platform import PlatformConfig
from synthetic.generator import write_batch
from tests.support.drivers import caught_up, edit_job, write_sessions_input
from tests.support.platform import job_paths, write_conf
from tests.support.team_jobs import (
    BUGGY_SCORING_MODULE,
    BUGGY_WINDOWS_MODULE,
    CONVERSIONS_QUERY,
    SQL_JOB,
    TEAM_JOB,
    WINDOWED_JOB,
    install_team_job,
    install_windowed_job,
    sql_job_spec,
    write_conversions_input,
    write_hourly_events,
    write_team_code,
    write_team_job,
    write_windowed_code,
)


@dataclass(frozen=True)
class Case:
    """A job, how to write its input file number `seed`, and a deliberately wrong version of it."""

    job: str
    write_input: Callable[[PlatformConfig, int], object]
    wrong_version: Callable[[dict[str, Any]], None]
    checkpoint_format: int | None = None
    # Writes the job's file when it is not one of the platform's own (a team's job).
    install: Callable[[PlatformConfig, Path], object] | None = None
    # The backlog the savepoints are taken in, read a file per batch: two savepoints must fall
    # before its last batch, and each rewind replays the batches after its savepoint. A router
    # batch takes a fraction of a second, a stateful sessionizer batch seconds.
    backlog_files: int = 6
    # Batches (a file each) of the right version before the savepoint, and of the wrong one after
    # it: two of each put state (the sessionizer's open sessions, the windowed job's open windows)
    # in the savepoint and wrong output after it, which the rewind replays. A stateful batch costs
    # seconds, a replayed one a query start as well; the join needs one of each (four state
    # stores a partition, and each data batch followed by a batch that evicts by the watermark).
    batches_per_version: int = 2


def _router_input(platform: PlatformConfig, seed: int) -> object:
    return write_batch(platform.landing_root / "events", 80, 0.05, seed, file_name=f"events-{seed:03d}.json")


def _router_wrong(spec: dict[str, Any]) -> None:
    spec["pipeline"]["routes"][0]["filter"] = "event_type = 'purchase'"


def _sessions_wrong(spec: dict[str, Any]) -> None:
    spec["pipeline"]["gap_minutes"] = 5


def _team_code_wrong(spec: dict[str, Any]) -> None:
    """A deploy of the team's code with a bug: the job file points at it."""
    buggy = Path(spec["pipeline"]["code"]).parent / "buggy-code"
    spec["pipeline"]["code"] = str(write_team_code(buggy, BUGGY_SCORING_MODULE))


def _install_team_job(platform: PlatformConfig, tmp_path: Path) -> object:
    return install_team_job(platform, tmp_path / "team-code")


def _hourly_input(platform: PlatformConfig, seed: int) -> object:
    return write_hourly_events(platform.landing_root, seed)


def _windowed_code_wrong(spec: dict[str, Any]) -> None:
    """A deploy of the windowed job's code with a bug: the job file points at it."""
    buggy = Path(spec["pipeline"]["code"]).parent / "buggy-code"
    spec["pipeline"]["code"] = str(write_windowed_code(buggy, BUGGY_WINDOWS_MODULE))


def _install_windowed_job(platform: PlatformConfig, tmp_path: Path) -> object:
    return install_windowed_job(platform, tmp_path / "team-code")


def _conversions_input(platform: PlatformConfig, seed: int) -> object:
    return write_conversions_input(platform.landing_root, seed)


def _query_wrong(spec: dict[str, Any]) -> None:
    """A deploy of the SQL job's query with a bug: plays within 10 minutes, not the hour."""
    spec["pipeline"]["query"] = CONVERSIONS_QUERY.replace("INTERVAL 1 HOUR", "INTERVAL 10 MINUTES")


def _install_sql_job(platform: PlatformConfig, tmp_path: Path) -> object:
    return write_team_job(platform, sql_job_spec())


CASES = [
    Case("router", _router_input, _router_wrong, backlog_files=8),
    Case("sessionizer", write_sessions_input, _sessions_wrong, checkpoint_format=1),
    Case("sessionizer", write_sessions_input, _sessions_wrong, checkpoint_format=2),
    Case(TEAM_JOB, _router_input, _team_code_wrong, install=_install_team_job),
    Case(
        WINDOWED_JOB,
        _hourly_input,
        _windowed_code_wrong,
        install=_install_windowed_job,
        backlog_files=5,
    ),
    Case(
        SQL_JOB,
        _conversions_input,
        _query_wrong,
        install=_install_sql_job,
        backlog_files=5,
        batches_per_version=1,
    ),
]


# A savepoint taken mid-backlog restores through the same rewind whatever the job computes: the
# backlog test runs a stateless job, a stateful one on each kind of state (RocksDB in its default
# checkpoint format, and a team's SQL join), not every restated job (the restate test does).
BACKLOG_CASES = [
    case
    for case in CASES
    if (case.job, case.checkpoint_format) in {("router", None), ("sessionizer", 2), (SQL_JOB, None)}
]


def one_file_per_batch(checkpoint_format: int | None) -> Callable[[dict[str, Any]], None]:
    def edit(spec: dict[str, Any]) -> None:
        spec["operations"]["trigger"] = {"interval_seconds": 1, "max_files_per_trigger": 1}
        if checkpoint_format is not None:
            spec["operations"]["checkpoint_format"] = checkpoint_format

    return edit


def run_available(spark: SparkSession, platform: PlatformConfig, job: str) -> None:
    """Process the landing files not read yet, one per batch, after replaying any queued batches."""
    spec = find_job(job, platform.conf_dir)
    for key, value in state_conf(spec).items():
        spark.conf.set(key, value)
    plan = plan_job(platform, spec)
    replay_pending(
        spark,
        platform,
        spec,
        plan,
        TelemetryListener(job_paths(platform, job).heartbeat, job, "test"),
        ShutdownRequest(),
    )
    query = with_trigger(plan, spec, available_now=True)(spark).start()
    query.awaitTermination()
    assert query.exception() is None


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.job}-v{c.checkpoint_format or 'default'}")
def test_restated_sink_equals_a_clean_run_of_the_right_version(
    case: Case, spark: SparkSession, platform_with_s3: PlatformConfig, ledger: Ledger, tmp_path: Path
) -> None:
    platform, job = platform_with_s3, case.job
    if case.install is not None:
        case.install(platform, tmp_path)
    edit_job(platform, job, one_file_per_batch(case.checkpoint_format))
    right_spec = (platform.conf_dir / "jobs" / f"{job}.yaml").read_text()
    # A file per batch: batches of the right version, as many of the wrong one, one after.
    versions = case.batches_per_version
    for seed in range(versions):
        case.write_input(platform, seed)
    run_available(spark, platform, job)
    savepoint = take_savepoint(platform, ledger, find_job(job, platform.conf_dir))

    edit_job(platform, job, case.wrong_version)
    for seed in range(versions, 2 * versions):
        case.write_input(platform, seed)
    run_available(spark, platform, job)

    (platform.conf_dir / "jobs" / f"{job}.yaml").write_text(right_spec)
    plan = rewind_job(
        Supervisor.for_platform(platform), job, reason="wrong version", savepoint_id=savepoint.id
    )
    assert len(plan.replay_batches) >= versions and plan.sink_rows > 0
    case.write_input(platform, 2 * versions)
    run_available(spark, platform, job)

    clean_conf = tmp_path / "clean" / "conf"
    write_conf(clean_conf, tmp_path / "clean" / "runtime")
    clean = platform.model_copy(
        update={
            "conf_dir": clean_conf,
            "storage": platform.storage.model_copy(
                update={
                    "lake_root": tmp_path / "clean" / "lake",
                    "checkpoint_root": tmp_path / "clean" / "checkpoints",
                }
            ),
        }
    )
    (clean_conf / "jobs" / f"{job}.yaml").write_text(right_spec)
    run_available(spark, clean, job)

    sink = find_job(job, platform.conf_dir).pipeline.sink.path
    restated = spark.read.parquet(str(platform.lake_root / sink))
    expected = spark.read.parquet(str(clean.lake_root / sink))
    assert expected.count() > 0
    assertDataFrameEqual(restated.select(*expected.columns), expected)


@pytest.mark.parametrize("case", BACKLOG_CASES, ids=lambda c: f"{c.job}-v{c.checkpoint_format or 'default'}")
def test_savepoints_taken_during_a_backlog_each_restore_the_same_output(
    case: Case, spark: SparkSession, platform_with_s3: PlatformConfig, ledger: Ledger, tmp_path: Path
) -> None:
    platform, job = platform_with_s3, case.job
    if case.install is not None:
        case.install(platform, tmp_path)
    edit_job(platform, job, one_file_per_batch(case.checkpoint_format))
    for seed in range(case.backlog_files):
        case.write_input(platform, seed)
    spec = find_job(job, platform.conf_dir)
    for key, value in state_conf(spec).items():
        spark.conf.set(key, value)
    query = with_trigger(plan_job(platform, spec), spec, available_now=False)(spark).start()
    savepoints = []
    try:
        while len(savepoints) < 2:
            # Each savepoint at a batch after the one before: two restore points inside the backlog.
            progress = query.lastProgress
            if progress and progress["batchId"] > (savepoints[-1].batch_id if savepoints else 0):
                savepoints.append(take_savepoint(platform, ledger, find_job(job, platform.conf_dir)))
                assert query.isActive, "the job never stops for a savepoint"
            time.sleep(0.2)
        # Until no batch, not even a watermark-only one, is left to run: the snapshot of the sink
        # below must be the whole output, and stopping must not interrupt a batch.
        query.processAllAvailable()
        assert caught_up(platform, job, files=case.backlog_files)
    finally:
        query.stop()
    assert len({sp.batch_id for sp in savepoints}) == 2 and savepoints[-1].batch_id < case.backlog_files - 1
    sink = platform.lake_root / spec.pipeline.sink.path
    original = spark.read.parquet(str(sink)).collect()

    # Newest first: rewinding to a savepoint supersedes the newer one (it lists deleted files).
    supervisor = Supervisor.for_platform(platform)
    for savepoint in reversed(savepoints):
        plan = rewind_job(supervisor, job, reason="consistency", savepoint_id=savepoint.id)
        assert plan.replay_batches.start == savepoint.batch_id + 1
        run_available(spark, platform, job)
        assertDataFrameEqual(spark.read.parquet(str(sink)), original)
    assert {sp.id: sp.status for sp in ledger.savepoints(job)} == {
        savepoints[0].id: "complete",
        savepoints[1].id: "superseded",
    }
    with pytest.raises(RewindError, match="is superseded"):
        rewind_job(supervisor, job, reason="superseded", savepoint_id=savepoints[1].id)
