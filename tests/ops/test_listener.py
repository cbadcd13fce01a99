"""The driver's telemetry listener against a real local streaming query."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from ops.driver.history import read_history
from ops.driver.listener import (
    TelemetryListener,
    batch_sample,
    describe_failure,
    duplicate_key_lines,
    serve_metrics,
    state_memory_bytes,
    state_rows,
)
from ops.driver.telemetry import Heartbeat, read_heartbeat
from ops.spec.platform import PlatformConfig
from tests.support.platform import job_paths
from tests.support.ports import free_test_port


def test_batch_sample_reads_a_progress_record() -> None:
    progress = {
        "batchId": 4,
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
    assert (state_rows(progress), state_memory_bytes(progress)) == (8, 1024)
    # Spark leaves out rates it cannot compute, and stateless queries have no operators.
    bare = batch_sample({"batchId": 0, "sources": [{"metrics": {}}]})
    assert (bare.input_rows_per_second, bare.backlog_files) == (0.0, None)
    assert state_rows({"stateOperators": []}) is None and state_memory_bytes({}) is None


def test_duplicate_key_lines_are_read_from_the_parse_observations_by_input() -> None:
    progress = {
        "observedMetrics": {
            "parse.web": {"duplicate_key_lines": 3},
            "parse.app": {"duplicate_key_lines": 0},
            "quality": {"duplicate_key_lines": 9},
        }
    }
    assert duplicate_key_lines(progress) == {"web": 3, "app": 0}
    assert duplicate_key_lines({}) == {}


def test_describe_failure_keeps_class_condition_and_message() -> None:
    text = "org.apache.spark.SparkRuntimeException: boom happened\n\tat org.apache.X(X.scala:1)"
    assert describe_failure(text, "USER_RAISED_EXCEPTION") == (
        "org.apache.spark.SparkRuntimeException",
        "[USER_RAISED_EXCEPTION] boom happened",
    )
    assert describe_failure("something odd", None) == ("StreamingQueryException", "something odd")


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
            serve_metrics(listener.registry, port),
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
