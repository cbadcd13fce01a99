"""Every job's streaming runner and batch runner give the same rows on the same landing files.

The streaming side is the real query `jobs.runner.plan_job` builds, run to the end of its input
with an available-now trigger and read back through the sink log; the batch side is
`jobs.batch.batch_rows` over the same files. Every job kind with a scenario in `ops.scenarios` is
covered (scenarios write no event later than the allowed lateness, so the two must agree row for
row).
"""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession
from pyspark.testing import assertDataFrameEqual

from jobs.batch import batch_rows
from jobs.runner import plan_job
from jobs.runtime import state_conf, with_trigger
from ops.config import PlatformConfig, find_job, load_jobs
from ops.scenarios import SCENARIOS

JOBS = sorted(load_jobs().specs)


@pytest.mark.parametrize("job", JOBS)
def test_streaming_and_batch_runners_agree(
    job: str, spark: SparkSession, platform_conf: PlatformConfig
) -> None:
    spec = find_job(job, platform_conf.conf_dir)
    for key, value in state_conf(spec).items():
        spark.conf.set(key, value)
    SCENARIOS[spec.pipeline.kind](platform_conf.landing_root, 900, 1)
    query = with_trigger(plan_job(platform_conf, spec), spec, available_now=True)(spark).start()
    query.awaitTermination(300)
    assert query.exception() is None
    streamed = spark.read.parquet(str(platform_conf.lake_root / spec.pipeline.sink.path))
    batch = batch_rows(spark, platform_conf, spec, platform_conf.landing_root)
    assert streamed.count() > 0
    assertDataFrameEqual(streamed.select(*batch.columns), batch)
