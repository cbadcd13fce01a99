"""The bare PySpark baseline of the router benchmarks: Spark's native JSON reader, read once.

No platform: no listener, heartbeat, metrics or dead letters. It reads the landing files with the
`json` source and the typed schema of the source's fields, fans each event out with the router's
own projection (`route_events`, so the sink has the same columns and partitions) and writes the
same partitioned Parquet sink with an available-now trigger. As a script it prints the sum of its
batch durations as JSON on its last line.

    python -m benchmarks.bare_router --conf-dir DIR --landing DIR --out DIR --checkpoint DIR
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.streaming import DataStreamWriter

from jobs.parsing import DEAD_LETTER_REASON, LANDING_GLOB, RAW, SPARK_TYPES, with_event_partitions
from jobs.router.transform import route_events
from ops.spec.job import JobSpec, find_job
from ops.spec.pipelines import RouterPipeline


def bare_writer(
    spark: SparkSession, spec: JobSpec, landing: Path, out: Path, checkpoint: Path
) -> DataStreamWriter:
    """The baseline query over `landing`, writing to `out`, available-now."""
    pipeline = spec.pipeline
    assert isinstance(pipeline, RouterPipeline)
    source = pipeline.source
    schema = T.StructType([T.StructField(f.name, SPARK_TYPES[f.type]) for f in source.fields])
    events = (
        spark.readStream.schema(schema)
        .option("maxFilesPerTrigger", spec.operations.trigger.max_files_per_trigger)
        .option("pathGlobFilter", LANDING_GLOB)
        .json(str(landing))
        .withColumns({DEAD_LETTER_REASON: F.lit(None).cast("string"), RAW: F.lit(None).cast("string")})
    )
    routed = route_events(with_event_partitions(events, source), pipeline.routes)
    return (
        routed.writeStream.format("parquet")
        .partitionBy(*RouterPipeline.fixed_partition_columns)
        .option("checkpointLocation", str(checkpoint))
        .option("path", str(out))
        .trigger(availableNow=True)
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--conf-dir", "--landing", "--out", "--checkpoint"):
        parser.add_argument(name, required=True)
    args = parser.parse_args()
    spec = find_job("router", Path(args.conf_dir))
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.driver.memory", spec.operations.resources.driver_memory)
        .config("spark.sql.shuffle.partitions", str(spec.operations.resources.shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    query = bare_writer(spark, spec, Path(args.landing), Path(args.out), Path(args.checkpoint)).start()
    query.awaitTermination()
    batches = [p["durationMs"]["triggerExecution"] for p in query.recentProgress if p["numInputRows"] > 0]
    spark.stop()
    print(json.dumps({"batches": len(batches), "batch_ms": sum(batches)}))


if __name__ == "__main__":
    main()
