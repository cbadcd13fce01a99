"""device_health: transitions-only triggers, out-of-order, late and duplicate readings, bounded state.

The transform tests run the processor over a batch DataFrame (one "micro-batch"); the streaming
tests run the job's real query (`plan_job`) over landing files, one file per micro-batch, so the
watermark advances between them.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from jobs.catalog import sink_rows
from ops.driver.listener import state_rows
from ops.driver.session import state_conf
from ops.spec.job import find_job
from ops.spec.platform import PlatformConfig
from tests.support.drivers import edit_job
from tests.support.spark import run_available_now

# The sink's columns, with the two timestamps as UTC text (collected timestamps are local).
OUTPUT_SCHEMA = (
    "output string, device_id string, data_point string, value double, event_time string, "
    "event_id string, health string, previous_health string, previous_value double, "
    "previous_event_time string, dead_letter_reason string, raw string, event_date date, event_hour int"
)
DAY = dt.date(2025, 1, 1)


def reading(event_id: str, minute: int, device: str, data_point: str, value: object) -> str:
    """A telemetry line at `minute` past 10:00 on DAY (negative: before 10:00)."""
    return json.dumps(
        {
            "event_id": event_id,
            "event_time": moment_at(minute).strftime("%Y-%m-%dT%H:%M:%S.000Z"),
            "device_id": device,
            "data_point": data_point,
            "value": value,
        }
    )


def moment_at(minute: int) -> dt.datetime:
    """`minute` past 10:00 on DAY (negative: before 10:00)."""
    return dt.datetime(2025, 1, 1, 10) + dt.timedelta(minutes=minute)


def at(minute: int) -> str:
    return moment_at(minute).strftime("%Y-%m-%d %H:%M:%S")


def as_text(rows: DataFrame) -> DataFrame:
    return rows.withColumns(
        {name: F.date_format(name, "yyyy-MM-dd HH:mm:ss") for name in ("event_time", "previous_event_time")}
    )


def expected(spark: SparkSession, rows: list[tuple[Any, ...]]) -> DataFrame:
    """Sink rows from (output, device, data point, value, minute, event id, health, previous
    health, previous value, previous minute), all on DAY, no dead-letter fields."""
    full = [
        (
            output,
            device,
            data_point,
            value,
            at(minute),
            event_id,
            health,
            previous_health,
            previous_value,
            None if previous_minute is None else at(previous_minute),
            None,
            None,
            DAY,
            moment_at(minute).hour,
        )
        for output, device, data_point, value, minute, event_id, health, previous_health, previous_value, previous_minute in rows  # noqa: E501
    ]
    return spark.createDataFrame(full, OUTPUT_SCHEMA)


def transform_lines(spark: SparkSession, platform: PlatformConfig, lines: list[str]) -> DataFrame:
    spec = find_job("device_health", platform.conf_dir)
    raw = spark.createDataFrame([(line,) for line in lines], "value string")
    return as_text(sink_rows(platform, spec, {"telemetry": raw}))


@pytest.fixture
def stateful(spark: SparkSession, platform_conf: PlatformConfig) -> PlatformConfig:
    """The session set up for the job's state (RocksDB, checkpoint format 2)."""
    for key, value in state_conf(find_job("device_health", platform_conf.conf_dir)).items():
        spark.conf.set(key, value)
    return platform_conf


def test_only_turning_red_triggers_and_a_first_red_reading_counts(
    spark: SparkSession, stateful: PlatformConfig
) -> None:
    lines = [
        # d1 signal_db (RED when value < -10), given out of order: applied by event time.
        reading("s3", 3, "d1", "signal_db", -12.0),  # GREEN -> RED: diagnosis
        reading("s1", 1, "d1", "signal_db", -5.0),  # first seen, GREEN: nothing
        reading("s4", 4, "d1", "signal_db", -20.0),  # RED -> RED: nothing
        reading("s2", 2, "d1", "signal_db", -10.0),  # on the bound: GREEN -> GREEN, nothing
        reading("s5", 5, "d1", "signal_db", 1.0),  # RED -> GREEN: recovery
        reading("s6", 6, "d1", "signal_db", -11.0),  # GREEN -> RED again: diagnosis
        reading("s6", 6, "d1", "signal_db", -11.0),  # the same line again: dropped
        # d1 temperature (RED above 70): first reading RED counts as a turn to RED.
        reading("t1", 1, "d1", "temperature", 75.0),
        reading("t2", 2, "d1", "temperature", 80.0),
        # d2 error_rate (RED above 0.05): GREEN all along, no row.
        reading("e1", 1, "d2", "error_rate", 0.01),
        reading("e2", 2, "d2", "error_rate", 0.05),
        # Dead letters: unknown data point, unparsable value, missing device, invalid JSON.
        reading("h1", 1, "d2", "humidity", 40.0),
        reading("b1", 1, "d2", "signal_db", "weak"),
        json.dumps(
            {"event_id": "m1", "event_time": "2025-01-01T10:01:00Z", "data_point": "signal_db", "value": 1}
        ),
        '{"event_id": "x',
    ]
    actual = transform_lines(spark, stateful, lines)
    transitions = expected(
        spark,
        [
            ("diagnosis", "d1", "signal_db", -12.0, 3, "s3", "RED", "GREEN", -10.0, 2),
            ("recovery", "d1", "signal_db", 1.0, 5, "s5", "GREEN", "RED", -20.0, 4),
            ("diagnosis", "d1", "signal_db", -11.0, 6, "s6", "RED", "GREEN", 1.0, 5),
            ("diagnosis", "d1", "temperature", 75.0, 1, "t1", "RED", None, None, None),
        ],
    )
    dead_letters = spark.createDataFrame(
        [
            (
                "d2",
                "humidity",
                40.0,
                at(1),
                "h1",
                "no health rule for data point 'humidity'",
                lines[11],
                DAY,
                10,
            ),
            (
                "d2",
                "signal_db",
                None,
                at(1),
                "b1",
                "field 'value': cannot parse 'weak' as double",
                lines[12],
                DAY,
                10,
            ),
            (None, "signal_db", 1.0, at(1), "m1", "missing required field 'device_id'", lines[13], DAY, 10),
            (None, None, None, None, None, "invalid JSON", lines[14], None, None),
        ],
        "device_id string, data_point string, value double, event_time string, event_id string, "
        "dead_letter_reason string, raw string, event_date date, event_hour int",
    ).select(
        F.lit("dead_letter").alias("output"),
        "device_id",
        "data_point",
        "value",
        "event_time",
        "event_id",
        *(F.lit(None).cast(t).alias(c) for c, t in (("health", "string"), ("previous_health", "string"))),
        F.lit(None).cast("double").alias("previous_value"),
        F.lit(None).cast("string").alias("previous_event_time"),
        "dead_letter_reason",
        "raw",
        "event_date",
        "event_hour",
    )
    assertDataFrameEqual(actual, transitions.unionByName(dead_letters))


def test_a_red_when_that_spark_cannot_parse_names_the_field(
    spark: SparkSession, stateful: PlatformConfig
) -> None:
    def break_rule(spec: dict[str, Any]) -> None:
        spec["pipeline"]["data_points"][0]["red_when"] = "value < < 3"

    edit_job(stateful, "device_health", break_rule)
    with pytest.raises(Exception, match=r"pipeline\.data_points\.0\.red_when.*signal_db"):
        transform_lines(spark, stateful, [reading("s1", 1, "d1", "signal_db", 1.0)])


def write_landing(landing: Path, name: str, lines: list[str], order: int) -> None:
    """One landing file; its modification time puts it `order`-th in the file source's listing."""
    landing.mkdir(parents=True, exist_ok=True)
    path = landing / f"{name}.json"
    path.write_text("".join(line + "\n" for line in lines))
    moment = 1_700_000_000 + order
    os.utime(path, (moment, moment))


def one_file_per_batch(spec: dict[str, Any]) -> None:
    spec["operations"]["trigger"]["max_files_per_trigger"] = 1


def test_stream_over_micro_batches_keeps_state_and_reports_stale_and_late_readings(
    spark: SparkSession, stateful: PlatformConfig
) -> None:
    edit_job(stateful, "device_health", one_file_per_batch)
    landing = stateful.landing_root / "telemetry"
    batches = [
        [
            reading("a1", 0, "d1", "signal_db", -5.0),
            reading("b1", 0, "d1", "temperature", 75.0),  # first seen RED: diagnosis
            reading("c1", 1, "d2", "signal_db", -3.0),
        ],
        [
            reading("a3", 5, "d1", "signal_db", -30.0),
            reading("a2", 3, "d1", "signal_db", -15.0),  # earlier in the same batch: this one turns RED
        ],
        [
            reading("a0", 4, "d1", "signal_db", 2.0),  # older than d1's latest (10:05): stale, stays RED
            reading("a3", 5, "d1", "signal_db", -30.0),  # the latest reading again: dropped
            reading("c2", 20, "d2", "signal_db", -40.0),  # diagnosis; the watermark moves to 10:10
        ],
        [
            # This batch's watermark is 10:10 (10:20 - 10 minutes). Behind it: late, and the
            # key's state is untouched (a5 below still recovers from d1's latest RED reading).
            reading("a4", -6, "d1", "signal_db", 3.0),
            # Exactly on the watermark is late too (Spark's rule), and a late reading of a key
            # never seen creates no state: d3's reading a minute later is its first.
            reading("f1", 10, "d3", "temperature", 80.0),
            reading("f2", 11, "d3", "temperature", 75.0),  # first seen RED: diagnosis
            reading("a5", 21, "d1", "signal_db", 3.0),  # recovery
            reading("b2", 21, "d1", "temperature", 60.0),  # recovery
        ],
    ]
    for i, lines in enumerate(batches):
        write_landing(landing, f"batch-{i}", lines, i)
    progress = run_available_now(spark, stateful, find_job("device_health", stateful.conf_dir)).recentProgress
    # One batch per file; each line counts twice, as both branches (readings, dead letters) scan it.
    assert [p["numInputRows"] for p in progress if p["numInputRows"]] == [6, 4, 6, 10]

    spec = find_job("device_health", stateful.conf_dir)
    streamed = as_text(spark.read.parquet(str(stateful.lake_root / spec.pipeline.sink.path)))
    assertDataFrameEqual(
        streamed,
        expected(
            spark,
            [
                ("diagnosis", "d1", "temperature", 75.0, 0, "b1", "RED", None, None, None),
                ("diagnosis", "d1", "signal_db", -15.0, 3, "a2", "RED", "GREEN", -5.0, 0),
                ("stale", "d1", "signal_db", 2.0, 4, "a0", "GREEN", "RED", -30.0, 5),
                ("diagnosis", "d2", "signal_db", -40.0, 20, "c2", "RED", "GREEN", -3.0, 1),
                ("late", "d1", "signal_db", 3.0, -6, "a4", "GREEN", None, None, None),
                ("late", "d3", "temperature", 80.0, 10, "f1", "RED", None, None, None),
                ("diagnosis", "d3", "temperature", 75.0, 11, "f2", "RED", None, None, None),
                ("recovery", "d1", "signal_db", 3.0, 21, "a5", "GREEN", "RED", -30.0, 5),
                ("recovery", "d1", "temperature", 60.0, 21, "b2", "GREEN", "RED", 75.0, 0),
            ],
        ).select(*streamed.columns),
    )


def test_state_stays_bounded_by_the_keys_and_silent_keys_expire(
    spark: SparkSession, stateful: PlatformConfig
) -> None:
    def small_ttl(spec: dict[str, Any]) -> None:
        one_file_per_batch(spec)
        spec["pipeline"]["silent_ttl_seconds"] = 900

    edit_job(stateful, "device_health", small_ttl)
    landing = stateful.landing_root / "telemetry"
    start = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
    batches = 20
    for i in range(batches):
        # 10 devices x 2 data points report every 5 minutes; after batch 11 only devices 0-4 do.
        devices = range(10) if i < 12 else range(5)
        lines = []
        for device in devices:
            for data_point, value in (
                ("signal_db", -20.0 if (i + device) % 3 == 0 else 0.0),
                ("temperature", 50.0),
            ):
                moment = start + dt.timedelta(minutes=5 * i, seconds=device)
                lines.append(
                    json.dumps(
                        {
                            "event_id": f"{i}-{device}-{data_point}",
                            "event_time": moment.isoformat().replace("+00:00", "Z"),
                            "device_id": f"d{device}",
                            "data_point": data_point,
                            "value": value,
                        }
                    )
                )
        write_landing(landing, f"batch-{i:02d}", lines, i)
    progress = [
        p
        for p in run_available_now(
            spark, stateful, find_job("device_health", stateful.conf_dir)
        ).recentProgress
        if p["numInputRows"]
    ]
    assert len(progress) == batches
    rows = [state_rows(p) for p in progress]
    # One row per key (the timers are not counted), whatever the input: 20 keys -> 20 rows.
    assert rows[:12] == [20] * 12, rows
    # Devices 5-9 stop at 00:55; their timers (due 01:10) fire once the watermark (10 minutes
    # behind the readings) passes 01:10, and only devices 0-4 stay.
    assert rows[-1] == 10, str(rows)
    assert max(rows) == 20, str(rows)
