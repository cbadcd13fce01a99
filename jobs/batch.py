"""`python -m jobs.batch --job NAME --output DIR`: one job's transform over the files at rest.

The batch runner reads every landing file of the job's inputs once, applies the same
`jobs.catalog.sink_rows` as the streaming runner and writes the same partitioned Parquet layout to
`--output` (replacing what is there). With no event later than the allowed lateness it produces
the rows the streaming job produces; backfills and the streaming-vs-batch tests use it.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import structlog
from pyspark.sql import DataFrame, SparkSession

from jobs.catalog import sink_rows
from jobs.runtime import read_landing_files
from ops.driver.session import EXIT_CONFIG_ERROR, EXIT_STOPPED, build_session, configure_logging
from ops.exceptions import ConfigError
from ops.spec.job import JobSpec, find_job
from ops.spec.platform import PlatformConfig, load_platform

log = structlog.get_logger("streamwarden.batch")


def batch_rows(spark: SparkSession, platform: PlatformConfig, spec: JobSpec, landing_root: Path) -> DataFrame:
    """The job's sink rows computed over the landing files under `landing_root`."""
    raw = {
        name: read_landing_files(spark, landing_root / source.path)
        for name, source in spec.pipeline.inputs.items()
    }
    return sink_rows(platform, spec, raw)


def write_batch_output(rows: DataFrame, spec: JobSpec, output: Path) -> None:
    """Write rows in the job's sink layout, replacing whatever `output` held."""
    rows.write.mode("overwrite").partitionBy(*spec.pipeline.partition_columns).parquet(str(output))


def main(argv: Sequence[str] | None = None) -> int:
    """Run one job's transform in batch; returns the exit code (0 done, 2 config error)."""
    parser = argparse.ArgumentParser(prog="python -m jobs.batch", description=__doc__.splitlines()[0])
    parser.add_argument("--job", required=True, help="job name (conf/jobs/<name>.yaml)")
    parser.add_argument("--output", required=True, type=Path, help="directory to write the Parquet output to")
    parser.add_argument(
        "--landing-root",
        type=Path,
        help="read inputs under this directory instead of the platform's landing root",
    )
    args = parser.parse_args(argv)
    configure_logging(job=args.job, mode="batch")
    try:
        platform = load_platform()
        spec = find_job(args.job, platform.conf_dir)
    except ConfigError as exc:
        log.error("invalid config", error=str(exc))
        return EXIT_CONFIG_ERROR
    spark = build_session(platform, spec, heap=spec.operations.resources.task_memory(platform.spark))
    try:
        rows = batch_rows(spark, platform, spec, args.landing_root or platform.landing_root)
        write_batch_output(rows, spec, args.output)
    except ConfigError as exc:
        log.error("cannot plan job", error=str(exc))
        return EXIT_CONFIG_ERROR
    finally:
        spark.stop()
    log.info("batch written", output=str(args.output))
    return EXIT_STOPPED


if __name__ == "__main__":
    raise SystemExit(main())
