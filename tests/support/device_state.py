"""A real device_health checkpoint with committed state: three micro-batches of an available-now
run, for the tests that read state back (`warden state`, the job board's state lookup)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from pyspark.sql import SparkSession

from ops.spec.job import find_job
from ops.spec.platform import PlatformConfig
from tests.jobs.test_device_health import one_file_per_batch, reading, write_landing
from tests.support.drivers import edit_job
from tests.support.spark import run_available_now


def at(minute: int) -> dt.datetime:
    return dt.datetime(2025, 1, 1, 10, tzinfo=dt.UTC) + dt.timedelta(minutes=minute)


# The state after the three batches below, one row per (device_id, data_point), sorted by key.
STATE_ROWS: list[tuple[Any, ...]] = [
    ("d1", "signal_db", -12.5, at(2), "a2", "RED", at(2)),
    ("d1", "temperature", 20.0, at(1), "a0", "GREEN", at(1)),
    ("d2", "temperature", 71.0, at(3), "b2", "RED", at(0)),
]


def run_device_health(spark: SparkSession, platform: PlatformConfig) -> PlatformConfig:
    """Run device_health over three micro-batches into its checkpoint (available-now, finished)."""
    edit_job(platform, "device_health", one_file_per_batch)
    spec = find_job("device_health", platform.conf_dir)
    landing = platform.landing_root / "telemetry"
    batches = [
        [reading("a1", 0, "d1", "signal_db", -5.0), reading("b1", 0, "d2", "temperature", 75.0)],
        [reading("a2", 2, "d1", "signal_db", -12.5), reading("a0", 1, "d1", "temperature", 20.0)],
        # Stale for d1 signal_db (older than 10:02): the state keeps -12.5.
        [reading("a9", 1, "d1", "signal_db", 4.0), reading("b2", 3, "d2", "temperature", 71.0)],
    ]
    for i, lines in enumerate(batches):
        write_landing(landing, f"batch-{i}", lines, i)
    run_available_now(spark, platform, spec)
    # The format conf is the reader's to set: leave the session without it.
    spark.conf.unset("spark.sql.streaming.stateStore.checkpointFormatVersion")
    return platform
