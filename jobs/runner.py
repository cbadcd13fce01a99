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
import shutil
import time
from collections.abc import Sequence

import structlog
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession
from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

from jobs.catalog import sink_rows
from jobs.parsing import LANDING_GLOB
from jobs.preview import check_stages, start_taps
from jobs.runtime import (
    QueryPlan,
    RawInput,
    ShutdownRequest,
    WarmUp,
    read_job_landing,
    run_streaming_job,
    with_trigger,
)
from ops.driver.listener import TelemetryListener
from ops.driver.session import EXIT_CONFIG_ERROR, configure_logging
from ops.driver.takeover import StandbyStatus, write_standby_status
from ops.exceptions import ConfigError
from ops.spec.job import JOB_NAME_PATTERN, JobSpec, find_job, job_file
from ops.spec.paths import HEARTBEAT_FILE, JobPaths
from ops.spec.platform import PlatformConfig, StorageConfig, load_platform

log = structlog.get_logger("streamwarden.runner")


def plan_job(platform: PlatformConfig, spec: JobSpec, read_input: RawInput = read_job_landing) -> QueryPlan:
    """The job's query: landing -> parse -> the kind's transform -> one partitioned Parquet file sink.

    `read_input` gives each input's raw lines: the landing directories' file sources, or a
    backfill's archive partitions (`jobs.archive_source`).
    """

    paths = JobPaths.of(platform, spec)

    def plan(spark: SparkSession) -> DataStreamWriter:
        # A tap on a stage the kind lacks is a config error, found before anything starts.
        check_stages(platform, spec)
        return (
            sink_rows(platform, spec, read_input(spark, platform, spec))
            .writeStream.queryName(spec.name)
            .format("parquet")
            .outputMode("append")
            .partitionBy(*spec.pipeline.partition_columns)
            .option("checkpointLocation", str(paths.checkpoint))
            .option("path", str(paths.sink))
        )

    return plan


def warm_up(platform: PlatformConfig, spec: JobSpec) -> WarmUp:
    """A warm standby's warm-up: the job's query, available-now, over a copy of the newest landing
    file of each input, with a scratch checkpoint and sink that are removed afterwards.

    It loads and compiles what the job's first real batch would (file source, parse, transform,
    state store, Parquet sink and its log) without touching the job's own checkpoint, sink or
    heartbeat. It is an optimisation: a warm-up that fails is logged and the standby waits anyway;
    the real query reports its own errors.
    """

    def run(spark: SparkSession) -> None:
        if not executor_registered(spark, WARM_UP_EXECUTOR_WAIT_SECONDS):
            # The cluster's cores are all taken, by the driver this one replaces (a rescale down):
            # a warm-up would wait for them, and the stop waits for the warm-up.
            log.info("standby warm-up skipped: no executor registered", waited=WARM_UP_EXECUTOR_WAIT_SECONDS)
            return
        # One standby per job at a time: what a killed one left here is removed first.
        root = JobPaths.of(platform, spec).runtime / "warm-up"
        shutil.rmtree(root, ignore_errors=True)
        scratch = platform.model_copy(
            update={
                "storage": StorageConfig(
                    runtime_root=root / "runtime",
                    landing_root=root / "landing",
                    lake_root=root / "lake",
                    checkpoint_root=root / "checkpoints",
                )
            }
        )
        try:
            copied = 0
            for name, landing in JobPaths.of(platform, spec).landing.items():
                newest = max(landing.glob(LANDING_GLOB), key=lambda path: path.stat().st_mtime, default=None)
                if newest is not None:
                    target = JobPaths.of(scratch, spec).landing[name]
                    target.mkdir(parents=True, exist_ok=True)
                    shutil.copy(newest, target / newest.name)
                    copied += 1
            if copied == 0:
                log.info("standby warm-up skipped: no landing file yet")
                return
            started = time.monotonic()
            query = with_trigger(plan_job(scratch, spec), spec, available_now=True)(spark).start()
            query.awaitTermination()
            log.info("standby warmed up", seconds=round(time.monotonic() - started, 1), files=copied)
        except (PySparkException, OSError) as exc:
            log.warning("standby warm-up failed; waiting cold", error=str(exc).splitlines()[0])
        finally:
            shutil.rmtree(root, ignore_errors=True)

    return run


# How long a standby's warm-up waits for an executor of its own on a cluster.
WARM_UP_EXECUTOR_WAIT_SECONDS = 20.0


def executor_registered(spark: SparkSession, timeout: float) -> bool:
    """Whether the session has an executor to run tasks on, waiting up to `timeout` for one (a
    local session runs them in the driver)."""
    context = spark.sparkContext
    if not (context.master or "").startswith("spark://"):
        return True
    deadline = time.monotonic() + timeout
    while True:
        # No Python API lists executors; the JVM status tracker's list includes the driver.
        if len(context._jsc.sc().statusTracker().getExecutorInfos()) > 1:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.5)


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


def scaled(
    spec: JobSpec, cores: int | None, max_files_per_trigger: int | None, platform: PlatformConfig
) -> JobSpec:
    """`spec` at the scale the launcher gave (None: the file's); ConfigError for a scale below 1."""
    for name, value in (("--cores", cores), ("--max-files-per-trigger", max_files_per_trigger)):
        if value is not None and value < 1:
            raise ConfigError(job_file(spec.name, platform.conf_dir), f"{name} {value} is below 1")
    operations = spec.operations
    return spec.with_scale(
        cores if cores is not None else operations.resources.cores,
        max_files_per_trigger
        if max_files_per_trigger is not None
        else operations.trigger.max_files_per_trigger,
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
    parser.add_argument(
        "--cores",
        type=int,
        help="the cores the supervisor scaled the job to (ops.control.scaling); default: the file's",
    )
    parser.add_argument(
        "--max-files-per-trigger",
        type=int,
        help="the batch-size limit that goes with those cores; default: the file's",
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
        spec = scaled(spec, args.cores, args.max_files_per_trigger, platform)
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

    standby = warm_up(platform, spec) if args.standby else None
    return run_streaming_job(
        platform, spec, args.run_id, plan_job(platform, spec), shutdown, args.mode, taps, standby=standby
    )


if __name__ == "__main__":
    raise SystemExit(main())
