"""A job of a team's own code (`kind: python`, its package in a directory outside the repository)
under its supervision DAG, as the platform's own jobs are: Airflow's dag.test(), real Spark drivers,
a real SQLite ledger and a real HTTP Slack stand-in. A driver killed with SIGKILL mid-stream is
relaunched and the sink ends exact."""

from __future__ import annotations

import os
import signal
from collections import Counter
from pathlib import Path

from airflow.dag_processing.dagbag import DagBag
from pyspark.sql import SparkSession

from ops.control.supervisor import stop_all_jobs
from ops.driver.telemetry import read_heartbeat
from ops.ledger.store import Ledger
from ops.spec.platform import PlatformConfig
from synthetic.generator import GeneratedBatch, write_batch
from tests.support.drivers import wait_for
from tests.support.platform import job_paths
from tests.support.slack import SlackReceiver
from tests.support.team_jobs import LARGE_AMOUNT, TEAM_JOB, team_job_spec, write_team_code, write_team_job

DAGS = Path(__file__).resolve().parents[2] / "dags"
JOB = TEAM_JOB


def test_a_team_job_survives_kill_9_under_its_supervision_dag_and_its_sink_is_exact(
    platform_conf: PlatformConfig,
    airflow_db: Path,
    slack_webhook: SlackReceiver,
    spark: SparkSession,
    tmp_path: Path,
) -> None:
    platform = platform_conf
    spec = team_job_spec(write_team_code(tmp_path / "team-code"))
    spec["operations"]["restart"] = {"initial_backoff_seconds": 1}
    write_team_job(platform, spec)
    landing, sink = platform.landing_root / "events", platform.lake_root / JOB
    ledger = Ledger.open(platform.resolved_ledger_url)
    batches: list[GeneratedBatch] = [write_batch(landing, 500, 0.02, seed=seed) for seed in range(2)]
    supervise = DagBag(dag_folder=str(DAGS)).get_dag(f"warden_supervise_{JOB}")

    def sink_rows() -> list[dict]:
        if not (sink / "_spark_metadata").exists():
            return []
        return [row.asDict() for row in spark.read.parquet(str(sink)).collect()]

    def expected_rows() -> int:
        purchases = sum(e["event_type"] == "purchase" for b in batches for e in b.events)
        return purchases + sum(len(b.malformed) for b in batches)

    def supervised_until_running() -> bool:
        assert supervise.test().state == "success"
        return ledger.job(JOB).state == "RUNNING"

    wait_for(supervised_until_running, 300, "the team's job RUNNING")
    wait_for(lambda: len(sink_rows()) == expected_rows(), 120, "the first files to be scored")

    try:
        batches += [write_batch(landing, 500, 0.02, seed=seed) for seed in range(2, 8)]
        first_run = ledger.current_run(JOB)
        beat = job_paths(platform, JOB).heartbeat
        start_batch = read_heartbeat(beat).batch_id
        wait_for(lambda: (read_heartbeat(beat).batch_id or 0) >= start_batch + 2, 60, "two more batches")
        os.kill(first_run.pid, signal.SIGKILL)

        assert supervise.test().state == "success"
        second_run = ledger.current_run(JOB)
        assert second_run is not None and second_run.run_id != first_run.run_id
        wait_for(supervised_until_running, 300, "the relaunched team's job RUNNING")
        wait_for(lambda: len(sink_rows()) == expected_rows(), 180, "every file scored after the restart")
    finally:
        stop_all_jobs(platform)

    rows = sink_rows()
    scored = Counter(row["event_id"] for row in rows if row["size"] != "dead_letter")
    expected = Counter(e["event_id"] for b in batches for e in b.events if e["event_type"] == "purchase")
    assert scored == expected
    assert all(
        (row["size"] == "large") == (row["amount"] >= LARGE_AMOUNT)
        for row in rows
        if row["size"] != "dead_letter"
    )
    dead = sorted(row["raw"] for row in rows if row["size"] == "dead_letter")
    assert dead == sorted(m.line for b in batches for m in b.malformed)
    texts = [message["text"] for message in slack_webhook.messages]
    assert len(texts) == 2 and JOB in texts[0] and texts[1].startswith(f"✅ resolved: {JOB}"), texts
    runs = ledger.runs(JOB)
    assert {run.config_version for run in runs} == {ledger.job(JOB).config_version}
