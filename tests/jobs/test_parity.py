"""Every job's streaming runner and batch runner give the same rows on the same landing files.

The streaming side is the real query `jobs.runner.plan_job` builds, run to the end of its input
with an available-now trigger and read back through the sink log; the batch side is
`jobs.batch.batch_rows` over the same files. Each job contributes a scenario that writes its
landing files with the synthetic generator (no event later than the allowed lateness, so the
two must agree row for row).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from pyspark.sql import SparkSession
from pyspark.testing import assertDataFrameEqual

from jobs.batch import batch_rows
from jobs.runner import plan_job
from jobs.runtime import state_conf, with_trigger
from ops.config import PlatformConfig, find_job
from ops.generator import write_batch

# job -> writes that job's landing files under the platform's landing root.
SCENARIOS: dict[str, Callable[[PlatformConfig], None]] = {
    "router": lambda platform: [
        write_batch(platform.landing_root / "events", 300, 0.05, seed) for seed in (1, 2, 3)
    ],
}


@pytest.mark.parametrize("job", sorted(SCENARIOS))
def test_streaming_and_batch_runners_agree(
    job: str, spark: SparkSession, platform_conf: PlatformConfig
) -> None:
    spec = find_job(job, platform_conf.conf_dir)
    for key, value in state_conf(spec).items():
        spark.conf.set(key, value)
    SCENARIOS[job](platform_conf)
    query = with_trigger(plan_job(platform_conf, spec), spec, available_now=True)(spark).start()
    query.awaitTermination(300)
    assert query.exception() is None
    streamed = spark.read.parquet(str(platform_conf.lake_root / spec.pipeline.sink.path))
    batch = batch_rows(spark, platform_conf, spec, platform_conf.landing_root)
    assert streamed.count() > 0
    assertDataFrameEqual(streamed.select(*batch.columns), batch)
