"""The router under its supervision DAG, end to end: Airflow's dag.test(), real Spark, real
SQLite ledger, a real HTTP Slack stand-in. A driver killed with SIGKILL mid-stream is relaunched
and the sinks end exact."""

from __future__ import annotations

import os
import signal
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from airflow.dag_processing.dagbag import DagBag
from pyspark.sql import SparkSession

from jobs.router.transform import read_route
from ops.control.supervisor import stop_all_jobs
from ops.driver.telemetry import read_heartbeat
from ops.ledger.store import Ledger
from ops.spec.job import find_job
from ops.spec.pipelines import DEAD_LETTER_ROUTE
from ops.spec.platform import PlatformConfig
from synthetic.generator import GeneratedBatch, write_batch
from tests.support.drivers import edit_job, wait_for
from tests.support.platform import job_paths
from tests.support.slack import SlackReceiver

DAGS = Path(__file__).resolve().parents[2] / "dags"
EU = {"DE", "FR", "ES", "IT", "NL"}


def expected_routes(event: dict) -> list[str]:
    """The routes of conf/jobs/router.yaml, written out by hand for the test's expectations."""
    routes = []
    if event["event_type"] == "purchase" and (event.get("amount") or 0) > 0:
        routes.append("purchases")
    if event["event_type"] == "view" and event.get("country") in EU:
        routes.append("eu_views")
    if event.get("device") in ("ios", "android"):
        routes.append("mobile_activity")
    return routes


@pytest.fixture
def fast_router(platform_conf: PlatformConfig) -> Iterator[PlatformConfig]:
    """The router with a 1 s trigger, one file per batch and a short backoff; drivers stopped after."""

    def quick(spec: dict[str, Any]) -> None:
        spec["operations"]["trigger"] = {"interval_seconds": 1, "max_files_per_trigger": 1}
        spec["operations"]["restart"]["initial_backoff_seconds"] = 1

    edit_job(platform_conf, "router", quick)
    yield platform_conf
    stop_all_jobs(platform_conf)


def test_router_survives_kill_9_under_its_supervision_dag(
    fast_router: PlatformConfig, airflow_db: Path, slack_webhook: SlackReceiver, spark: SparkSession
) -> None:
    platform = fast_router
    landing = platform.landing_root / "events"
    sink = platform.lake_root / "router"
    ledger = Ledger.open(platform.resolved_ledger_url)
    batches: list[GeneratedBatch] = [write_batch(landing, 2000, 0.02, seed=seed) for seed in range(3)]
    bag = DagBag(dag_folder=str(DAGS))
    supervise = bag.get_dag("warden_supervise_router")

    def committed_rows() -> int:
        if not (sink / "_spark_metadata").exists():
            return 0
        return spark.read.parquet(str(sink)).count()

    def expected_rows() -> int:
        routed = sum(len(expected_routes(e)) for b in batches for e in b.events)
        return routed + sum(len(b.malformed) for b in batches)

    def supervised_until_running() -> bool:
        # One DAG run watches for at most a minute; a driver's cold start on a busy machine can take
        # longer, and then the next run (as the schedule would start it) sees the driver run.
        assert supervise.test().state == "success"
        return ledger.job("router").state == "RUNNING"

    # First pass launches the driver; the watch fires once it runs and the reacting pass records it.
    wait_for(supervised_until_running, 300, "the router RUNNING")
    wait_for(lambda: committed_rows() == expected_rows(), 120, "the first files to be routed")

    # More files, one per batch: kill -9 the driver while it works through them.
    batches += [write_batch(landing, 2000, 0.02, seed=seed) for seed in range(3, 9)]
    first_run = ledger.current_run("router")
    beat = job_paths(platform, "router").heartbeat
    start_batch = read_heartbeat(beat).batch_id
    wait_for(lambda: (read_heartbeat(beat).batch_id or 0) >= start_batch + 2, 60, "two more batches")
    os.kill(first_run.pid, signal.SIGKILL)

    # The next run sees the driver dead, pages, and relaunches after the backoff; the one after
    # sees the new driver run and resolves the page.
    assert supervise.test().state == "success"
    second_run = ledger.current_run("router")
    assert second_run is not None and second_run.run_id != first_run.run_id
    closed = next(r for r in ledger.runs("router") if r.run_id == first_run.run_id)
    assert closed.exit_reason.startswith("failed: driver process")
    wait_for(supervised_until_running, 300, "the relaunched router RUNNING")
    wait_for(lambda: committed_rows() == expected_rows(), 180, "all files to be routed after the restart")

    # Exact sinks: every valid event once in each matching route, every malformed line dead-lettered.
    spec = find_job("router", platform.conf_dir)
    for route in spec.pipeline.routes:
        ids = [row.event_id for row in read_route(spark, sink, route.name, ["event_id"]).collect()]
        expected = {e["event_id"] for b in batches for e in b.events if route.name in expected_routes(e)}
        assert Counter(ids) == Counter(expected), route.name
    dead = read_route(spark, sink, DEAD_LETTER_ROUTE, ["raw", "dead_letter_reason"]).collect()
    assert sorted(row.raw for row in dead) == sorted(m.line for b in batches for m in b.malformed)
    assert all(row.dead_letter_reason for row in dead)
    total_lines = sum(b.total for b in batches)
    filtered_out = sum(1 for b in batches for e in b.events if not expected_routes(e))
    fanned_out = sum(max(len(expected_routes(e)) - 1, 0) for b in batches for e in b.events)
    assert total_lines == committed_rows() - fanned_out + filtered_out

    # Slack got exactly one page and one resolution.
    texts = [message["text"] for message in slack_webhook.messages]
    assert len(texts) == 2, texts
    assert "router" in texts[0] and "CRITICAL" in texts[0] and "down" in texts[0].lower()
    assert texts[1].startswith("✅ resolved: router")
    actions = Counter(d.action for d in ledger.decisions("router"))
    assert actions["launch"] == 2 and actions["close_run"] == 1 and actions["detect"] >= 2

    # The suspend trigger form: the request is recorded, the next pass stops the driver gracefully.
    suspend = bag.get_dag("warden_suspend")
    assert suspend.test(run_conf={"job": "router", "reason": "maintenance window"}).state == "success"
    assert ledger.job("router").desired_state == "suspended"
    assert supervise.test().state == "success"
    assert ledger.current_run("router") is None
    assert ledger.runs("router")[0].exit_reason == "stopped: suspended"
    assert ledger.job("router").state == "SUSPENDED"
    assert ledger.job("router").backlog == 0
