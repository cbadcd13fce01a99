"""The `warden_savepoint` and `warden_restate` trigger forms end to end: Airflow's dag.test(), real
drivers launched by the supervisor, a real S3 server and a real Slack stand-in; and `warden
restate` refused on a running job, from the command line and from the form."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from airflow.dag_processing.dagbag import DagBag
from pyspark.sql import SparkSession
from pyspark.testing import assertDataFrameEqual

from jobs.batch import batch_rows
from ops.control.supervisor import Supervisor, stop_all_jobs
from ops.driver.telemetry import read_heartbeat
from ops.driver.udf_versions import version_of
from ops.ledger.store import Ledger
from ops.spec.job import find_job
from ops.spec.platform import CONF_DIR_ENV, PlatformConfig
from synthetic.generator import write_batch
from tests.support.drivers import REPO_ROOT, caught_up, edit_job, fast_trigger, wait_for
from tests.support.platform import job_paths
from tests.support.slack import SlackReceiver

DAGS = Path(__file__).resolve().parents[2] / "dags"
RIGHT = "event_type = 'purchase' AND amount > 0"
WRONG = "event_type = 'purchase'"
# The purchases route's logic as a script UDF the first test edits while the job runs.
RIGHT_UDF = "def purchase(event_type, amount):\n    return (event_type == 'purchase') & (amount > 0)\n"
WRONG_UDF = "def purchase(event_type, amount):\n    return event_type == 'purchase'\n"


def purchase_filter(expression: str) -> Callable[[dict[str, Any]], None]:
    def edit(spec: dict[str, Any]) -> None:
        fast_trigger(spec)
        spec["operations"]["restart"]["initial_backoff_seconds"] = 1
        spec["pipeline"]["routes"][0]["filter"] = expression

    return edit


def purchase_udf(spec: dict[str, Any]) -> None:
    purchase_filter("purchase(event_type, amount)")(spec)
    spec["pipeline"]["udfs"] = [
        {"name": "purchase", "file": "purchase.py", "function": "purchase", "returns": "boolean"}
    ]


@pytest.fixture
def platform(platform_with_s3: PlatformConfig) -> Iterator[PlatformConfig]:
    edit_job(platform_with_s3, "router", purchase_filter(RIGHT))
    yield platform_with_s3
    stop_all_jobs(platform_with_s3)


def test_restate_form_dry_run_then_restate_replaces_a_wrong_versions_output(
    platform: PlatformConfig, ledger: Ledger, slack_webhook: SlackReceiver, spark: SparkSession
) -> None:
    """The wrong version is an edit of the route's script UDF while the job runs; the restatement
    replays its batches with the file as fixed since."""
    udf_file = platform.conf_dir / "jobs" / "purchase.py"
    udf_file.write_text(RIGHT_UDF)
    edit_job(platform, "router", purchase_udf)
    supervisor = Supervisor.for_platform(platform)
    landing = platform.landing_root / "events"
    for seed in range(4):
        write_batch(landing, 60, 0.05, seed)
    supervisor.request("router", "resume", "test")
    supervisor.reconcile("router")
    wait_for(lambda: caught_up(platform, "router", files=4), 120, "the right version")
    dags = DagBag(dag_folder=str(DAGS))
    form = {"job": "router", "reason": "before the deploy"}
    assert dags.get_dag("warden_savepoint").test(run_conf=form).state == "success"
    (savepoint,) = ledger.savepoints("router")
    assert ledger.current_run("router") is not None, "the job keeps running through a savepoint"

    udf_file.write_text(WRONG_UDF)
    for seed in range(4, 8):
        write_batch(landing, 60, 0.05, seed)
    wait_for(lambda: caught_up(platform, "router", files=8), 120, "the wrong version")
    udf_file.write_text(RIGHT_UDF)

    restate = dags.get_dag("warden_restate")
    form = {"job": "router", "savepoint": savepoint.id, "reason": "zero-amount purchases routed"}
    assert restate.test(run_conf={**form, "dry_run": True}).state == "success"
    assert not job_paths(platform, "router").replay.exists() and ledger.current_run("router") is not None

    assert restate.test(run_conf={**form, "dry_run": False}).state == "success"
    spec = find_job("router", platform.conf_dir)
    sink = spark.read.parquet(str(platform.lake_root / spec.pipeline.sink.path))
    clean = batch_rows(spark, platform, spec, platform.landing_root)
    assertDataFrameEqual(sink.select(*clean.columns), clean)
    assert ledger.job("router").desired_state == "running" and ledger.current_run("router") is not None

    decision = ledger.decisions("router", action="restate")[0]
    assert decision.outcome is not None and decision.outcome.startswith("restated router from savepoint")
    summaries = [m["text"] for m in slack_webhook.messages if "restated" in m["text"]]
    assert len(summaries) == 1 and "rows" in summaries[0] and "before" in summaries[0]
    assert f"script UDFs as installed now: purchase {version_of(RIGHT_UDF.encode())}" in summaries[0]
    assert len(ledger.runs("router")) == 2, "the wrong version ran without a restart"

    # The scheduled restatement finds the newest savepoint older than its lookback by itself.
    edit_job(
        platform,
        "router",
        lambda spec: spec["operations"].update(restatement={"cron": "0 3 * * *", "lookback_hours": 0.0001}),
    )
    scheduled = DagBag(dag_folder=str(DAGS)).get_dag("warden_restate_router")
    assert scheduled.test(run_conf={"dry_run": True}).state == "success"


def warden(platform: PlatformConfig, *args: str) -> subprocess.CompletedProcess[str]:
    """The `warden` command line in a process of its own, on the test's platform."""
    return subprocess.run(
        [sys.executable, "-m", "ops.cli", *args],
        cwd=REPO_ROOT,
        env={**os.environ, CONF_DIR_ENV: str(platform.conf_dir)},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_a_restate_whose_replay_input_is_gone_is_refused_and_the_running_driver_is_untouched(
    platform: PlatformConfig, ledger: Ledger, capfd: pytest.CaptureFixture[str]
) -> None:
    """Hardening 8, the scenario as found: `warden restate` on a running job whose replay input is
    gone stopped the job, then refused, and left it suspended with no ledger row."""
    supervisor = Supervisor.for_platform(platform)
    landing = platform.landing_root / "events"
    for seed in range(2):
        write_batch(landing, 60, 0.05, seed)
    supervisor.request("router", "resume", "test")
    supervisor.reconcile("router")
    wait_for(lambda: caught_up(platform, "router", files=2), 240, "the first batches")
    savepoint = supervisor.savepoint("router", "before the bug").savepoint
    later = [write_batch(landing, 60, 0.05, seed) for seed in range(2, 4)]
    wait_for(lambda: caught_up(platform, "router", files=4), 120, "the batches after the savepoint")
    later[0].path.unlink()
    run = ledger.current_run("router")
    assert run is not None and run.pid is not None

    refused = warden(platform, "restate", "router", "--savepoint", savepoint.id, "--reason", "bad filter")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert str(later[0].path) in refused.stderr

    form = {"job": "router", "savepoint": savepoint.id, "reason": "bad filter", "dry_run": False}
    capfd.readouterr()
    dag_run = DagBag(dag_folder=str(DAGS)).get_dag("warden_restate").test(run_conf=form)
    assert dag_run.state == "failed"
    task_output = "".join(capfd.readouterr())

    os.kill(run.pid, 0)  # the driver is alive
    current = ledger.current_run("router")
    assert current is not None and current.run_id == run.run_id
    decisions = warden(platform, "decisions", "router")
    refusals = [line for line in decisions.stdout.splitlines() if "refused: restate of 'router'" in line]
    assert len(refusals) == 2 and all("[input_gone]" in line for line in refusals), decisions.stdout
    assert [d.outcome for d in ledger.decisions("router", action="stop")] == []
    assert ledger.operation("router") is None
    job = ledger.job("router")
    assert job is not None and job.desired_state == "running"
    assert "[input_gone]" in refused.stderr
    assert "RewindError" in task_output and "[input_gone]" in task_output

    # It goes on reading new input, on the same run.
    before = read_heartbeat(job_paths(platform, "router").heartbeat)
    assert before is not None and before.batch_id is not None
    write_batch(landing, 60, 0.05, 4)
    wait_for(lambda: caught_up(platform, "router", files=5), 120, "a batch after the refusals")

    def advanced() -> bool:
        # The heartbeat of a batch is written just after its commit.
        after = read_heartbeat(job_paths(platform, "router").heartbeat)
        return after is not None and after.run_id == run.run_id and (after.batch_id or 0) > before.batch_id

    wait_for(advanced, 60, "the same run's heartbeat to advance")
