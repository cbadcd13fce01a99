"""The driver runtime every streaming job shares.

A job contributes one thing, a `QueryPlan`: given the session, it returns the configured
`DataStreamWriter` (or raises `ConfigError` when its config cannot be planned, such as a route
filter Spark cannot parse). `run_streaming_job` does the rest: session, telemetry listener,
Prometheus endpoint, the replay of batches a rewind queued (one trigger-once query per batch,
before the normal trigger starts), graceful shutdown, and the process exit code:

* 0 (`EXIT_STOPPED`): the query was stopped on SIGTERM/SIGINT after its current batch, or ended.
* 1 (`EXIT_QUERY_FAILED`): the query died with an exception; the terminated heartbeat keeps the
  exception class and message.
* 2 (`EXIT_CONFIG_ERROR`): the config could not be planned, or its metrics port
  (`operations.metrics_port`) is taken by another process; nothing was started, and a terminated
  heartbeat names the error.

A warm standby (`standby=True`, `operations.restart.warm_standby`) starts its session and plans
its query, then waits for the supervisor's grant (`ops.driver.takeover`) before it serves metrics
or writes a heartbeat; granted, it runs like any driver. Every driver's JVM takes the job's
checkpoint lock before its query may start, so a standby can never run beside a live driver.

Landing lines are parsed by `jobs.parsing`.
"""

from __future__ import annotations

import errno
import signal
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Literal

import structlog
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

from jobs.output_shift import compare_with_running
from jobs.parsing import LANDING_GLOB
from ops.driver.checkpoint import landing_backlog
from ops.driver.listener import TelemetryListener, describe_failure, serve_metrics
from ops.driver.replay import finish_replay_batch, pending_replay, stage_replay_batch
from ops.driver.session import EXIT_CONFIG_ERROR, EXIT_QUERY_FAILED, EXIT_STOPPED, build_session
from ops.driver.takeover import (
    CheckpointLock,
    StandbyState,
    StandbyStatus,
    wait_for_grant,
    write_standby_status,
)
from ops.exceptions import ConfigError, ViewStoreError
from ops.spec.job import JobSpec, job_file, metrics_port_in_use
from ops.spec.paths import JobPaths
from ops.spec.pipelines import TeamPipeline
from ops.spec.platform import PlatformConfig

if TYPE_CHECKING:
    from ops.driver.view_publisher import ViewPublisher

# What a driver logs once a signal asked it to stop, before the running batch has committed.
STOPPING = "stopping after current batch"


QueryPlan = Callable[[SparkSession], DataStreamWriter]
# Each input of a job's pipeline as a stream of raw lines (one string column `value`), by input name.
RawInput = Callable[[SparkSession, PlatformConfig, JobSpec], dict[str, DataFrame]]
# Runs the job's query once on scratch copies (a warm standby's warm-up, `jobs.runner.warm_up`).
WarmUp = Callable[[SparkSession], None]
# (session, available_now) -> the started preview tap queries (`jobs/preview.py`); none when off.
TapStarter = Callable[[SparkSession, bool], list[StreamingQuery]]
# How long a driver runs: until stopped, until the input present at start is read, or only to
# replay the batches a rewind queued.
RunMode = Literal["continuous", "available_now", "replay_only"]

log = structlog.get_logger("streamwarden.job")


def read_landing(spark: SparkSession, landing_dir: Path, max_files_per_trigger: int | None) -> DataFrame:
    """A landing directory as a stream of raw lines (one string column `value`)."""
    # The file source refuses to start on a directory that does not exist yet.
    landing_dir.mkdir(parents=True, exist_ok=True)
    reader = spark.readStream.format("text").option("pathGlobFilter", LANDING_GLOB)
    if max_files_per_trigger is not None:
        reader = reader.option("maxFilesPerTrigger", max_files_per_trigger)
    return reader.load(str(landing_dir))


def read_job_landing(spark: SparkSession, platform: PlatformConfig, spec: JobSpec) -> dict[str, DataFrame]:
    """Each input of the job's pipeline as a stream of raw lines, by input name, in trigger-sized batches."""
    max_files = spec.operations.trigger.max_files_per_trigger
    return {
        name: read_landing(spark, landing_dir, max_files)
        for name, landing_dir in JobPaths.of(platform, spec).landing.items()
    }


def read_landing_files(spark: SparkSession, landing_dir: Path) -> DataFrame:
    """The landing files present in a directory, read once (the batch runner's input)."""
    return spark.read.format("text").option("pathGlobFilter", LANDING_GLOB).load(str(landing_dir))


class ShutdownRequest:
    """Records SIGTERM/SIGINT; the driver's wait loop sees it and stops the query between batches.

    The handler only sets a flag: raising inside a handler could interrupt a Py4J call mid-reply
    and leave the gateway connection unusable.
    """

    def __init__(self) -> None:
        self._requested = threading.Event()
        self.signal_name: str | None = None

    def install(self) -> None:
        """Handle SIGTERM and SIGINT in this (main) thread from now on."""
        signal.signal(signal.SIGTERM, self._handle)
        signal.signal(signal.SIGINT, self._handle)

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        self.signal_name = signal.Signals(signum).name
        self._requested.set()

    @property
    def requested(self) -> bool:
        return self._requested.is_set()


def stop_between_batches(query: StreamingQuery, timeout: float) -> None:
    """Stop `query` once the batch running when asked has committed (or no trigger runs), so that
    batch's work is kept; force after `timeout`.

    A query behind its input starts its next trigger the moment one ends: waiting for a moment
    with no trigger running waited, in a rescale under a backlog, for five batches (35 s, until
    the backlog had drained). The batch the next trigger started is stopped with the query
    instead, as one cut by the timeout is: its offsets are logged, so the next driver re-runs it
    over the same files, and its partial output never committed.
    """
    deadline = time.monotonic() + timeout
    running = _running_batch(query)
    while query.isActive and query.status["isTriggerActive"] and time.monotonic() < deadline:
        if running is not None and _last_batch(query) >= running:
            break
        time.sleep(0.05)
    query.stop()


def _last_batch(query: StreamingQuery) -> int:
    """The id of the query's newest finished batch (-1 before its first)."""
    progress = query.lastProgress
    return int(progress["batchId"]) if progress else -1


def _running_batch(query: StreamingQuery) -> int | None:
    """The id of the batch a running trigger works on, if a trigger runs: the one after the newest
    finished batch (a trigger that finds no input ends without a batch, and the wait with it)."""
    return _last_batch(query) + 1 if query.status["isTriggerActive"] else None


def _await_query(
    query: StreamingQuery, shutdown: ShutdownRequest, stop_timeout: float, every_second: Callable[[], object]
) -> None:
    """Block until the query ends: by itself, by failing (raises), or stopped on a signal; call
    `every_second` meanwhile."""
    while query.isActive:
        if shutdown.requested:
            log.info(STOPPING, signal=shutdown.signal_name)
            stop_between_batches(query, stop_timeout)
            break
        query.awaitTermination(1)
        every_second()
    query.awaitTermination()


def with_trigger(plan: QueryPlan, spec: JobSpec, available_now: bool) -> QueryPlan:
    """The job's plan with its trigger: the spec's processing-time interval, or available-now."""

    def triggered(spark: SparkSession) -> DataStreamWriter:
        writer = plan(spark)
        if available_now:
            return writer.trigger(availableNow=True)
        return writer.trigger(processingTime=f"{spec.operations.trigger.interval_seconds} seconds")

    return triggered


def replay_pending(
    spark: SparkSession,
    platform: PlatformConfig,
    spec: JobSpec,
    plan: QueryPlan,
    listener: TelemetryListener,
    shutdown: ShutdownRequest,
    after_batch: Callable[[], object] = lambda: None,
) -> int:
    """Replay the batches a rewind queued, one trigger-once query per batch; how many ran.

    Each batch runs with its original offsets (see `ops.recovery.rewind`), so it reads the same files under
    the same watermark as in the original run. A failing batch raises `StreamingQueryException`
    and stays queued; a stop request is honoured between batches and the rest stay queued.
    `after_batch` is called after each replayed batch.
    """
    paths = JobPaths.of(platform, spec)
    queued = pending_replay(paths)
    if queued:
        log.info("replaying rewound batches", first=queued[0], last=queued[-1], batches=len(queued))
    replayed = 0
    for batch_id in queued:
        if shutdown.requested:
            break
        if stage_replay_batch(paths, batch_id):
            query = plan(spark).trigger(once=True).start()
            listener.replay_runs.add(str(query.runId))
            query.awaitTermination()
            replayed += 1
            after_batch()
        finish_replay_batch(paths, batch_id)
    return replayed


def run_streaming_job(
    platform: PlatformConfig,
    spec: JobSpec,
    run_id: str,
    plan: QueryPlan,
    shutdown: ShutdownRequest,
    mode: RunMode = "continuous",
    taps: TapStarter | None = None,
    standby: WarmUp | None = None,
) -> int:
    """Run a job's query with telemetry until it stops, and return the process exit code.

    `plan` is the untriggered query: batches a rewind queued are replayed first, then the query
    runs with the spec's trigger (`continuous`), reads what input there is and ends
    (`available_now`), or does not start at all (`replay_only`).

    This is the driver's outermost loop, so it is where an unexpected error is caught: it is
    recorded in a terminated heartbeat (class and message) and the driver exits 1. `taps` starts
    the job's preview taps once its query runs; they are stopped when it ends. With `standby` (its
    warm-up) the driver is a warm standby: it warms up and waits for its grant first (`_stand_by`).
    """
    paths = JobPaths.of(platform, spec)
    listener = TelemetryListener(paths.heartbeat, spec.name, run_id)
    listener.export_operations(
        spec.operations, lambda: landing_backlog(list(paths.landing.values()), paths.sources)
    )
    if standby is not None:
        return _stand_by(platform, spec, run_id, plan, standby, shutdown, listener, taps)
    try:
        with listener.liveness, ExitStack() as metrics:
            _serve_job_metrics(metrics, platform, spec, listener)
            spark = build_session(platform, spec)
            log.info("spark session up", master=spark.sparkContext.master)
            try:
                return _run_query(spark, platform, spec, plan, mode, listener, shutdown, taps)
            finally:
                spark.stop()
    except ConfigError as exc:
        log.error("invalid job config", error=str(exc))
        listener.record_termination(type(exc).__name__, str(exc))
        return EXIT_CONFIG_ERROR
    except Exception as exc:
        return _failed(listener, type(exc).__name__, str(exc))


def _stand_by(
    platform: PlatformConfig,
    spec: JobSpec,
    run_id: str,
    plan: QueryPlan,
    warm_up: WarmUp,
    shutdown: ShutdownRequest,
    listener: TelemetryListener,
    taps: TapStarter | None,
) -> int:
    """A warm standby: session up, query planned and run once on scratch copies (`warm_up`), then
    wait for the grant and run as the job's driver. Until granted, its state and any failure go to
    `standby.json`, never to the job's heartbeat (which is the active driver's), and it holds
    neither the metrics port nor the checkpoint lock."""
    runtime_dir = JobPaths.of(platform, spec).runtime

    def status(state: StandbyState, detail: str = "") -> None:
        write_standby_status(runtime_dir, StandbyStatus(run_id, state, time.time(), detail))

    status("starting")
    try:
        spark = build_session(platform, spec)
    except Exception as exc:
        log.error("standby failed to start", error_class=type(exc).__name__, error=str(exc))
        status("failed", f"{type(exc).__name__}: {exc}")
        return EXIT_QUERY_FAILED
    try:
        try:
            # Planning analyses the whole query: its classes load and its config is checked now,
            # not after the take-over, which starts this very writer (analysis takes seconds).
            planned = plan(spark)
        except ConfigError as exc:
            log.error("standby cannot plan the query", error=str(exc))
            status("failed", f"{type(exc).__name__}: {exc}")
            return EXIT_CONFIG_ERROR
        # The first batch of a fresh JVM spends most of its time loading and compiling classes (the
        # source, the parse, the sink's writer): a warm-up batch here takes that off the take-over.
        warm_up(spark)
        status("ready")
        log.info("standby ready, waiting for the take-over grant")
        grant = wait_for_grant(runtime_dir, run_id, lambda: shutdown.requested)
        if grant is None:
            log.info("standby stopped before a take-over", signal=shutdown.signal_name)
            return EXIT_STOPPED
        log.info("take-over granted", replaces=grant.replaces_run_id)
        # The lock before anything of the job's: while another driver's JVM lives, this one must
        # not even bind the metrics port or write the heartbeat.
        checkpoint_lock = CheckpointLock(spark, runtime_dir)
        if not checkpoint_lock.acquire(lambda: shutdown.requested):
            log.info("standby stopped while waiting for the checkpoint lock", signal=shutdown.signal_name)
            return EXIT_STOPPED
        try:
            with listener.liveness, ExitStack() as metrics:
                _serve_job_metrics(metrics, platform, spec, listener)
                return _run_query(
                    spark,
                    platform,
                    spec,
                    lambda _: planned,
                    "continuous",
                    listener,
                    shutdown,
                    taps,
                    checkpoint_lock,
                )
        except ConfigError as exc:
            log.error("invalid job config", error=str(exc))
            listener.record_termination(type(exc).__name__, str(exc))
            return EXIT_CONFIG_ERROR
        except Exception as exc:
            return _failed(listener, type(exc).__name__, str(exc))
    finally:
        spark.stop()


def _serve_job_metrics(
    metrics: ExitStack, platform: PlatformConfig, spec: JobSpec, listener: TelemetryListener
) -> None:
    """Serve the job's metrics until `metrics` closes; a taken port is a `ConfigError` naming the
    job, the port and the field, so the supervisor holds the job instead of restarting it."""
    try:
        # The driver's bind address: loopback in the embedded platform; with none (the team
        # stack) every interface, so Prometheus in another container can scrape it.
        address = platform.spark.bind_address or "0.0.0.0"
        metrics.enter_context(serve_metrics(listener.registry, spec.operations.metrics_port, address))
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
        raise ConfigError(job_file(spec.name, platform.conf_dir), metrics_port_in_use(spec)) from exc


def _run_query(
    spark: SparkSession,
    platform: PlatformConfig,
    spec: JobSpec,
    plan: QueryPlan,
    mode: RunMode,
    listener: TelemetryListener,
    shutdown: ShutdownRequest,
    taps: TapStarter | None = None,
    checkpoint_lock: CheckpointLock | None = None,
) -> int:
    """Plan, take the checkpoint lock (unless the caller holds it already), then replay and run."""
    listener.liveness.enter("planning", spark.sparkContext)
    spark.streams.addListener(listener)
    try:
        plan(spark)
    except ConfigError as exc:
        log.error("cannot plan query", error=str(exc))
        listener.record_termination(type(exc).__name__, str(exc))
        return EXIT_CONFIG_ERROR
    log.info("query planned")
    # Held by this JVM until the query ends: no other driver of the job can start one meanwhile.
    if checkpoint_lock is None:
        checkpoint_lock = CheckpointLock(spark, JobPaths.of(platform, spec).runtime)
    if not checkpoint_lock.acquire(lambda: shutdown.requested):
        log.info("stopped while waiting for the checkpoint lock", signal=shutdown.signal_name)
        listener.record_termination(None, None)
        return EXIT_STOPPED
    log.info("checkpoint lock held")
    try:
        return _run_locked(spark, platform, spec, plan, mode, listener, shutdown, taps)
    finally:
        checkpoint_lock.release()


def _run_locked(
    spark: SparkSession,
    platform: PlatformConfig,
    spec: JobSpec,
    plan: QueryPlan,
    mode: RunMode,
    listener: TelemetryListener,
    shutdown: ShutdownRequest,
    taps: TapStarter | None,
) -> int:
    """The replay and the query, run while this driver holds the job's checkpoint lock; a job's
    view (`pipeline.view`) is reconciled with its sink first and published as batches commit."""
    publisher = view_publisher(platform, spec) if mode != "replay_only" else None
    publish = publisher.poll if publisher is not None else lambda: 0
    try:
        if publisher is not None:
            publisher.reconcile()
        replay_pending(spark, platform, spec, plan, listener, shutdown, publish)
        if mode == "replay_only" and not shutdown.requested and spec.operations.upgrade.output_check:
            compare_with_running(spark, platform, spec, JobPaths.of(platform, spec))
        if shutdown.requested or mode == "replay_only":
            log.info("replay ended", signal=shutdown.signal_name, mode=mode)
            listener.record_termination(None, None)
            return EXIT_STOPPED
        query = with_trigger(plan, spec, mode == "available_now")(spark).start()
        log.info("query started", query_id=str(query.id), metrics_port=spec.operations.metrics_port)
        tap_queries = taps(spark, mode == "available_now") if taps else []
        try:
            _await_query(query, shutdown, spec.operations.shutdown_timeout_seconds, publish)
        finally:
            _end_taps(tap_queries, wait=mode == "available_now" and not shutdown.requested)
            publish()
    except StreamingQueryException as exc:
        # The listener bus delivers the termination event asynchronously; write our own record
        # only if it has not arrived, so its account (with Spark's error condition) wins.
        if not listener.wait_terminated(timeout=10.0):
            listener.record_termination(*describe_failure(str(exc), None))
        log.error("query failed", error=listener.last_error)
        return EXIT_QUERY_FAILED
    finally:
        if publisher is not None:
            publisher.close()
    listener.wait_terminated(timeout=10.0)
    log.info("query stopped", signal=shutdown.signal_name)
    return EXIT_STOPPED


def view_publisher(platform: PlatformConfig, spec: JobSpec) -> ViewPublisher | None:
    """The publisher of the job's view, or None for a job without one; a view with no database to
    publish to is an error of the job's config."""
    pipeline = spec.pipeline
    if not isinstance(pipeline, TeamPipeline) or pipeline.view is None:
        return None
    # Imported here: psycopg and pyarrow load only in the drivers of jobs with a view.
    from ops.driver.view_publisher import ViewPublisher
    from ops.views import database_url

    try:
        url = database_url(platform)
    except ViewStoreError as error:
        raise ConfigError(job_file(spec.name, platform.conf_dir), f"pipeline.view: {error}") from error
    return ViewPublisher(spec.name, pipeline.view, JobPaths.of(platform, spec).sink_log, url)


def _end_taps(tap_queries: list[StreamingQuery], wait: bool) -> None:
    """Stop the preview taps; with `wait` (available-now) let them read their input first."""
    for tap in tap_queries:
        if wait and tap.isActive:
            tap.awaitTermination(300)
        if tap.isActive:
            tap.stop()
        if tap.exception() is not None:
            log.warning("preview tap failed", tap=tap.name, error=str(tap.exception()).splitlines()[0])


def _failed(listener: TelemetryListener, error_class: str, message: str) -> int:
    log.error("driver failed", error_class=error_class, error=message)
    listener.record_termination(error_class, message)
    return EXIT_QUERY_FAILED
