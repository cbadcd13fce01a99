"""Every job's streaming runner and batch runner give the same rows on the same landing files.

The streaming side is the real query `jobs.runner.plan_job` builds, run to the end of its input
with an available-now trigger and read back through the sink log; the batch side is
`jobs.batch.batch_rows` over the same files. Every job in conf/jobs is covered, on its kind's scenario
in `ops.scenarios` (no event later than the allowed lateness, so the two must agree row for row).
For a stateful kind the scenario's flush then moves the watermark past everything the scenario
opened, and the batch side reads the scenario's files only (a copy taken before the flush).
"""

from __future__ import annotations

import shutil

import pytest
from pyspark.sql import SparkSession
from pyspark.testing import assertDataFrameEqual

from jobs.batch import batch_rows
from jobs.runner import plan_job
from jobs.runtime import state_conf, with_trigger
from ops.config import JobSpec, PlatformConfig, find_job, load_jobs
from ops.scenarios import SCENARIOS

JOBS = sorted(load_jobs().specs)


def run_available_now(spark: SparkSession, platform: PlatformConfig, spec: JobSpec) -> None:
    """Run the job's real streaming query over the input present now, to the end."""
    query = with_trigger(plan_job(platform, spec), spec, available_now=True)(spark).start()
    query.awaitTermination(300)
    assert query.exception() is None


@pytest.mark.parametrize("job", JOBS)
def test_streaming_and_batch_runners_agree(
    job: str, spark: SparkSession, platform_conf: PlatformConfig
) -> None:
    spec = find_job(job, platform_conf.conf_dir)
    for key, value in state_conf(spec).items():
        spark.conf.set(key, value)
    scenario = SCENARIOS[spec.pipeline.kind]
    scenario.write(platform_conf.landing_root, 900, 1)
    if scenario.lake is not None:
        scenario.lake(platform_conf.lake_root, 1)
    batch_landing = platform_conf.runtime_root / "batch-landing"
    shutil.copytree(platform_conf.landing_root, batch_landing)
    run_available_now(spark, platform_conf, spec)
    if scenario.flush is not None:
        scenario.flush(platform_conf.landing_root)
        run_available_now(spark, platform_conf, spec)
    streamed = spark.read.parquet(str(platform_conf.lake_root / spec.pipeline.sink.path))
    batch = batch_rows(spark, platform_conf, spec, batch_landing)
    assert streamed.count() > 0
    assertDataFrameEqual(streamed.select(*batch.columns), batch)
