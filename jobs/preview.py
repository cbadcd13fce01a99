"""Preview tap queries: the driver side of `warden preview` (the file format is in `ops/driver/preview.py`).

Design constraint: a job is ONE streaming query with ONE Parquet file sink, whose checkpoint and
sink log anchor savepoints and rewinds; a tap must not change that query. So a tap is a query of
its own, started by the driver beside the job's query only for the stages listed in
`operations.preview.stages`, and nothing extra exists when the list is empty:

* it reads the job's landing directories again (its own file-source log) and builds the same
  transform with `jobs.catalog.pipeline_stages`, then keeps the stage it taps. The price is a second
  read and parse of the input (and, for a tap on the `output` of a stateful kind, a second copy of
  the state); the job's own query is untouched. Spark offers nothing cheaper that keeps the job's
  plan unchanged: an observer inside the job's plan would have to be an extra sink or a
  `foreachBatch` on the job's query, which would replace its file sink.
* its sink is `foreachBatch`: the newest `records` rows of the micro-batch (`DataFrame.tail`, so
  only those reach the driver) are merged with the file's previous records and the file is
  replaced atomically;
* its checkpoint is `<runtime>/jobs/<job>/preview/_checkpoints/<stage>/`, outside the job's
  checkpoint, so savepoints, rewinds and restatements neither copy nor touch it. A rewind does not
  rewind a tap: after one, the tap simply shows newer input;
* it runs with the job's trigger and is named `<job>.preview.<stage>`, which the telemetry
  listener ignores, and it is stopped with the job's query. A failing tap is logged and left
  stopped; it never stops the job.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import structlog
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from jobs.catalog import pipeline_stages, stage_names
from jobs.runtime import read_job_landing
from ops.driver.preview import (
    Preview,
    load_preview_file,
    merge_records,
    preview_path,
    tap_query_name,
    write_preview,
)
from ops.exceptions import ConfigError
from ops.spec.job import JobSpec, job_file
from ops.spec.paths import JobPaths
from ops.spec.platform import PlatformConfig

log = structlog.get_logger("streamwarden.preview")


def stage_problems(spec: JobSpec) -> dict[str, str]:
    """Tapped stages the job's kind does not have, by dotted field of the job file."""
    known = stage_names(spec)
    return {
        f"operations.preview.stages.{index}": f"unknown stage {stage!r}; this job has {known}"
        for index, stage in enumerate(spec.operations.preview.stages)
        if stage not in known
    }


def check_stages(platform: PlatformConfig, spec: JobSpec) -> None:
    """Raise `ConfigError` when the spec taps a stage the job's kind does not have."""
    for field, why in stage_problems(spec).items():
        raise ConfigError(job_file(spec.name, platform.conf_dir), f"field '{field}': {why}")


def capture_batch(platform: PlatformConfig, spec: JobSpec, stage: str) -> Callable[[DataFrame, int], None]:
    """The `foreachBatch` function of a tap: keep the newest records of `stage` in its file."""
    path = preview_path(JobPaths.of(platform, spec), stage)
    keep = spec.operations.preview.records

    def capture(batch: DataFrame, batch_id: int) -> None:
        rows = [row.asDict(recursive=True) for row in batch.tail(keep)]
        if not rows and path.exists():
            return
        previous = load_preview_file(path)
        records = merge_records(previous.records if previous else (), rows, keep)
        preview = Preview(spec.name, stage, batch_id, time.time(), tuple(batch.columns), tuple(records))
        write_preview(path, preview)

    return capture


def start_taps(
    spark: SparkSession, platform: PlatformConfig, spec: JobSpec, available_now: bool
) -> list[StreamingQuery]:
    """Start one tap query per stage in `operations.preview.stages` (none when it is empty)."""
    taps = spec.operations.preview
    if not taps.stages:
        return []
    check_stages(platform, spec)
    queries = []
    for stage in taps.stages:
        writer = (
            pipeline_stages(platform, spec, read_job_landing(spark, platform, spec))[stage]
            .writeStream.queryName(tap_query_name(spec.name, stage))
            .foreachBatch(capture_batch(platform, spec, stage))
            .option("checkpointLocation", str(JobPaths.of(platform, spec).preview / "_checkpoints" / stage))
        )
        if available_now:
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime=f"{spec.operations.trigger.interval_seconds} seconds")
        queries.append(writer.start())
        log.info("preview tap started", stage=stage, records=taps.records)
    return queries
