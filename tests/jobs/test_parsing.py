"""The shared parse (`jobs.parsing.parse_events`) on tiny inline DataFrames: time encodings, nested
paths, bytes that are not UTF-8, byte-order marks, deep nesting, blank lines, duplicate keys."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from jobs.catalog import sink_rows
from jobs.parsing import (
    INVALID_JSON,
    INVALID_UTF8,
    MAX_JSON_DEPTH,
    NESTED_TOO_DEEP,
    invalid_time_formats,
    parse_events,
)
from ops.driver.listener import TelemetryListener, duplicate_key_lines
from ops.exceptions import ConfigError
from ops.spec.job import find_job
from ops.spec.pipelines import FileSource
from ops.spec.platform import PlatformConfig
from tests.support.drivers import edit_job

PARSED = "dead_letter_reason string, raw string"


def make_source(*fields: dict[str, Any]) -> FileSource:
    return FileSource.model_validate(
        {"path": "events", "event_time_field": fields[0]["name"], "fields": fields}
    )


def parse_bytes(spark: SparkSession, lines: list[bytes], source: FileSource) -> DataFrame:
    """`lines` as the `text` source gives them (bytes kept as they are), parsed."""
    raw = spark.createDataFrame([(line,) for line in lines], "value binary")
    return raw.select(raw.value.cast("string").alias("value")).transform(parse_events, source)


def parse(spark: SparkSession, lines: list[str], source: FileSource) -> DataFrame:
    return parse_bytes(spark, [line.encode() for line in lines], source)


def utc_text(frame: DataFrame, *columns: str) -> DataFrame:
    """Timestamps as UTC text: collected timestamps would be converted to the local zone."""
    return frame.withColumns(
        {column: F.date_format(column, "yyyy-MM-dd HH:mm:ss.SSSSSS") for column in columns}
    )


EPOCH_SOURCE = make_source(
    {"name": "event_time", "type": "timestamp", "required": True, "path": "ts", "format": "epoch_millis"},
    {"name": "seconds", "type": "timestamp", "format": "epoch_seconds"},
    {"name": "micros", "type": "timestamp", "format": "epoch_micros"},
)


def test_epoch_timestamps_parse_from_numbers_and_numeric_strings(spark: SparkSession) -> None:
    lines = [
        '{"ts": 1699999997201, "seconds": 1699999997.2015, "micros": 1699999997201500}',
        '{"ts": "1699999997201", "seconds": "-1", "micros": "0"}',
        '{"ts": 1.699999997201E12}',
    ]
    expected = spark.createDataFrame(
        [
            (
                "2023-11-14 22:13:17.201000",
                "2023-11-14 22:13:17.201500",
                "2023-11-14 22:13:17.201500",
                None,
                lines[0],
            ),
            (
                "2023-11-14 22:13:17.201000",
                "1969-12-31 23:59:59.000000",
                "1970-01-01 00:00:00.000000",
                None,
                lines[1],
            ),
            ("2023-11-14 22:13:17.201000", None, None, None, lines[2]),
        ],
        f"event_time string, seconds string, micros string, {PARSED}",
    )
    assertDataFrameEqual(
        utc_text(parse(spark, lines, EPOCH_SOURCE), "event_time", "seconds", "micros"), expected
    )


@pytest.mark.parametrize(
    ("ts", "reason"),
    [
        ('"yesterday"', "field 'event_time': cannot parse 'yesterday' as timestamp (epoch_millis)"),
        ("true", "field 'event_time': cannot parse 'true' as timestamp (epoch_millis)"),
        # Beyond year 9999: Spark would fail the whole batch on the overflow.
        (
            "100000000000000000",
            "field 'event_time': cannot parse '100000000000000000' as timestamp (epoch_millis)",
        ),
        ("null", "missing required field 'event_time' at 'ts'"),
    ],
)
def test_an_epoch_that_does_not_parse_is_a_dead_letter(spark: SparkSession, ts: str, reason: str) -> None:
    line = f'{{"ts": {ts}}}'
    expected = spark.createDataFrame(
        [(None, None, None, reason, line)], f"event_time string, seconds string, micros string, {PARSED}"
    )
    assertDataFrameEqual(
        utc_text(parse(spark, [line], EPOCH_SOURCE), "event_time", "seconds", "micros"), expected
    )


def test_iso8601_with_and_without_offset_and_a_datetime_pattern(spark: SparkSession) -> None:
    source = make_source(
        {"name": "event_time", "type": "timestamp", "format": "iso8601"},
        {"name": "local_time", "type": "timestamp", "format": "dd/MM/yyyy HH:mm:ss[.SSS] XXX"},
    )
    lines = [
        json.dumps(
            {"event_time": "2025-01-01T10:15:00.123+02:00", "local_time": "01/02/2025 10:15:00 +01:00"}
        ),
        # No offset: UTC (the session time zone of every driver).
        json.dumps({"event_time": "2025-01-01T10:15:00", "local_time": "01/02/2025 10:15:00.5 Z"}),
        json.dumps({"event_time": "2025-01-01 10:15:00Z", "local_time": "2025-02-01T10:15:00Z"}),
    ]
    expected = spark.createDataFrame(
        [
            ("2025-01-01 08:15:00.123000", "2025-02-01 09:15:00.000000", None, lines[0]),
            ("2025-01-01 10:15:00.000000", "2025-02-01 10:15:00.500000", None, lines[1]),
            (
                "2025-01-01 10:15:00.000000",
                None,
                "field 'local_time': cannot parse '2025-02-01T10:15:00Z' as timestamp "
                "(dd/MM/yyyy HH:mm:ss[.SSS] XXX)",
                lines[2],
            ),
        ],
        f"event_time string, local_time string, {PARSED}",
    )
    assertDataFrameEqual(utc_text(parse(spark, lines, source), "event_time", "local_time"), expected)


NESTED_SOURCE = make_source(
    {"name": "event_time", "type": "timestamp", "required": True},
    {"name": "device_id", "type": "string", "required": True, "path": "device.id"},
    {"name": "firmware", "type": "long", "path": "device.firmware.build"},
    {"name": "device", "type": "string"},
)
NESTED_SCHEMA = f"event_time string, device_id string, firmware long, device string, {PARSED}"


def test_a_nested_path_reads_a_leaf_of_nested_objects(spark: SparkSession) -> None:
    device = {"id": "d-1", "firmware": {"build": 42, "channel": "beta"}}
    line = json.dumps({"event_time": "2025-01-01T10:15:00Z", "device": device})
    expected = spark.createDataFrame(
        [("2025-01-01 10:15:00.000000", "d-1", 42, json.dumps(device, separators=(",", ":")), None, line)],
        NESTED_SCHEMA,
    )
    assertDataFrameEqual(utc_text(parse(spark, [line], NESTED_SOURCE), "event_time"), expected)


@pytest.mark.parametrize(
    ("device", "reason"),
    [
        ({"firmware": {"build": 7}}, "missing required field 'device_id' at 'device.id'"),
        (None, "missing required field 'device_id' at 'device.id'"),
        (
            {"id": "d-1", "firmware": "v7"},
            "field 'firmware': 'device.firmware' is not an object",
        ),
        (
            "d-1",
            "field 'device_id': 'device' is not an object; field 'firmware': 'device' is not an object",
        ),
        (
            [{"id": "d-1"}],
            "field 'device_id': 'device' is not an object; field 'firmware': 'device' is not an object",
        ),
        ({"id": "d-1", "firmware": {"build": "x7"}}, "field 'firmware': cannot parse 'x7' as long"),
    ],
    ids=["missing-leaf", "null-object", "leaf-under-a-string", "string", "array", "wrong-type"],
)
def test_a_nested_field_that_is_missing_or_under_a_non_object_is_a_dead_letter(
    spark: SparkSession, device: Any, reason: str
) -> None:
    line = json.dumps({"event_time": "2025-01-01T10:15:00Z", "device": device})
    row = parse(spark, [line], NESTED_SOURCE).select("dead_letter_reason", "raw").collect()
    assert [tuple(r) for r in row] == [(reason, line)]


def test_a_line_that_is_not_utf8_is_a_dead_letter_with_its_bytes_in_raw(spark: SparkSession) -> None:
    source = make_source({"name": "event_time", "type": "timestamp"}, {"name": "city", "type": "string"})
    latin1 = '{"event_time": "2025-01-01T10:15:00Z", "city": "Málaga"}'.encode("latin-1")
    # A CESU-8 surrogate and a truncated sequence are not UTF-8 either.
    surrogate = b'{"event_time": "2025-01-01T10:15:00Z", "city": "\xed\xa0\x80"}'
    truncated = b'{"event_time": "2025-01-01T10:15:00Z", "city": "\xe2\x82"}'
    # A replacement character written on purpose is valid UTF-8 and stays an event.
    literal = '{"event_time": "2025-01-01T10:15:00Z", "city": "M\ufffdlaga"}'.encode()
    # Longer than 57 bytes: Spark's base64 would break its text into lines of 76 characters.
    long_city = {"event_time": "2025-01-01T10:15:00Z", "city": "Málaga " * 40}
    long_latin1 = json.dumps(long_city, ensure_ascii=False).encode("latin-1")
    parsed = parse_bytes(spark, [latin1, surrogate, truncated, literal, long_latin1], source)
    expected = spark.createDataFrame(
        [
            (None, None, INVALID_UTF8, base64.b64encode(latin1).decode()),
            (None, None, INVALID_UTF8, base64.b64encode(surrogate).decode()),
            (None, None, INVALID_UTF8, base64.b64encode(truncated).decode()),
            ("2025-01-01 10:15:00.000000", "M\ufffdlaga", None, literal.decode()),
            (None, None, INVALID_UTF8, base64.b64encode(long_latin1).decode()),
        ],
        f"event_time string, city string, {PARSED}",
    )
    # The session chunks base64 (Spark's default), which the parse must not depend on.
    assert spark.conf.get("spark.sql.chunkBase64String.enabled") == "true"
    assertDataFrameEqual(utc_text(parsed, "event_time"), expected)
    raws = [row.raw for row in parsed.where(parsed.dead_letter_reason == INVALID_UTF8).collect()]
    # A strict decoder (as Java's `Base64.getDecoder()`) refuses anything but the alphabet.
    decoded = [base64.b64decode(raw, validate=True) for raw in raws]
    assert sorted(decoded) == sorted([latin1, surrogate, truncated, long_latin1])


CITY_SOURCE = make_source({"name": "event_time", "type": "timestamp"}, {"name": "city", "type": "string"})


def test_a_leading_byte_order_mark_is_skipped_and_raw_keeps_the_line(spark: SparkSession) -> None:
    event = '{"event_time": "2025-01-01T10:15:00Z", "city": "Oslo"}'
    # The text source drops a file's first byte-order mark, not one on a later line.
    lines = [f"\ufeff{event}", "\ufeff{broken", f"\ufeff\ufeff{event}"]
    expected = spark.createDataFrame(
        [
            ("2025-01-01 10:15:00.000000", "Oslo", None, lines[0]),
            (None, None, INVALID_JSON, lines[1]),
            # Only one mark is a byte-order mark: a second is text before the JSON.
            (None, None, INVALID_JSON, lines[2]),
        ],
        f"event_time string, city string, {PARSED}",
    )
    assertDataFrameEqual(utc_text(parse(spark, lines, CITY_SOURCE), "event_time"), expected)


def nested(depth: int) -> str:
    """An event line nested `depth` levels deep (the line's object is the first level)."""
    arrays = depth - 1
    return f'{{"event_time": "2025-01-01T10:15:00Z", "city": "Oslo", "deep": {"[" * arrays}{"]" * arrays}}}'


def test_a_line_nested_past_the_parsers_limit_says_so(spark: SparkSession) -> None:
    deepest = nested(MAX_JSON_DEPTH)
    too_deep = nested(MAX_JSON_DEPTH + 1)
    # Far deeper still, and a key the source reads after the deep value: nothing is read from it.
    far_too_deep = nested(50_000)[:-1] + ', "extra": 1}'
    # Too deep and broken too, or not an object: not JSON whatever the limit.
    broken = nested(MAX_JSON_DEPTH + 1)[:-2]
    array = "[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1)
    lines = [deepest, too_deep, far_too_deep, broken, array]
    expected = spark.createDataFrame(
        [
            ("2025-01-01 10:15:00.000000", "Oslo", None, deepest),
            (None, None, NESTED_TOO_DEEP, too_deep),
            (None, None, NESTED_TOO_DEEP, far_too_deep),
            (None, None, INVALID_JSON, broken),
            (None, None, INVALID_JSON, array),
        ],
        f"event_time string, city string, {PARSED}",
    )
    assertDataFrameEqual(utc_text(parse(spark, lines, CITY_SOURCE), "event_time"), expected)
    assert NESTED_TOO_DEEP == "JSON nested deeper than 1000 levels (the parser's limit)"


def test_a_blank_line_is_neither_an_event_nor_a_dead_letter(spark: SparkSession) -> None:
    event = '{"event_time": "2025-01-01T10:15:00Z", "city": "Oslo"}'
    # A form feed and a no-break space are not JSON whitespace: such a line is not JSON.
    blank = ["", " ", "\t \r", "\ufeff", "\ufeff  "]
    lines = [*blank, f"  {event}\t", "\f", "\u00a0"]
    expected = spark.createDataFrame(
        [
            ("2025-01-01 10:15:00.000000", "Oslo", None, lines[len(blank)]),
            (None, None, INVALID_JSON, "\f"),
            (None, None, INVALID_JSON, "\u00a0"),
        ],
        f"event_time string, city string, {PARSED}",
    )
    assertDataFrameEqual(utc_text(parse(spark, lines, CITY_SOURCE), "event_time"), expected)


def test_a_duplicate_key_takes_its_last_value_at_every_level(spark: SparkSession) -> None:
    lines = [
        '{"event_time": "2025-01-01T10:15:00Z", "device": {"id": "first", "id": "last"}}',
        '{"event_time": "2025-01-01T10:15:00Z", "device": {"id": "d-1"}, "device": {"id": "d-2"}}',
        '{"event_time": "2024-01-01T00:00:00Z", "device": {"id": "d-1"}, '
        '"event_time": "2025-01-01T10:15:00Z"}',
    ]
    parsed = utc_text(parse(spark, lines, NESTED_SOURCE), "event_time").select(
        "event_time", "device_id", "dead_letter_reason"
    )
    expected = spark.createDataFrame(
        [
            ("2025-01-01 10:15:00.000000", "last", None),
            ("2025-01-01 10:15:00.000000", "d-2", None),
            ("2025-01-01 10:15:00.000000", "d-1", None),
        ],
        "event_time string, device_id string, dead_letter_reason string",
    )
    assertDataFrameEqual(parsed, expected)


def test_lines_with_a_duplicate_key_and_blank_lines_are_counted_in_the_drivers_metrics(
    spark: SparkSession, tmp_path: Path
) -> None:
    landing = tmp_path / "landing"
    landing.mkdir()
    lines = [
        '{"event_time": "2025-01-01T10:15:00Z", "device": {"id": "a", "id": "b"}}',
        "",
        '{"event_time": "2025-01-01T10:15:00Z", "event_time": "2025-01-01T10:15:00Z", "device": {}}',
        # Keys the source does not read count too: the line still says two things.
        '{"event_time": "2025-01-01T10:15:00Z", "colour": "red", "colour": "blue"}',
        " \t ",
        '{"event_time": "2025-01-01T10:15:00Z", "device": {"id": "a"}}',
        "not json",
        "",
    ]
    # Windows line ends: the text source splits at "\r\n", leaving no "\r" in a line.
    (landing / "a.json").write_text("\r\n".join(lines) + "\r\n", newline="")
    parsed = (
        spark.readStream.format("text")
        .load(str(landing))
        .transform(parse_events, NESTED_SOURCE, "parse.events")
    )
    listener = TelemetryListener(tmp_path / "heartbeat.json", "router", "run-1")
    spark.streams.addListener(listener)
    try:
        query = (
            parsed.writeStream.format("memory")
            .queryName("parse_counts")
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        assert listener.wait_terminated(timeout=60)
    finally:
        spark.streams.removeListener(listener)
    # What the driver's listener read from the progress record (as JSON, like Spark Connect's).
    progress = query.lastProgress
    assert progress is not None
    assert duplicate_key_lines(json.loads(progress.json)) == {"events": 3}
    labels = {"job_name": "router", "input": "events"}
    assert listener.registry.get_sample_value("streamwarden_duplicate_key_lines_total", labels) == 3
    assert listener.registry.get_sample_value("streamwarden_blank_lines_total", labels) == 3
    # The blank lines give no row, events and dead letters alike.
    raws = [row.raw for row in spark.table("parse_counts").collect()]
    assert sorted(raws) == sorted(line for line in lines if line.strip())


def test_a_datetime_pattern_spark_refuses_is_a_config_error_before_the_query_starts(
    spark: SparkSession, platform_conf: PlatformConfig
) -> None:
    # Letters the config accepts, in a count Spark's parser refuses.
    source = make_source({"name": "event_time", "type": "timestamp", "format": "MMMMMM yyyy"})
    assert list(invalid_time_formats(spark, source)) == [0]

    def bad_pattern(spec: dict[str, Any]) -> None:
        spec["pipeline"]["source"]["fields"][1]["format"] = "yyyy-MM-dd HH:mm:ss MMMMMM"

    edit_job(platform_conf, "router", bad_pattern)
    spec = find_job("router", platform_conf.conf_dir)
    lines = spark.createDataFrame([], "value string")
    with pytest.raises(ConfigError, match=r"field 'pipeline.source.fields.1.format': datetime pattern"):
        sink_rows(platform_conf, spec, {"events": lines})
