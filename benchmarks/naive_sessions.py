"""The naive PySpark sessionizer: a `session_window` count per user, the baseline the issue quotes.

What a PySpark user writes first: the landing files parsed as the platform parses them
(`jobs.runtime.parse_events`), the valid events of every source unioned, one watermark (the
job's lateness), `groupBy(session_window(event_time, gap), key).count()` in append mode, written
to the same kind of partitioned Parquet sink with `output=sessions` and the session's start date.
No dedup, no cap, no late or dead-letter outputs: `benchmarks.flink_compare` runs it against the
same session-window count in Flink SQL (`benchmarks.flink.sessionizer.naive_statements`).
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamWriter

from jobs.parsing import DEAD_LETTER_REASON, parse_events
from jobs.runtime import QueryPlan, read_landing
from ops.spec.job import JobSpec
from ops.spec.paths import JobPaths
from ops.spec.pipelines import EVENT_DATE, SessionizerPipeline
from ops.spec.platform import PlatformConfig


def plan(platform: PlatformConfig, spec: JobSpec) -> QueryPlan:
    pipeline = spec.pipeline
    assert isinstance(pipeline, SessionizerPipeline)
    lateness = f"{round(pipeline.allowed_lateness_minutes * 60)} seconds"
    gap = f"{round(pipeline.gap_minutes * 60)} seconds"

    def planned(spark: SparkSession) -> DataStreamWriter:
        max_files = spec.operations.trigger.max_files_per_trigger
        events: DataFrame | None = None
        landing = JobPaths.of(platform, spec).landing
        for name, source in pipeline.sources.items():
            parsed = parse_events(read_landing(spark, landing[name], max_files), source)
            valid = parsed.where(F.col(DEAD_LETTER_REASON).isNull()).select(
                *pipeline.key_fields, F.col(source.event_time_field).alias("event_time")
            )
            events = valid if events is None else events.unionByName(valid)
        assert events is not None
        sessions = (
            events.withWatermark("event_time", lateness)
            .groupBy(F.session_window("event_time", gap).alias("session"), *pipeline.key_fields)
            .count()
            .select(
                F.lit("sessions").alias("output"),
                *pipeline.key_fields,
                F.col("session.start").alias("session_start"),
                F.col("session.end").alias("session_end"),
                F.col("count").alias("event_count"),
                F.to_date("session.start").alias(EVENT_DATE),
            )
        )
        return (
            sessions.writeStream.queryName(f"{spec.name}_naive")
            .format("parquet")
            .outputMode("append")
            .partitionBy("output", EVENT_DATE)
            .option("checkpointLocation", str(platform.checkpoint_root / f"{spec.name}_naive"))
            .option("path", str(platform.lake_root / spec.pipeline.sink.path))
        )

    return planned
