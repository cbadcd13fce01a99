"""`python -m jobs.runner --job NAME --run-id RUN_ID`: the driver process of one streaming job.

Loads `platform.yaml` and the job's spec from the conf directory (`$STREAMWARDEN_CONF_DIR`),
plans the query from the job's kind in `jobs.catalog` and hands it to `jobs.runtime.run_streaming_job`,
which serves metrics, writes the heartbeat and maps the outcome to the exit code (0 stopped,
1 query failed, 2 config error). This is the only module that knows readStream, the sink, the
trigger and the checkpoint path.
"""

from __future__ import annotations

import argparse
import re
import time
from collections.abc import Sequence

import structlog
from pyspark.sql import SparkSession
from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

from jobs.catalog import kind_of, sink_rows
from jobs.preview import check_stages, start_taps
from jobs.runtime import (
    EXIT_CONFIG_ERROR,
    QueryPlan,
    ShutdownRequest,
    configure_logging,
    read_job_landing,
    run_streaming_job,
)
from ops.driver.listener import TelemetryListener
from ops.driver.takeover import StandbyStatus, write_standby_status
from ops.exceptions import ConfigError
from ops.spec.job import JOB_NAME_PATTERN, JobSpec, find_job, job_file
from ops.spec.paths import HEARTBEAT_FILE, JobPaths
from ops.spec.platform import PlatformConfig, load_platform

log = structlog.get_logger("streamwarden.runner")


def plan_job(platform: PlatformConfig, spec: JobSpec) -> QueryPlan:
    """The job's query: landing -> parse -> the kind's transform -> one partitioned Parquet file sink."""

    paths = JobPaths.of(platform, spec)

    def plan(spark: SparkSession) -> DataStreamWriter:
        # A tap on a stage the kind lacks is a config error, found before anything starts.
        check_stages(platform, spec)
        return (
            sink_rows(platform, spec, read_job_landing(spark, platform, spec))
            .writeStream.queryName(spec.name)
            .format("parquet")
            .outputMode("append")
            .partitionBy(*kind_of(spec).partition_columns)
            .option("checkpointLocation", str(paths.checkpoint))
            .option("path", str(paths.sink))
        )

    return plan


def refuse_changed_file(spec: JobSpec, launched_version: str | None, platform: PlatformConfig) -> None:
    """ConfigError if the job file changed between the launch and this driver loading it.

    The launcher records the version it launched with the run; a driver that ran another version
    would make that record lie, so it refuses and the supervisor relaunches with the new file.
    """
    if launched_version is not None and launched_version != spec.config_version:
        raise ConfigError(
            job_file(spec.name, platform.conf_dir),
            f"the job file changed on disk after the launch: launched with config {launched_version}, "
            f"the file now has config {spec.config_version}; refusing to start a version the run "
            "does not record",
        )


def main(argv: Sequence[str] | None = None) -> int:
    """Run one job's driver until it is stopped or fails; returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m jobs.runner", description=__doc__.splitlines()[0])
    parser.add_argument("--job", required=True, help="job name (conf/jobs/<name>.yaml)")
    parser.add_argument("--run-id", required=True, help="the run id the supervisor recorded")
    parser.add_argument(
        "--config-version",
        help="the job file version the run was launched with; the driver refuses another one",
    )
    until = parser.add_mutually_exclusive_group()
    until.add_argument(
        "--available-now",
        dest="mode",
        action="store_const",
        const="available_now",
        default="continuous",
        help="process the input present at start (in maxFilesPerTrigger batches), then exit 0",
    )
    until.add_argument(
        "--replay-only",
        dest="mode",
        action="store_const",
        const="replay_only",
        help="replay the batches a rewind queued, then exit 0 without starting the trigger",
    )
    parser.add_argument(
        "--standby",
        action="store_true",
        help="a warm standby: start Spark and plan the query, then wait for the supervisor's "
        "take-over grant before running it (operations.restart.warm_standby)",
    )
    args = parser.parse_args(argv)
    if args.standby and args.mode != "continuous":
        parser.error("--standby takes over a continuous query: not with --available-now or --replay-only")
    configure_logging(job=args.job, run_id=args.run_id)
    # Installed first: a stop request during the slow Spark start-up is honoured once it is up.
    shutdown = ShutdownRequest()
    shutdown.install()
    try:
        platform = load_platform()
    except ConfigError as exc:
        log.error("invalid platform config", error=str(exc))
        return EXIT_CONFIG_ERROR
    try:
        spec = find_job(args.job, platform.conf_dir)
        refuse_changed_file(spec, args.config_version, platform)
    except ConfigError as exc:
        log.error("invalid job config", error=str(exc))
        # Without a spec there is no listener yet; the supervisor still needs to see why (a name
        # that is not a job name cannot be a runtime directory).
        # A standby never writes the job's heartbeat: that is the active driver's.
        if re.match(JOB_NAME_PATTERN, args.job):
            runtime_dir = platform.job_runtime_dir(args.job)
            if args.standby:
                write_standby_status(
                    runtime_dir,
                    StandbyStatus(args.run_id, "failed", time.time(), f"{type(exc).__name__}: {exc}"),
                )
            else:
                TelemetryListener(runtime_dir / HEARTBEAT_FILE, args.job, args.run_id).record_termination(
                    type(exc).__name__, str(exc)
                )
        return EXIT_CONFIG_ERROR
    log.info("starting", kind=spec.pipeline.kind, config_version=spec.config_version)

    def taps(spark: SparkSession, available_now: bool) -> list[StreamingQuery]:
        return start_taps(spark, platform, spec, available_now)

    return run_streaming_job(
        platform, spec, args.run_id, plan_job(platform, spec), shutdown, args.mode, taps, standby=args.standby
    )


if __name__ == "__main__":
    raise SystemExit(main())
