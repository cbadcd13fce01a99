"""The real router driver (`python -m jobs.runner`) over generated landing files."""

from __future__ import annotations

import base64
import json
import signal
import socket
import urllib.request
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from jobs.parsing import INVALID_UTF8
from jobs.router.transform import read_route
from ops.atomic import write_atomically
from ops.driver.telemetry import Heartbeat, read_heartbeat
from ops.spec.job import find_job
from ops.spec.pipelines import DEAD_LETTER_ROUTE
from ops.spec.platform import PlatformConfig
from synthetic.generator import TYPED_FIELDS, GeneratedBatch, MalformedLine, write_batch
from tests.support.drivers import Driver, edit_job, fast_trigger

REPO_ROOT = Path(__file__).resolve().parents[2]
EU = {"DE", "FR", "ES", "IT", "NL"}
# The router.yaml routes as plain predicates over the generator's event dicts.
ROUTE_PREDICATES: dict[str, Callable[[dict[str, Any]], bool]] = {
    "purchases": lambda e: e["event_type"] == "purchase" and e.get("amount", 0) > 0,
    "eu_views": lambda e: e["event_type"] == "view" and e.get("country") in EU,
    "mobile_activity": lambda e: e.get("device") in {"ios", "android"},
}


def rows_read(heartbeat: Heartbeat) -> int:
    return sum(sample.num_input_rows for sample in heartbeat.recent)


def expected_reason(line: MalformedLine, field_types: dict[str, str]) -> str:
    if line.kind == "bad_json":
        return "invalid JSON"
    if line.kind == "missing_field":
        return f"missing required field '{line.field}'"
    assert line.field is not None
    return f"field '{line.field}': cannot parse '{TYPED_FIELDS[line.field]}' as {field_types[line.field]}"


def test_router_routes_every_event_reports_progress_and_stops_on_sigterm(
    spark: SparkSession, platform_conf: PlatformConfig, start_driver: Callable[..., Driver]
) -> None:
    edit_job(platform_conf, "router", fast_trigger)
    spec = find_job("router", platform_conf.conf_dir)
    landing = platform_conf.landing_root / spec.pipeline.source.path
    batches: list[GeneratedBatch] = [write_batch(landing, 400, 0.05, seed) for seed in (1, 2, 3)]
    driver = start_driver("run-1")
    driver.wait_heartbeat(lambda hb: rows_read(hb) >= 1)
    # A file arriving while the query runs is picked up by a later batch.
    batches.append(write_batch(landing, 300, 0.1, 4))
    total_lines = sum(batch.total for batch in batches)
    heartbeat = driver.wait_heartbeat(lambda hb: rows_read(hb) == total_lines)
    assert heartbeat.run_id == "run-1" and heartbeat.pid == driver.process.pid
    assert heartbeat.batch_id is not None and heartbeat.batch_id >= 1
    assert heartbeat.last_sample is not None and heartbeat.last_sample.duration_ms > 0

    port = spec.operations.metrics_port
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        metrics = response.read().decode()
    assert f'streamwarden_input_rows_total{{job_name="router"}} {float(total_lines)}' in metrics
    assert f'streamwarden_last_committed_batch_id{{job_name="router"}} {float(heartbeat.batch_id)}' in metrics

    driver.process.send_signal(signal.SIGTERM)
    assert driver.wait_exit() == 0, driver.log()
    final = read_heartbeat(driver.heartbeat_file)
    assert final is not None and final.event == "terminated" and final.error_class is None

    sink = platform_conf.lake_root / spec.pipeline.sink.path
    events = [event for batch in batches for event in batch.events]
    malformed = [line for batch in batches for line in batch.malformed]
    routed_ids: set[str] = set()
    for route in spec.pipeline.routes:
        rows = read_route(spark, sink, route.name, route.columns)
        rows = rows.withColumn("event_time", F.date_format("event_time", "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'"))
        actual = Counter(tuple(row) for row in rows.collect())
        wanted = [e for e in events if ROUTE_PREDICATES[route.name](e)]
        assert wanted, f"the generator made no {route.name} events"
        assert actual == Counter(tuple(e.get(column) for column in route.columns) for e in wanted), route.name
        routed_ids.update(e["event_id"] for e in wanted)

    field_types = {field.name: field.type for field in spec.pipeline.source.fields}
    dead = read_route(spark, sink, DEAD_LETTER_ROUTE, ["dead_letter_reason", "raw"]).collect()
    assert Counter((row.dead_letter_reason, row.raw) for row in dead) == Counter(
        (expected_reason(line, field_types), line.line) for line in malformed
    )
    filtered_out = [e for e in events if not any(predicate(e) for predicate in ROUTE_PREDICATES.values())]
    assert total_lines == len(routed_ids) + len(filtered_out) + len(dead)


def test_unparsable_route_filter_exits_2_with_a_terminated_heartbeat(
    platform_conf: PlatformConfig, start_driver: Callable[..., Driver]
) -> None:
    def break_filter(spec: dict[str, Any]) -> None:
        spec["pipeline"]["routes"][1]["filter"] = "event_type = = 'view'"

    edit_job(platform_conf, "router", break_filter)
    driver = start_driver("run-bad")
    assert driver.wait_exit() == 2, driver.log()
    heartbeat = read_heartbeat(driver.heartbeat_file)
    assert heartbeat is not None and heartbeat.event == "terminated"
    assert heartbeat.error_class == "ConfigError"
    assert heartbeat.error_message is not None
    assert "pipeline.routes.1.filter" in heartbeat.error_message and "eu_views" in heartbeat.error_message
    assert not (platform_conf.checkpoint_root / "router").exists()


def test_a_taken_metrics_port_exits_2_naming_the_job_port_and_field(
    platform_conf: PlatformConfig, start_driver: Callable[..., Driver]
) -> None:
    port = find_job("router", platform_conf.conf_dir).operations.metrics_port
    with socket.create_server(("127.0.0.1", port)):
        driver = start_driver("run-port")
        assert driver.wait_exit() == 2, driver.log()
    heartbeat = read_heartbeat(driver.heartbeat_file)
    assert heartbeat is not None and heartbeat.event == "terminated"
    assert heartbeat.error_class == "ConfigError"
    assert heartbeat.error_message == (
        f"{platform_conf.conf_dir / 'jobs' / 'router.yaml'}: field 'operations.metrics_port': port {port} of "
        "job 'router' is in use by another process on 127.0.0.1; the job is not launched until the port is "
        "free or the job file names another"
    )
    assert not (platform_conf.checkpoint_root / "router").exists()


def test_query_failing_at_runtime_exits_1_and_keeps_the_error(
    platform_conf: PlatformConfig, start_driver: Callable[..., Driver]
) -> None:
    def failing_filter(spec: dict[str, Any]) -> None:
        fast_trigger(spec)
        # Valid to the analyzer, fails on the first routed row.
        spec["pipeline"]["routes"][0]["filter"] = "raise_error(concat('no route for ', event_id)) IS NULL"

    edit_job(platform_conf, "router", failing_filter)
    write_batch(platform_conf.landing_root / "events", 10, 0.0, 7)
    driver = start_driver("run-fail")
    assert driver.wait_exit() == 1, driver.log()
    heartbeat = read_heartbeat(driver.heartbeat_file)
    assert heartbeat is not None and heartbeat.event == "terminated"
    assert heartbeat.error_class is not None and heartbeat.error_class.endswith("Exception")
    assert heartbeat.error_message is not None and "no route for" in heartbeat.error_message


def test_a_line_that_is_not_utf8_stays_readable_and_duplicate_keys_are_counted(
    platform_conf: PlatformConfig, start_driver: Callable[..., Driver]
) -> None:
    edit_job(platform_conf, "router", fast_trigger)
    spec = find_job("router", platform_conf.conf_dir)
    purchase = {
        "event_id": "p-1",
        "event_time": "2025-01-01T10:15:00.000Z",
        "user_id": "u1",
        "event_type": "purchase",
        "country": "DE",
        "amount": 12.5,
    }
    latin1 = json.dumps({**purchase, "event_id": "p-2", "page": "/caf\u00e9"}, ensure_ascii=False).encode(
        "latin-1"
    )
    # Not UTF-8 and malformed too: a dead letter whatever the parse, its raw line must stay readable.
    broken = '{"event_id": "p-4", "event_type": "view", "page": "/caf\u00e9"}'.encode("latin-1")
    # The amount twice: the last value is the one routed, and the line is counted.
    duplicate = json.dumps({**purchase, "event_id": "p-3"})[:-1].encode() + b', "amount": 5.0}'
    lines = [json.dumps(purchase).encode(), latin1, broken, duplicate]
    write_atomically(
        platform_conf.landing_root / spec.pipeline.source.path / "bytes.json", b"\n".join(lines) + b"\n"
    )

    driver = start_driver("run-bytes")
    driver.wait_heartbeat(lambda hb: rows_read(hb) == len(lines))
    with urllib.request.urlopen(
        f"http://127.0.0.1:{spec.operations.metrics_port}/metrics", timeout=5
    ) as response:
        metrics = response.read().decode()
    assert 'streamwarden_duplicate_key_lines_total{input="events",job_name="router"} 1.0' in metrics
    driver.process.send_signal(signal.SIGTERM)
    assert driver.wait_exit() == 0, driver.log()

    # Any Parquet reader, not only Spark, reads every file of the sink, and pyarrow the whole sink
    # (skipping `_spark_metadata`). Partition values are read as plain strings: pyarrow cannot yet
    # unify dictionary-encoded partition values with nulls (the dead letter's event_date).
    sink = platform_conf.lake_root / spec.pipeline.sink.path
    files = sorted(path for path in sink.rglob("*.parquet") if "_spark_metadata" not in path.parts)
    assert sum(len(pd.read_parquet(path)) for path in files) == len(lines)
    table = pq.read_table(sink, partitioning=ds.HivePartitioning.discover(infer_dictionary=False))
    table.validate(full=True)
    frame = table.to_pandas()
    dead = frame[frame["route"] == "dead_letter"]
    assert list(dead["dead_letter_reason"]) == [INVALID_UTF8, INVALID_UTF8]
    assert sorted(base64.b64decode(raw) for raw in dead["raw"]) == sorted([latin1, broken])
    purchases = frame[frame["route"] == "purchases"]
    assert sorted(zip(purchases["event_id"], purchases["amount"], strict=True)) == [
        ("p-1", 12.5),
        ("p-3", 5.0),
    ]
