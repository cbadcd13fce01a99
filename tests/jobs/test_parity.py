"""Every job's streaming runner and batch runner give the same rows on the same landing files.

The streaming side is the real query `jobs.runner.plan_job` builds, run to the end of its input
with an available-now trigger and read back through the sink log; the batch side is
`jobs.batch.batch_rows` over the same files. Every job in conf/jobs is covered, on its kind's scenario
in `synthetic.scenarios` (no event later than the allowed lateness, so the two must agree row for row).
For a stateful kind the scenario's flush then moves the watermark past everything the scenario
opened, and the batch side reads the scenario's files only (a copy taken before the flush).

Late events make the two differ by exactly what the stream sends to its `late` output: for every
kind with a late writer in `synthetic.scenarios`, events written behind the stream's watermark are all
in `late`, and the stream's other rows are the batch rows of the files without them. That test
holds the plain agreement too (an on-time row sent to `late` or missing fails it), so the plain one
runs for the jobs without a late writer only: every job is covered once.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.testing import assertDataFrameEqual

from jobs.batch import batch_rows
from ops.driver.session import state_conf
from ops.spec.job import JobSpec, find_job, load_jobs
from ops.spec.platform import PlatformConfig
from synthetic.scenarios import SCENARIOS, Scenario
from tests.support.spark import run_available_now

# The jobs whose sink has a `late` output: their kind's scenario can write late events.
LATE_JOBS = sorted(name for name, spec in load_jobs().specs.items() if SCENARIOS[spec.name].late is not None)
ON_TIME_JOBS = sorted(set(load_jobs().specs) - set(LATE_JOBS))


def write_scenario(
    spark: SparkSession, platform: PlatformConfig, job: str, events: int, seed: int
) -> tuple[JobSpec, Scenario, Path]:
    """The job's spec (its state confs set on the session) and its kind's scenario written to the
    landing (side inputs to the lake), with a copy of the landing for the batch side."""
    spec = find_job(job, platform.conf_dir)
    for key, value in state_conf(spec).items():
        spark.conf.set(key, value)
    scenario = SCENARIOS[spec.name]
    scenario.write(platform.landing_root, events, seed)
    if scenario.lake is not None:
        scenario.lake(platform.lake_root, seed)
    batch_landing = platform.runtime_root / "batch-landing"
    shutil.copytree(platform.landing_root, batch_landing)
    return spec, scenario, batch_landing


@pytest.mark.parametrize("job", ON_TIME_JOBS)
def test_streaming_and_batch_runners_agree(
    job: str, spark: SparkSession, platform_conf: PlatformConfig
) -> None:
    spec, scenario, batch_landing = write_scenario(spark, platform_conf, job, events=900, seed=1)
    run_available_now(spark, platform_conf, spec)
    if scenario.flush is not None:
        scenario.flush(platform_conf.landing_root)
        run_available_now(spark, platform_conf, spec)
    streamed = spark.read.parquet(str(platform_conf.lake_root / spec.pipeline.sink.path))
    batch = batch_rows(spark, platform_conf, spec, batch_landing)
    assert streamed.count() > 0
    assertDataFrameEqual(streamed.select(*batch.columns), batch)


@pytest.mark.parametrize("job", LATE_JOBS)
def test_late_events_are_the_only_difference(
    job: str, spark: SparkSession, platform_conf: PlatformConfig
) -> None:
    spec, scenario, batch_landing = write_scenario(spark, platform_conf, job, events=300, seed=2)
    assert scenario.late is not None
    # The first run moves the watermark past the scenario's start; the late events are before it.
    run_available_now(spark, platform_conf, spec)
    late_ids = scenario.late(platform_conf.landing_root, 2)
    run_available_now(spark, platform_conf, spec)
    if scenario.flush is not None:
        scenario.flush(platform_conf.landing_root)
        run_available_now(spark, platform_conf, spec)
    streamed = spark.read.parquet(str(platform_conf.lake_root / spec.pipeline.sink.path))
    # The first partition column tells a job's outputs apart (`output`, `outcome`).
    is_late = F.col(spec.pipeline.partition_columns[0]) == "late"
    late = streamed.where(is_late).select(F.expr(scenario.late_id_column).alias("id"))
    if isinstance(late.schema["id"].dataType, T.ArrayType):
        late = late.select(F.explode("id"))
    streamed_late = [row[0] for row in late.collect()]
    assert sorted(streamed_late) == sorted(late_ids)
    batch = batch_rows(spark, platform_conf, spec, batch_landing)
    assert batch.count() > 0
    assertDataFrameEqual(streamed.where(~is_late).select(*batch.columns), batch)
