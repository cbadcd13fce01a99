"""The `warden_backfill` trigger form end to end: Airflow's dag.test(), the Spark provider's real
SparkSubmitOperator (spark-submit from the venv, against the platform's master), a real S3 archive."""

from __future__ import annotations

import gc
import json
import os
import random
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from airflow.dag_processing.dagbag import DagBag
from pyspark.sql import SparkSession

from ops import archive
from ops.clock import utcnow
from ops.spec.platform import PlatformConfig, load_platform
from synthetic.generator import make_event
from synthetic.scenarios import write_json_lines
from tests.support.drivers import edit_job

DAGS = Path(__file__).resolve().parents[2] / "dags"


@pytest.fixture
def platform(
    platform_with_s3: PlatformConfig, warehouse_platform: PlatformConfig, monkeypatch: pytest.MonkeyPatch
) -> PlatformConfig:
    """S3 for the archive, a warehouse to publish into, the router with one route (few audits)."""
    edit_job(
        platform_with_s3,
        "router",
        lambda spec: spec["pipeline"].update(routes=spec["pipeline"]["routes"][:1]),
    )
    path = platform_with_s3.conf_dir / "platform.yaml"
    settings = yaml.safe_load(path.read_text())
    settings["archive"] = {"prefix": f"archive-{uuid.uuid4().hex[:8]}"}
    path.write_text(yaml.safe_dump(settings))
    platform = load_platform(platform_with_s3.conf_dir)
    # What the embedded platform gives its Airflow processes: spark-submit on PATH.
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    return platform


# Three spark-submits (the backfill, its publish with GX) and Airflow, with the cores shared.
@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_the_backfill_form_plans_submits_publishes_and_logs_a_row_per_batch(
    platform: PlatformConfig, spark: SparkSession
) -> None:
    first = utcnow().replace(minute=0, second=0, microsecond=0) - timedelta(hours=5)
    rng = random.Random(3)
    for hour in range(2):
        arrived = first + timedelta(hours=hour, minutes=15)
        lines = [json.dumps(make_event(rng, datetime(2025, 5, 1, hour, tzinfo=UTC))) for _ in range(50)]
        path = write_json_lines(platform.landing_root / "events", f"events-{hour}.json", lines)
        os.utime(path, (arrived.timestamp(), arrived.timestamp()))
    archive.archive_landing(platform, ["events"], utcnow())
    form = {"job": "router", "start": first.isoformat(), "end": (first + timedelta(hours=2)).isoformat()}
    backfill = DagBag(dag_folder=str(DAGS)).get_dag("warden_backfill")

    dry = backfill.test(run_conf={**form, "dry_run": True})
    assert dry.state == "success"
    assert {ti.task_id: ti.state for ti in dry.get_task_instances()}["run_partitions"] == "skipped"
    run = backfill.test(run_conf={**form, "dry_run": False})

    assert run.state == "success"
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert states == {
        "prepare": "success",
        "run_partitions": "success",
        "publish": "success",
        "report": "success",
    }
    [run_dir] = (platform.runtime_root / "backfill").glob("router-*")
    progress = json.loads((run_dir / "progress.json").read_text())["done"]
    # Two small hours fit the default budget: one micro-batch reads both.
    assert [(record["index"], record["partitions"]) for record in progress] == [(0, [0, 1])]
    assert [record["input_rows"] for record in progress] == [100]
    staged = spark.read.parquet(str(run_dir / "lake" / "router"))
    assert staged.count() == sum(record["output_rows"] for record in progress) > 0
    published = json.loads((run_dir / "published.json").read_text())
    assert published["status"] == "published" and published["table"] == "warehouse.router"
    assert [entry["partition"] for entry in published["partitions"]] == [
        f"route=purchases/event_date=2025-05-01/event_hour={hour}" for hour in (0, 1)
    ]
    assert (
        sum(entry["rows"] for entry in published["partitions"]) == staged.where("route = 'purchases'").count()
    )
    gc.collect()  # the hook's pipe, reported here (and ignored) rather than in a later test
