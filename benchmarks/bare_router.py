"""The baseline for the router benchmark: the same read -> filter -> write in bare PySpark.

No platform: no listener, heartbeat, metrics or dead-letter parsing. It reads the same files with
the `json` source and the same explicit schema, fans each event out to the same routes in one
query, and writes the same partitioned Parquet sink with an available-now trigger. It prints the
sum of its batch durations as JSON on its last line.

    python -m benchmarks.bare_router --conf-dir DIR --landing DIR --out DIR --checkpoint DIR
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ops.spec.job import find_job

TYPES = {
    "string": T.StringType(),
    "long": T.LongType(),
    "double": T.DoubleType(),
    "timestamp": T.TimestampType(),
}


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--conf-dir", "--landing", "--out", "--checkpoint"):
        parser.add_argument(name, required=True)
    args = parser.parse_args()
    spec = find_job("router", Path(args.conf_dir))
    source, routes = spec.pipeline.source, spec.pipeline.routes
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.driver.memory", spec.operations.resources.driver_memory)
        .config("spark.sql.shuffle.partitions", str(spec.operations.resources.shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    schema = T.StructType([T.StructField(f.name, TYPES[f.type]) for f in source.fields])
    events = (
        spark.readStream.schema(schema)
        .option("maxFilesPerTrigger", spec.operations.trigger.max_files_per_trigger)
        .json(args.landing)
    )
    columns = sorted(
        {c for route in routes for c in route.columns}, key=[f.name for f in source.fields].index
    )
    matched = F.array(*[F.when(F.expr(route.filter), F.lit(route.name)) for route in routes])
    routed = (
        events.withColumn("route", F.explode(F.filter(matched, lambda r: r.isNotNull())))
        .withColumn("event_date", F.to_date(source.event_time_field))
        .withColumn("event_hour", F.hour(source.event_time_field))
        .select("route", *columns, "event_date", "event_hour")
    )
    query = (
        routed.writeStream.format("parquet")
        .partitionBy("route", "event_date", "event_hour")
        .option("checkpointLocation", args.checkpoint)
        .option("path", args.out)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    batches = [p["durationMs"]["triggerExecution"] for p in query.recentProgress if p["numInputRows"] > 0]
    spark.stop()
    print(json.dumps({"batches": len(batches), "batch_ms": sum(batches)}))


if __name__ == "__main__":
    main()
