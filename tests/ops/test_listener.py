"""The driver's telemetry listener against a real local streaming query."""

from __future__ import annotations

import json
import math
import time
import urllib.request
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import pytest
from prometheus_client.parser import text_string_to_metric_families
from pyspark.sql import SparkSession

from ops.driver.history import read_history
from ops.driver.listener import (
    TelemetryListener,
    batch_sample,
    blank_lines,
    describe_failure,
    duplicate_key_lines,
    serve_metrics,
    state_memory_bytes,
    state_rows,
)
from ops.driver.telemetry import Heartbeat, read_heartbeat
from ops.spec.job import find_job
from ops.spec.platform import PlatformConfig
from tests.support.platform import job_paths
from tests.support.ports import free_test_port


def test_batch_sample_reads_a_progress_record() -> None:
    progress = {
        "batchId": 4,
        "timestamp": "2026-11-24T22:07:01.250Z",
        "numInputRows": 120,
        "inputRowsPerSecond": 60.0,
        "processedRowsPerSecond": 240.5,
        "batchDuration": 500,
        "sources": [{"metrics": {"numFilesOutstanding": "7"}}, {"metrics": {}}],
        "stateOperators": [
            {"numRowsTotal": 3, "memoryUsedBytes": 1000},
            {"numRowsTotal": 5, "memoryUsedBytes": 24},
        ],
    }
    sample = batch_sample(progress)
    assert (sample.batch_id, sample.num_input_rows, sample.duration_ms, sample.backlog_files) == (
        4,
        120,
        500,
        7,
    )
    assert (sample.input_rows_per_second, sample.processed_rows_per_second) == (60.0, 240.5)
    assert sample.started_at == datetime(2026, 11, 24, 22, 7, 1, 250_000, tzinfo=UTC).timestamp()
    assert (state_rows(progress), state_memory_bytes(progress)) == (8, 1024)
    # Spark leaves out rates it cannot compute, and stateless queries have no operators.
    bare = batch_sample({"batchId": 0, "sources": [{"metrics": {}}]})
    assert (bare.input_rows_per_second, bare.backlog_files, bare.started_at) == (0.0, None, None)
    assert state_rows({"stateOperators": []}) is None and state_memory_bytes({}) is None


def test_duplicate_key_and_blank_lines_are_read_from_the_parse_observations_by_input() -> None:
    progress = {
        "observedMetrics": {
            "parse.web": {"duplicate_key_lines": 3, "blank_lines": 2},
            "parse.app": {"duplicate_key_lines": 0, "blank_lines": 0},
            "quality": {"duplicate_key_lines": 9, "blank_lines": 9},
        }
    }
    assert duplicate_key_lines(progress) == {"web": 3, "app": 0}
    assert blank_lines(progress) == {"web": 2, "app": 0}
    assert duplicate_key_lines({}) == {} and blank_lines({}) == {}


def test_describe_failure_keeps_class_condition_and_message() -> None:
    text = "org.apache.spark.SparkRuntimeException: boom happened\n\tat org.apache.X(X.scala:1)"
    assert describe_failure(text, "USER_RAISED_EXCEPTION") == (
        "org.apache.spark.SparkRuntimeException",
        "[USER_RAISED_EXCEPTION] boom happened",
    )
    assert describe_failure("something odd", None) == ("StreamingQueryException", "something odd")


def test_describe_failure_keeps_where_a_python_worker_raised_whatever_wraps_it() -> None:
    text = (
        "org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 3.0 failed "
        "1 times, most recent failure: Lost task 0.0: org.apache.spark.api.python.PythonException: "
        "Traceback (most recent call last):\n"
        '  File "/venv/pyspark/worker.py", line 2015, in main\n'
        "    process()\n"
        '  File "/srv/team/fraud/rules.py", line 9, in size_of\n'
        '    raise ValueError(f"amount {value} is out of range")\n'
        "ValueError: amount 123456.0 is out of range\n"
        "\n"
        "\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException(X.scala:1)\n"
        "\tat org.apache.spark.scheduler.Task.run(Task.scala:147)\n"
    )

    error_class, message = describe_failure(text, None)

    assert error_class == "org.apache.spark.SparkException"
    assert message.startswith("Job aborted due to stage failure: Task 0 in stage 3.0 failed")
    assert message.endswith(
        '\n  File "/srv/team/fraud/rules.py", line 9, in size_of\n'
        '    raise ValueError(f"amount {value} is out of range")\n'
        "ValueError: amount 123456.0 is out of range"
    )


@pytest.fixture
def listener(spark: SparkSession, platform_conf: PlatformConfig) -> Iterator[TelemetryListener]:
    listener = TelemetryListener(job_paths(platform_conf, "router").heartbeat, "router", "run-7")
    spark.streams.addListener(listener)
    yield listener
    spark.streams.removeListener(listener)


def wait_for(listener: TelemetryListener, accept: Callable[[Heartbeat], bool]) -> Heartbeat:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        heartbeat = read_heartbeat(listener.path)
        if heartbeat is not None and accept(heartbeat):
            return heartbeat
        time.sleep(0.1)
    raise AssertionError(f"no such heartbeat; last {read_heartbeat(listener.path)}")


def test_listener_writes_heartbeats_and_serves_metrics(
    spark: SparkSession, listener: TelemetryListener, tmp_path: Path
) -> None:
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "a.txt").write_text("x\ny\nx\n")
    counts = spark.readStream.text(str(landing)).groupBy("value").count()
    query = (
        counts.writeStream.format("memory")
        .queryName("listener_test")
        .outputMode("complete")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    port = free_test_port()
    try:
        wait_for(listener, lambda hb: hb.event in ("started", "progress", "idle"))
        first = wait_for(listener, lambda hb: hb.batch_id == 0)
        assert first.last_sample is not None and first.last_sample.num_input_rows == 3
        assert first.state_rows == 2 and first.watermark is None
        (landing / "b.txt").write_text("z\n")
        second = wait_for(listener, lambda hb: hb.batch_id == 1)
        assert [sample.batch_id for sample in second.recent] == [0, 1]
        assert second.state_rows == 3
        assert second.state_memory_bytes is not None and second.state_memory_bytes > 0
        # The job board's history beside the heartbeat: the batches with their time breakdown.
        history = read_history(listener.path)
        assert [batch["batchId"] for batch in history.batches] == [0, 1]
        assert {"addBatch", "triggerExecution"} <= set(history.batches[-1]["durationMs"])
        assert sum(minute.input_rows for minute in history.minutes) == 4
        assert history.last_batch_end is not None
        wait_for(listener, lambda hb: hb.event == "idle")
        with (
            serve_metrics(listener.registry, port, "127.0.0.1"),
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response,
        ):
            metrics = response.read().decode()
        job = '{job_name="router"}'
        assert f"streamwarden_input_rows_total{job} 4.0" in metrics
        assert f"streamwarden_last_committed_batch_id{job} 1.0" in metrics
        assert f"streamwarden_state_rows{job} 3.0" in metrics
        assert f"streamwarden_rows_dropped_by_watermark_total{job} 0.0" in metrics
        assert f"streamwarden_state_memory_bytes{job} {float(second.state_memory_bytes)}" in metrics
        # Every sample of every driver metric names its job.
        samples = [line for line in metrics.splitlines() if line.startswith("streamwarden_")]
        assert len(samples) >= 9 and all(job in line for line in samples), samples
    finally:
        query.stop()
    assert listener.wait_terminated(timeout=30)
    final = read_heartbeat(listener.path)
    assert final is not None and final.event == "terminated" and final.error_class is None
    assert (final.job, final.run_id, final.batch_id) == ("router", "run-7", 1)


def test_listener_exports_thresholds_backlog_and_watermark_for_the_alert_rules(
    platform_conf: PlatformConfig,
) -> None:
    """What conf/prometheus/rules compare against: the job's own thresholds (the optional limits
    only when set), the landing backlog measured at scrape time, and the watermark in seconds."""
    spec = find_job("router", platform_conf.conf_dir)
    limited = spec.operations.model_copy(
        update={
            "health": spec.operations.health.model_copy(
                update={"max_state_memory_mb": 256.0, "max_watermark_lag_seconds": 600.0}
            )
        }
    )
    backlog: list[int | None] = [None]
    port = free_test_port()

    def scrape(listener: TelemetryListener) -> dict[str, float]:
        with (
            serve_metrics(listener.registry, port, "127.0.0.1"),
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response,
        ):
            return {
                sample.name: sample.value
                for family in text_string_to_metric_families(response.read().decode())
                for sample in family.samples
            }

    unlimited = TelemetryListener(job_paths(platform_conf, "router").heartbeat, "router", "run-1")
    unlimited.export_operations(spec.operations, lambda: backlog[0])
    metrics = scrape(unlimited)
    assert metrics["streamwarden_trigger_interval_seconds"] == spec.operations.trigger.interval_seconds
    assert metrics["streamwarden_stuck_grace_seconds"] == spec.operations.health.stuck_grace_seconds
    assert "streamwarden_max_state_memory_bytes" not in metrics
    assert "streamwarden_max_watermark_lag_seconds" not in metrics
    assert math.isnan(metrics["streamwarden_backlog_files"]), "no backlog before the first batch"
    assert metrics["streamwarden_watermark_timestamp_seconds"] == 0.0
    assert 0 < time.time() - metrics["streamwarden_driver_start_time_seconds"] < 60

    listener = TelemetryListener(job_paths(platform_conf, "router").heartbeat, "router", "run-2")
    listener.export_operations(limited, lambda: backlog[0])
    progress = {"batchId": 3, "numInputRows": 5, "eventTime": {"watermark": "2026-11-24T10:00:00.000Z"}}
    # The listener reads an event's progress as JSON, as in classic PySpark and Spark Connect.
    listener.onQueryProgress(SimpleNamespace(progress=SimpleNamespace(json=json.dumps(progress))))  # type: ignore[arg-type]
    backlog[0] = 7
    metrics = scrape(listener)
    assert metrics["streamwarden_max_state_memory_bytes"] == 256e6
    assert metrics["streamwarden_max_watermark_lag_seconds"] == 600.0
    assert metrics["streamwarden_backlog_files"] == 7.0, "measured when scraped"
    assert (
        metrics["streamwarden_watermark_timestamp_seconds"]
        == datetime(2026, 11, 24, 10, tzinfo=UTC).timestamp()
    )

    def purged_under_the_listing() -> int | None:
        raise FileNotFoundError("sources/0/9.compact")

    racing = TelemetryListener(job_paths(platform_conf, "router").heartbeat, "router", "run-3")
    racing.export_operations(spec.operations, purged_under_the_listing)
    assert math.isnan(scrape(racing)["streamwarden_backlog_files"]), "a listing race fails no scrape"


def test_an_autoscaled_job_records_its_landing_backlog_with_each_batch(platform_conf: PlatformConfig) -> None:
    spec = find_job("router", platform_conf.conf_dir)
    assert spec.operations.autoscaling.mode == "recommend", "the demo router's"
    autoscaled = spec.operations
    backlog = [4]
    listener = TelemetryListener(job_paths(platform_conf, "router").heartbeat, "router", "run-1")
    listener.export_operations(autoscaled, lambda: backlog[0])
    for batch_id in range(2):
        progress = {"batchId": batch_id, "numInputRows": 5, "batchDuration": 100}
        listener.onQueryProgress(SimpleNamespace(progress=SimpleNamespace(json=json.dumps(progress))))  # type: ignore[arg-type]
        backlog[0] = 9
    heartbeat = read_heartbeat(job_paths(platform_conf, "router").heartbeat)
    assert heartbeat is not None
    assert [sample.backlog_files for sample in heartbeat.recent] == [4, 9]

    # Autoscaling off (the default): no listing per batch.
    off = spec.operations.model_copy(
        update={"autoscaling": spec.operations.autoscaling.model_copy(update={"mode": "off"})}
    )
    plain = TelemetryListener(job_paths(platform_conf, "router").heartbeat, "router", "run-2")
    plain.export_operations(off, lambda: backlog[0])
    plain.onQueryProgress(SimpleNamespace(progress=SimpleNamespace(json=json.dumps({"batchId": 0}))))  # type: ignore[arg-type]
    heartbeat = read_heartbeat(job_paths(platform_conf, "router").heartbeat)
    assert heartbeat is not None and [sample.backlog_files for sample in heartbeat.recent] == [None]
