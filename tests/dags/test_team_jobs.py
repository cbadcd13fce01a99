"""A team's own jobs under their supervision DAGs, as the platform's own jobs are: Airflow's
dag.test(), real Spark drivers, a real SQLite ledger and a real HTTP Slack stand-in. A stateless
python job, a stateful one (windowed counts; both with their packages in a directory outside the
repository) and a SQL job (a stream-stream join) each have a driver killed with SIGKILL
mid-stream; it is relaunched, and the sink ends equal to a batch run of the job over the same
input. The stateful job's open windows are in its state when the driver is killed: the relaunched
driver must restore them, and a last event far later closes them all."""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from airflow.dag_processing.dagbag import DagBag
from pyspark.sql import SparkSession
from pyspark.testing import assertDataFrameEqual

from jobs.batch import batch_rows
from ops.control.supervisor import stop_all_jobs
from ops.driver.telemetry import read_heartbeat
from ops.ledger.store import Ledger
from ops.spec.job import find_job
from ops.spec.platform import PlatformConfig
from synthetic.generator import write_batch
from tests.support.drivers import caught_up, wait_for
from tests.support.platform import job_paths
from tests.support.slack import SlackReceiver
from tests.support.team_jobs import (
    SQL_JOB,
    TEAM_JOB,
    WINDOWED_JOB,
    sql_job_spec,
    team_job_spec,
    windowed_job_spec,
    windows_closed,
    write_conversions_input,
    write_flush_event,
    write_hourly_events,
    write_team_code,
    write_team_job,
    write_windowed_code,
)

DAGS = Path(__file__).resolve().parents[2] / "dags"


@dataclass(frozen=True)
class TeamCase:
    """A team's job: its file (given a directory for its code), how to write input number `seed`,
    which returns how many files it added to the job's first source, and for a job with windows
    how to close them all (a file of one event far later)."""

    job: str
    spec: Callable[[Path], dict[str, Any]]
    write_input: Callable[[PlatformConfig, int], int]
    flush: Callable[[PlatformConfig], object] | None = None


def _scored_events(platform: PlatformConfig, seed: int) -> int:
    write_batch(platform.landing_root / "events", 500, 0.02, seed=seed)
    return 1


def _hourly_events(platform: PlatformConfig, seed: int) -> int:
    write_hourly_events(platform.landing_root, seed)
    return 1


CASES = [
    TeamCase(TEAM_JOB, lambda tmp: team_job_spec(write_team_code(tmp / "team-code")), _scored_events),
    TeamCase(
        WINDOWED_JOB,
        lambda tmp: windowed_job_spec(write_windowed_code(tmp / "team-code")),
        _hourly_events,
        flush=lambda platform: write_flush_event(platform.landing_root),
    ),
    TeamCase(
        SQL_JOB, lambda _: sql_job_spec(), lambda p, seed: write_conversions_input(p.landing_root, seed)
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.job)
def test_a_team_job_survives_kill_9_under_its_supervision_dag_and_its_sink_is_exact(
    case: TeamCase,
    platform_conf: PlatformConfig,
    airflow_db: Path,
    slack_webhook: SlackReceiver,
    spark: SparkSession,
    tmp_path: Path,
) -> None:
    platform, job = platform_conf, case.job
    spec = case.spec(tmp_path)
    spec["operations"]["restart"] = {"initial_backoff_seconds": 1}
    write_team_job(platform, spec)
    ledger = Ledger.open(platform.resolved_ledger_url)
    files = sum(case.write_input(platform, seed) for seed in range(2))
    supervise = DagBag(dag_folder=str(DAGS)).get_dag(f"warden_supervise_{job}")

    def supervised_until_running() -> bool:
        assert supervise.test().state == "success"
        return ledger.job(job).state == "RUNNING"

    try:
        wait_for(supervised_until_running, 300, f"{job} RUNNING")
        wait_for(lambda: caught_up(platform, job, files), 180, "the first files read")

        files += sum(case.write_input(platform, seed) for seed in range(2, 6))
        first_run = ledger.current_run(job)
        beat = job_paths(platform, job).heartbeat
        start_batch = read_heartbeat(beat).batch_id
        wait_for(lambda: (read_heartbeat(beat).batch_id or 0) >= start_batch + 2, 60, "two more batches")
        os.kill(first_run.pid, signal.SIGKILL)

        assert supervise.test().state == "success"
        second_run = ledger.current_run(job)
        assert second_run is not None and second_run.run_id != first_run.run_id
        wait_for(supervised_until_running, 300, f"the relaunched {job} RUNNING")
        wait_for(lambda: caught_up(platform, job, files), 180, "every file read after the restart")
        batch_landing = platform.landing_root
        if case.flush is not None:
            # The batch run over the files before the flush: the stream never closes its window.
            batch_landing = platform.runtime_root / "batch-landing"
            shutil.copytree(platform.landing_root, batch_landing)
            case.flush(platform)
            files += 1
            wait_for(lambda: windows_closed(platform, job, files), 180, "the windows closed by the flush")
    finally:
        stop_all_jobs(platform)

    loaded = find_job(job, platform.conf_dir)
    expected = batch_rows(spark, platform, loaded, batch_landing)
    sink = spark.read.parquet(str(platform.lake_root / loaded.pipeline.sink.path))
    assert expected.count() > 0
    assertDataFrameEqual(sink.select(*expected.columns), expected)
    texts = [message["text"] for message in slack_webhook.messages]
    assert len(texts) == 2 and job in texts[0] and texts[1].startswith(f"✅ resolved: {job}"), texts
    assert {run.config_version for run in ledger.runs(job)} == {loaded.config_version}
