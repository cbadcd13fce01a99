"""The driver-side `StreamingQueryListener`: heartbeat file and Prometheus metrics.

Spark has no REST endpoint for Structured Streaming, so every driver installs a
`TelemetryListener`. On query start, every progress event, every idle event and on termination it
rewrites the job's heartbeat (`ops.driver.telemetry`), keeping the last `RECENT_BATCHES` batches;
after each batch it also rewrites the job's progress history for the job board
(`ops.driver.history`); and it updates gauges on a registry of its own that `serve_metrics`
exposes on 127.0.0.1. Each batch's sample names the versions of the job's script UDFs it ran,
and the heartbeat the versions the newest batch refused (`ops.driver.udf_versions`). It holds the
driver's `LivenessReporter` (`ops.driver.reporter`), which the driver runs from before its JVM
starts: the query's start moves it to `running`, and every event counts as a move.

The progress record is read from its JSON form, which is the same in classic PySpark and Spark
Connect. `backlog_files` is filled from a source's `numFilesOutstanding` metric when one reports
it; Spark 4.3's file source reports no metrics, so for landing-zone jobs it is the landing backlog
measured after the batch when the job is autoscaled (the autoscaler's window needs it), else null.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIServer

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server
from pyspark.sql.streaming import StreamingQueryListener
from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
)

from ops.driver.history import read_history, write_history
from ops.driver.preview import is_tap_query
from ops.driver.reporter import LivenessReporter
from ops.driver.telemetry import (
    JOB_LABEL,
    RECENT_BATCHES,
    BatchSample,
    Heartbeat,
    HeartbeatEvent,
    write_heartbeat,
)
from ops.driver.udf_versions import read_decision
from ops.spec.job import Operations
from ops.spec.paths import LIVENESS_FILE, UDF_VERSIONS_DIR

# Long stack traces stay in the driver log; the heartbeat keeps enough to page on.
MAX_ERROR_MESSAGE = 2000
# How Python starts a traceback, in the text of a JVM exception that wraps a Python worker's error.
PYTHON_TRACEBACK = "Traceback (most recent call last):"
BACKLOG_FILES_METRIC = "numFilesOutstanding"
# `jobs.parsing.parse_events` observes each input of a job under "parse.<input>" (Spark's observed
# metrics, in each progress record's `observedMetrics`), counting the lines with a duplicate key
# and the blank lines it skipped.
PARSE_OBSERVATION_PREFIX = "parse."
DUPLICATE_KEY_LINES = "duplicate_key_lines"
BLANK_LINES = "blank_lines"

log = structlog.get_logger("streamwarden.listener")


def _finite(value: Any) -> float:
    """A rate as a float; Spark omits NaN/infinite rates (first batch, zero duration)."""
    number = float(value) if value is not None else 0.0
    return number if math.isfinite(number) else 0.0


def batch_sample(progress: Mapping[str, Any]) -> BatchSample:
    """The `BatchSample` of one progress record (the parsed `StreamingQueryProgress.json`)."""
    outstanding = [
        int(source["metrics"][BACKLOG_FILES_METRIC])
        for source in progress.get("sources", [])
        if BACKLOG_FILES_METRIC in (source.get("metrics") or {})
    ]
    return BatchSample(
        batch_id=int(progress["batchId"]),
        num_input_rows=int(progress.get("numInputRows", 0)),
        input_rows_per_second=_finite(progress.get("inputRowsPerSecond")),
        processed_rows_per_second=_finite(progress.get("processedRowsPerSecond")),
        duration_ms=int(progress.get("batchDuration", 0)),
        backlog_files=sum(outstanding) if outstanding else None,
        started_at=_epoch(progress.get("timestamp")),
    )


def _epoch(timestamp: Any) -> float | None:
    """A progress record's ISO 8601 UTC timestamp as epoch seconds (None if absent)."""
    return datetime.fromisoformat(str(timestamp)).timestamp() if timestamp else None


def parse_observation(input_name: str) -> str:
    """The name `parse_events` observes an input of the job under."""
    return f"{PARSE_OBSERVATION_PREFIX}{input_name}"


def duplicate_key_lines(progress: Mapping[str, Any]) -> dict[str, int]:
    """Lines with a duplicate key in the batch, by input (inputs with none included)."""
    return _parse_counts(progress, DUPLICATE_KEY_LINES)


def blank_lines(progress: Mapping[str, Any]) -> dict[str, int]:
    """Blank lines the parse skipped in the batch, by input (inputs with none included)."""
    return _parse_counts(progress, BLANK_LINES)


def _parse_counts(progress: Mapping[str, Any], metric: str) -> dict[str, int]:
    observed = progress.get("observedMetrics") or {}
    return {
        name.removeprefix(PARSE_OBSERVATION_PREFIX): int(metrics.get(metric) or 0)
        for name, metrics in observed.items()
        if name.startswith(PARSE_OBSERVATION_PREFIX)
    }


def state_rows(progress: Mapping[str, Any]) -> int | None:
    """Rows held in state across all stateful operators, or None for a stateless query."""
    return _state_total(progress, "numRowsTotal")


def state_memory_bytes(progress: Mapping[str, Any]) -> int | None:
    """Memory the state stores of all stateful operators use, or None for a stateless query."""
    return _state_total(progress, "memoryUsedBytes")


def _state_total(progress: Mapping[str, Any], metric: str) -> int | None:
    operators = progress.get("stateOperators") or []
    return sum(int(operator.get(metric, 0)) for operator in operators) if operators else None


def describe_failure(exception_text: str, error_condition: str | None) -> tuple[str, str]:
    """(error class, message) from Spark's exception text, whose first line is `Class: message`.

    Spark's error condition (e.g. `FAILED_READ_FILE`) is kept in front of the message when the
    text does not already carry it.
    """
    first_line = exception_text.strip().partition("\n")[0]
    error_class, separator, message = first_line.partition(": ")
    if not separator or " " in error_class:
        error_class, message = "StreamingQueryException", first_line
    if error_condition and error_condition not in message:
        message = f"[{error_condition}] {message}"
    # An error raised in Python (a UDF, a pandas function) has its traceback after the first
    # line, whatever JVM exception wraps it: keep where it was raised and what.
    python_error = _innermost_python_frame(exception_text)
    if python_error:
        message = f"{message[: MAX_ERROR_MESSAGE - len(python_error) - 1]}\n{python_error}"
    return error_class, message[:MAX_ERROR_MESSAGE]


def _innermost_python_frame(text: str) -> str:
    """The innermost frame of the last Python traceback in `text` (its `File` line and source
    line) and the error lines after it, up to the JVM's stack; empty without a traceback."""
    lines = text[text.rfind(PYTHON_TRACEBACK) :].splitlines() if PYTHON_TRACEBACK in text else []
    frames = [index for index, line in enumerate(lines) if line.lstrip().startswith('File "')]
    if not frames:
        return ""
    tail: list[str] = []
    for line in lines[frames[-1] :]:
        if line.lstrip().startswith("at ") or (tail and not line.strip()):
            break
        tail.append(line.rstrip())
    return "\n".join(tail)


class _Metrics:
    """The driver's Prometheus metrics, on a registry of their own (one driver per process), each
    labelled with the job's name."""

    def __init__(self, registry: CollectorRegistry, job: str) -> None:
        def gauge(name: str, documentation: str) -> Gauge:
            return Gauge(name, documentation, [JOB_LABEL], registry=registry).labels(job)

        def counter(name: str, documentation: str) -> Counter:
            return Counter(name, documentation, [JOB_LABEL], registry=registry).labels(job)

        self.last_batch_id = gauge(
            "streamwarden_last_committed_batch_id", "Id of the newest committed micro-batch"
        )
        self.input_rows = counter("streamwarden_input_rows", "Rows read by committed micro-batches")
        self.input_rate = gauge("streamwarden_input_rows_per_second", "Input rate of the newest batch")
        self.processed_rate = gauge(
            "streamwarden_processed_rows_per_second", "Processing rate of the newest batch"
        )
        self.batch_duration = gauge("streamwarden_batch_duration_seconds", "Duration of the newest batch")
        self.state_rows = gauge("streamwarden_state_rows", "Rows held in state by all stateful operators")
        self.dropped_by_watermark = counter(
            "streamwarden_rows_dropped_by_watermark",
            "Rows Spark's stateful operators dropped as behind the watermark (jobs with a `late` "
            "output route theirs there instead)",
        )
        self.state_memory = gauge(
            "streamwarden_state_memory_bytes", "Memory used by the state stores of all stateful operators"
        )
        self.duplicate_key_lines = Counter(
            "streamwarden_duplicate_key_lines",
            "Lines in which an object the job reads has a key more than once (the last value is used)",
            [JOB_LABEL, "input"],
            registry=registry,
        )
        self.blank_lines = Counter(
            "streamwarden_blank_lines",
            "Empty or whitespace-only lines the parse skipped (neither events nor dead letters)",
            [JOB_LABEL, "input"],
            registry=registry,
        )
        self.heartbeat = gauge(
            "streamwarden_heartbeat_timestamp_seconds", "When the driver last wrote its heartbeat"
        )
        self.watermark = gauge(
            "streamwarden_watermark_timestamp_seconds",
            "The query's event-time watermark (0 until a batch with event times sets one)",
        )
        self.started = gauge("streamwarden_driver_start_time_seconds", "When this driver process started")
        self.started.set(time.time())
        # The job file's settings the alert rules compare against, so Prometheus judges each job
        # by its own thresholds, as the supervisor does. The optional limits are only exported
        # when set: no series, no alert.
        self.backlog = gauge(
            "streamwarden_backlog_files", "Landing files the query has not read yet (measured at scrape time)"
        )
        self.trigger_interval = gauge(
            "streamwarden_trigger_interval_seconds", "The job's operations.trigger.interval_seconds"
        )
        self.stuck_grace = gauge(
            "streamwarden_stuck_grace_seconds", "The job's operations.health.stuck_grace_seconds"
        )
        self.max_state_memory = Gauge(
            "streamwarden_max_state_memory_bytes",
            "The job's operations.health.max_state_memory_mb in bytes (absent when unset)",
            [JOB_LABEL],
            registry=registry,
        )
        self.max_watermark_lag = Gauge(
            "streamwarden_max_watermark_lag_seconds",
            "The job's operations.health.max_watermark_lag_seconds (absent when unset)",
            [JOB_LABEL],
            registry=registry,
        )


@contextmanager
def serve_metrics(registry: CollectorRegistry, port: int, address: str) -> Iterator[WSGIServer]:
    """Serve `registry` on `address`:`port` from a daemon thread while the context is open."""
    server, thread = start_http_server(port, addr=address, registry=registry)
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


class TelemetryListener(StreamingQueryListener):
    """Writes the job's heartbeat and updates its metrics on every query event.

    Events arrive on Spark's listener thread; `record_termination` may also be called from the
    driver's main thread, so writes are serialized by a lock.
    """

    def __init__(self, heartbeat: Path, job: str, run_id: str) -> None:
        self.job = job
        self.run_id = run_id
        self.path = heartbeat
        # The job's rate and batch history outlives this driver (`ops.driver.history`).
        self._history = read_history(heartbeat)
        self.registry = CollectorRegistry()
        self._metrics = _Metrics(self.registry, job)
        self._recent: deque[BatchSample] = deque(maxlen=RECENT_BATCHES)
        self._batch_id: int | None = None
        self._state_rows: int | None = None
        self._state_memory_bytes: int | None = None
        self._watermark: str | None = None
        self._lock = threading.Lock()
        self._terminated = threading.Event()
        self.last_error: str | None = None
        # Run ids of the trigger-once queries that replay a rewound job's batches: their normal
        # end is a step of the replay, not the end of the job.
        self.replay_runs: set[str] = set()
        # Ids of preview tap queries (`ops.driver.preview`): their events say nothing about the job.
        self._taps: set[str] = set()
        # Measures the landing backlog after each batch when the job is autoscaled, else None.
        self._batch_backlog: Callable[[], int | None] | None = None
        # What the driver is doing between the heartbeats; the driver runs it (`with
        # listener.liveness:`), every query event is a move.
        self.liveness = LivenessReporter(heartbeat.with_name(LIVENESS_FILE), run_id)
        # The script UDF versions of the newest batch that called one (`ops.driver.udf_versions`):
        # a batch that did not keeps those in force.
        self._udf_store = heartbeat.with_name(UDF_VERSIONS_DIR)
        self._udf_versions: dict[str, str] | None = None
        self._udf_refused: dict[str, str] = {}

    def export_operations(self, operations: Operations, backlog: Callable[[], int | None]) -> None:
        """Export the job's trigger and health thresholds, and its landing backlog as measured by
        `backlog` whenever Prometheus scrapes (not per batch: listing the landing directories costs
        as much as the supervisor's look, and nobody may be scraping)."""
        health = operations.health
        self._metrics.trigger_interval.set(operations.trigger.interval_seconds)
        self._metrics.stuck_grace.set(health.stuck_grace_seconds)
        if health.max_state_memory_mb is not None:
            self._metrics.max_state_memory.labels(self.job).set(health.max_state_memory_mb * 1e6)
        if health.max_watermark_lag_seconds is not None:
            self._metrics.max_watermark_lag.labels(self.job).set(health.max_watermark_lag_seconds)

        def backlog_files() -> float:
            # A scrape that fails reads as a dead driver (StreamwardenJobDown), so a listing that
            # races Spark compacting or purging its source log reports no figure instead.
            try:
                files = backlog()
            except (OSError, ValueError) as error:
                log.warning("landing backlog not measured", error=str(error))
                return math.nan
            return math.nan if files is None else float(files)

        self._metrics.backlog.set_function(backlog_files)
        # The autoscaler needs the backlog at each batch's end (`ops.control.autoscaler.LoadWindow`):
        # a job it sizes pays the listing once per batch.
        if operations.autoscaling.mode != "off":
            self._batch_backlog = backlog

    def onQueryStarted(self, event: QueryStartedEvent) -> None:
        if is_tap_query(event.name):
            self._taps.add(str(event.id))
            return
        self.liveness.enter("running")
        self._write("started")

    def onQueryProgress(self, event: QueryProgressEvent) -> None:
        progress = json.loads(event.progress.json)
        if is_tap_query(progress.get("name")):
            return
        sample = batch_sample(progress)
        query = progress.get("id")
        decision = None if query is None else read_decision(self._udf_store, str(query), sample.batch_id)
        if decision is not None:
            self._udf_versions = decision.versions
            self._udf_refused = {name: refusal.line(name) for name, refusal in decision.refused.items()}
        sample = replace(sample, udf_versions=self._udf_versions)
        if sample.backlog_files is None and self._batch_backlog is not None:
            try:
                sample = replace(sample, backlog_files=self._batch_backlog())
            except (OSError, ValueError) as error:
                log.warning("landing backlog not measured", error=str(error))
        with self._lock:
            self._recent.append(sample)
            self._batch_id = sample.batch_id
            self._state_rows = state_rows(progress)
            self._state_memory_bytes = state_memory_bytes(progress)
            self._watermark = (progress.get("eventTime") or {}).get("watermark")
            self._history = self._history.with_batch(progress, time.time())
            write_history(self.path, self._history)
        self._metrics.last_batch_id.set(sample.batch_id)
        self._metrics.input_rows.inc(sample.num_input_rows)
        self._metrics.dropped_by_watermark.inc(_state_total(progress, "numRowsDroppedByWatermark") or 0)
        for input_name, lines in duplicate_key_lines(progress).items():
            self._metrics.duplicate_key_lines.labels(self.job, input_name).inc(lines)
        for input_name, lines in blank_lines(progress).items():
            self._metrics.blank_lines.labels(self.job, input_name).inc(lines)
        self._metrics.input_rate.set(sample.input_rows_per_second)
        self._metrics.processed_rate.set(sample.processed_rows_per_second)
        self._metrics.batch_duration.set(sample.duration_ms / 1000)
        if self._state_rows is not None:
            self._metrics.state_rows.set(self._state_rows)
        if self._state_memory_bytes is not None:
            self._metrics.state_memory.set(self._state_memory_bytes)
        if self._watermark is not None:
            self._metrics.watermark.set(datetime.fromisoformat(self._watermark).timestamp())
        log.info(
            "batch",
            batch=sample.batch_id,
            rows=sample.num_input_rows,
            input_rate=round(sample.input_rows_per_second, 1),
            processed_rate=round(sample.processed_rows_per_second, 1),
            duration_ms=sample.duration_ms,
        )
        self.liveness.moved()
        self._write("progress")

    def onQueryIdle(self, event: QueryIdleEvent) -> None:
        if str(event.id) in self._taps:
            return
        self.liveness.moved()
        self._write("idle")

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:
        if str(event.id) in self._taps:
            return
        if str(event.runId) in self.replay_runs and not event.exception:
            return
        if event.exception:
            self.record_termination(*describe_failure(event.exception, event.errorClassOnException))
        else:
            self.record_termination(None, None)

    def record_termination(self, error_class: str | None, message: str | None) -> None:
        """Write the terminated heartbeat, with the error that ended the driver if any."""
        self.last_error = None if error_class is None else f"{error_class}: {message}"
        self._write("terminated", error_class=error_class, error_message=message)
        self._terminated.set()

    def wait_terminated(self, timeout: float) -> bool:
        """Whether the terminated heartbeat has been written, waiting up to `timeout` seconds."""
        return self._terminated.wait(timeout)

    def _write(
        self, event: HeartbeatEvent, *, error_class: str | None = None, error_message: str | None = None
    ) -> None:
        with self._lock:
            heartbeat = Heartbeat(
                job=self.job,
                run_id=self.run_id,
                pid=os.getpid(),
                event=event,
                at=time.time(),
                batch_id=self._batch_id,
                state_rows=self._state_rows,
                state_memory_bytes=self._state_memory_bytes,
                watermark=self._watermark,
                error_class=error_class,
                error_message=error_message,
                recent=tuple(self._recent),
                udf_refused=self._udf_refused,
            )
            write_heartbeat(self.path, heartbeat)
        self._metrics.heartbeat.set(heartbeat.at)
