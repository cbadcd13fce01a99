"""Where the sessionizer's Spark time goes, outside the state store: the job cut into cumulative stages.

    python -m benchmarks.sessionizer_profile [--landing DIR] [--warm-up DIR]

Run after `python -m benchmarks.flink_compare --job sessionizer` (it reuses that input). Like
`benchmarks.router_profile` (same session, same `noop`/Parquet sinks, a warm-up pass first), each
stage is a batch query over every file, so a stage's time minus the previous one's is what that
step costs. The batch transform runs the same pandas sessionizing per bucket as the stream
(`applyInPandas` instead of `applyInPandasWithState`); what the stream adds on top (state store
reads and commits, the pending events carried between micro-batches, the no-data batch, the
micro-batch overhead) is in the streaming run's `durationMs` and state operator figures, which
`flink_compare` prints per run.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from benchmarks.flink_compare import WORKDIR
from benchmarks.router_profile import OUT, Stage, run_stage
from jobs.parsing import parse_events
from jobs.runtime import read_landing_files
from jobs.sessionizer.transform import _BUCKET, session_rows, unified_events
from ops.driver.session import build_session
from ops.spec.job import find_job
from ops.spec.pipelines import SessionizerPipeline
from ops.spec.platform import load_platform


def stages(pipeline: SessionizerPipeline) -> dict[str, Stage]:
    """Stage name -> the stage; cumulative where the name starts with "+"."""

    def lines(spark: SparkSession, root: Path) -> dict[str, DataFrame]:
        return {name: read_landing_files(spark, root / s.path) for name, s in pipeline.sources.items()}

    def read(spark: SparkSession, root: Path) -> DataFrame:
        sources = list(lines(spark, root).values())
        return sources[0].unionByName(sources[1]) if len(sources) > 1 else sources[0]

    def unified(spark: SparkSession, root: Path) -> DataFrame:
        parsed = {name: parse_events(raw, pipeline.sources[name]) for name, raw in lines(spark, root).items()}
        return unified_events(parsed, pipeline)

    def shuffled(spark: SparkSession, root: Path) -> DataFrame:
        # The exchange the stateful operator needs, without the pandas function.
        bucket = F.pmod(F.xxhash64(*pipeline.key_fields), F.lit(pipeline.state_buckets))
        return (
            unified(spark, root)
            .withColumn(_BUCKET, bucket)
            .repartition(_BUCKET)
            .sortWithinPartitions(_BUCKET)
        )

    def sessions(spark: SparkSession, root: Path) -> DataFrame:
        return session_rows(unified(spark, root), pipeline)

    return {
        "read lines (text source, both sources)": Stage(read, "noop"),
        "+ parse and union (parse_events, unified_events)": Stage(unified, "noop"),
        "+ shuffle and sort by bucket": Stage(shuffled, "noop"),
        "+ pandas sessionizing per bucket (Arrow both ways)": Stage(sessions, "noop"),
        "+ partitioned Parquet sink (= the batch job)": Stage(sessions, "parquet"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.sessionizer_profile", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--landing", type=Path, default=WORKDIR / "sessionizer" / "input" / "landing")
    parser.add_argument("--warm-up", type=Path, default=WORKDIR / "sessionizer" / "warm-up" / "landing")
    args = parser.parse_args()
    spec = find_job("sessionizer")
    pipeline = spec.pipeline
    assert isinstance(pipeline, SessionizerPipeline)
    spark = build_session(load_platform(), spec)
    events = sum(spark.read.text(str(args.landing / s.path)).count() for s in pipeline.sources.values())
    print(f"{events:,} lines in {args.landing}", flush=True)
    for stage in stages(pipeline).values():
        run_stage(spark, stage, args.warm_up, spec, OUT / "warm-up")
    previous = 0.0
    for name, stage in stages(pipeline).items():
        seconds = run_stage(spark, stage, args.landing, spec, OUT / "stage")
        delta = f"{seconds - previous:+6.1f} s" if name.startswith("+") else " " * 8
        print(f"  {name:55} {seconds:6.1f} s {delta}  {events / seconds:9,.0f} events/s", flush=True)
        previous = seconds
    spark.stop()
    shutil.rmtree(OUT, ignore_errors=True)


if __name__ == "__main__":
    main()
