"""The autoscaling runs' shared pieces: the autoscaled router's spec, a supervisor driven a tick at a
time under a written load, what the ledger recorded of rescales and refused recommendations, and
the sink compared with a clean batch run."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.testing import assertDataFrameEqual

from jobs.batch import batch_rows
from ops.control.supervisor import Supervisor
from ops.ledger.records import DecisionRecord, OperationRecord
from ops.ledger.store import Ledger
from ops.spec.job import find_job
from ops.spec.platform import PlatformConfig
from synthetic.generator import FileLoad

TICK_SECONDS = 4.0
EVENTS_PER_FILE = 50


def autoscaled_router(spec: dict[str, Any]) -> None:
    operations = spec["operations"]
    operations["trigger"] = {"interval_seconds": TICK_SECONDS, "max_files_per_trigger": 2}
    operations["resources"] = {"executor_memory": "512m", "shuffle_partitions": 4}
    operations["savepoints"]["interval_minutes"] = None
    operations["autoscaling"] = {
        "mode": "apply",
        "min_cores": 1,
        "max_cores": 2,
        # A light batch keeps the driver busy well under half its trigger interval on this
        # machine; two files a batch fall behind a step's input. Under the full suite's load a
        # base-load batch can outlast a tick and leave a few files waiting: a catch-up of 30 s
        # keeps such a blip from asking for a second core (at 10 s, three files waiting did),
        # while a step's backlog still does: at 4x, growing half a file a second, 152 s after
        # the step on an idle machine (sooner under load, where a batch is slower); the cluster
        # test steps to 8x, three times as fast.
        "target_utilization": 0.9,
        "catch_up_seconds": 30,
        "stabilization_seconds": 20,
        "scale_down_delay_seconds": 20,
        "max_factor_per_step": 2,
    }


def rescales(ledger: Ledger, job: str) -> list[OperationRecord]:
    return [op for op in reversed(ledger.operations(job)) if op.kind == "scale"]


def recommendations(ledger: Ledger, job: str, blocked: str) -> list[DecisionRecord]:
    """The job's recommendations not applied because of the guard named `blocked`, oldest first."""
    rows = ledger.decisions(job, limit=1000, action="scale_recommendation")
    return [
        row for row in reversed(rows) if (row.inputs["autoscaler"]["blocked_by"] or "").startswith(blocked)
    ]


def drive(
    supervisor: Supervisor,
    load: FileLoad,
    files_per_tick: int,
    until: Callable[[], bool],
    timeout: float,
    what: str,
) -> None:
    """Write `files_per_tick` files and run a reconcile pass every tick until `until()` holds."""
    deadline = time.monotonic() + timeout
    while not until():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout:g}s"
        started = time.monotonic()
        load.write(files_per_tick)
        supervisor.reconcile("router")
        time.sleep(max(0.0, TICK_SECONDS - (time.monotonic() - started)))


def assert_sink_is_a_clean_run(
    spark: SparkSession, platform: PlatformConfig, job: str, landing_root: Path
) -> None:
    spec = find_job(job, platform.conf_dir)
    sink = spark.read.parquet(str(platform.lake_root / spec.pipeline.sink.path))
    clean = batch_rows(spark, platform, spec, landing_root)
    assert clean.count() > 0
    assertDataFrameEqual(sink.select(*clean.columns), clean)
