"""Where the router's Spark time goes: the job cut into cumulative stages, timed on the same files.

    python -m benchmarks.router_profile [--landing DIR] [--warm-up DIR]

Run after `python -m benchmarks.flink_compare` (it reuses that input: DIR defaults to its landing
directory). One session as the job builds it (local[2], the spec's memory and partitions); each
stage is a batch query over every file, ending in the `noop` sink (which still computes every
row) or a real file sink, so a stage's time minus the previous one's is what that step costs.
The router's rows are the same in batch and streaming (tests/jobs/test_parity.py), and a
micro-batch runs the same plan. A warm-up pass of every stage over a small input comes first.
"""

from __future__ import annotations

import argparse
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from benchmarks.flink_compare import WORKDIR
from jobs.catalog import sink_rows
from jobs.parsing import SPARK_TYPES, parse_events, with_event_partitions
from jobs.router.transform import route_events
from jobs.runtime import read_landing_files
from ops.driver.session import build_session
from ops.spec.job import JobSpec, find_job
from ops.spec.pipelines import RouterPipeline
from ops.spec.platform import load_platform

OUT = WORKDIR / "profile"


@dataclass(frozen=True)
class Stage:
    """Rows computed from a landing root, the sink they go to, and SQL confs set for the stage."""

    rows: Callable[[SparkSession, Path], DataFrame]
    sink: Literal["noop", "parquet", "csv"]
    conf: Mapping[str, str] = field(default_factory=dict)


def stages(spec: JobSpec) -> dict[str, Stage]:
    """Stage name -> the stage; cumulative where the name starts with "+"."""
    platform = load_platform()
    pipeline = spec.pipeline
    assert isinstance(pipeline, RouterPipeline)
    source = pipeline.source

    def lines(spark: SparkSession, root: Path) -> DataFrame:
        return read_landing_files(spark, root / source.path)

    def parsed(spark: SparkSession, root: Path) -> DataFrame:
        return lines(spark, root).transform(parse_events, source)

    def routed(spark: SparkSession, root: Path) -> DataFrame:
        return sink_rows(platform, spec, {"events": lines(spark, root)})

    def json_source(spark: SparkSession, root: Path) -> DataFrame:
        # The `json` source with the typed schema: one parse, no per-field try_cast or reasons,
        # and malformed lines become nulls instead of dead letters (not the job's semantics).
        schema = ", ".join(f"{f.name} {SPARK_TYPES[f.type].simpleString()}" for f in source.fields)
        events = spark.read.schema(schema).option("pathGlobFilter", "*.json").json(str(root / source.path))
        events = events.withColumns(
            {"dead_letter_reason": F.lit(None).cast("string"), "raw": F.lit(None).cast("string")}
        )
        return route_events(with_event_partitions(events, source), pipeline.routes)

    # Rows go to each partition's writer as they come instead of being sorted by partition first.
    unsorted = {"spark.sql.maxConcurrentOutputFileWriters": "16"}
    return {
        "read lines (text source)": Stage(lines, "noop"),
        "+ parse (from_json, try_cast, dead-letter reasons)": Stage(parsed, "noop"),
        "+ route (array of structs, inline)": Stage(routed, "noop"),
        "+ partitioned Parquet sink (= the job)": Stage(routed, "parquet"),
        "the job with a CSV sink instead": Stage(routed, "csv"),
        "the job with concurrent writers (no sort by partition)": Stage(routed, "parquet", unsorted),
        "json source, typed schema, route, Parquet (no dead letters)": Stage(json_source, "parquet"),
    }


def run_stage(spark: SparkSession, stage: Stage, root: Path, spec: JobSpec, out: Path) -> float:
    """Seconds to compute every row of the stage over `root` into its sink."""
    shutil.rmtree(out, ignore_errors=True)
    partitions = spec.pipeline.partition_columns
    for key, value in stage.conf.items():
        spark.conf.set(key, value)
    try:
        rows = stage.rows(spark, root)
        started = time.monotonic()
        if stage.sink == "noop":
            rows.write.format("noop").mode("overwrite").save()
        else:
            rows.write.partitionBy(*partitions).format(stage.sink).save(str(out))
        return time.monotonic() - started
    finally:
        for key in stage.conf:
            spark.conf.unset(key)


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.router_profile", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--landing", type=Path, default=WORKDIR / "router" / "input" / "landing")
    parser.add_argument("--warm-up", type=Path, default=WORKDIR / "router" / "warm-up" / "landing")
    args = parser.parse_args()
    spec = find_job("router")
    spark = build_session(load_platform(), spec)
    events = spark.read.text(str(args.landing / "events")).count()
    print(f"{events:,} lines in {args.landing}", flush=True)
    for stage in stages(spec).values():
        run_stage(spark, stage, args.warm_up, spec, OUT / "warm-up")
    previous = 0.0
    for name, stage in stages(spec).items():
        seconds = run_stage(spark, stage, args.landing, spec, OUT / "stage")
        delta = f"{seconds - previous:+6.1f} s" if name.startswith("+") else " " * 8
        print(f"  {name:62} {seconds:6.1f} s {delta}  {events / seconds:9,.0f} events/s", flush=True)
        previous = seconds
    spark.stop()
    shutil.rmtree(OUT, ignore_errors=True)


if __name__ == "__main__":
    main()
