"""Router transforms on tiny inline DataFrames: parse -> partition columns -> route."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.testing import assertDataFrameEqual

from jobs.parsing import parse_events, with_event_partitions
from jobs.router.transform import invalid_route_filters, read_route, route_events
from ops.spec.pipelines import FileSource, Route

SOURCE = FileSource.model_validate(
    {
        "path": "events",
        "fields": [
            {"name": "event_id", "type": "string", "required": True},
            {"name": "event_time", "type": "timestamp", "required": True},
            {"name": "user_id", "type": "string", "required": True},
            {"name": "event_type", "type": "string", "required": True},
            {"name": "device", "type": "string"},
            {"name": "amount", "type": "double"},
        ],
    }
)
ROUTES = (
    Route(
        name="purchases",
        filter="event_type = 'purchase' AND amount > 0",
        columns=("event_id", "user_id", "amount"),
    ),
    Route(name="mobile", filter="device IN ('ios', 'android')", columns=("event_id", "device")),
)
ROUTED_SCHEMA = (
    "route string, event_id string, user_id string, device string, amount double, "
    "dead_letter_reason string, raw string, event_date date, event_hour int"
)
DAY = dt.date(2025, 1, 1)


def event(event_id: str, **overrides: object) -> str:
    fields = {
        "event_id": event_id,
        "event_time": "2025-01-01T10:15:00.000Z",
        "user_id": "u1",
        "event_type": "view",
    }
    return json.dumps({**fields, **overrides})


def route_lines(spark: SparkSession, lines: list[str]) -> DataFrame:
    raw = spark.createDataFrame([(line,) for line in lines], "value string")
    return (
        raw.transform(parse_events, SOURCE)
        .transform(with_event_partitions, SOURCE)
        .transform(route_events, ROUTES)
    )


def test_parse_events_types_every_field(spark: SparkSession) -> None:
    line = event("e1", event_type="purchase", amount=12.5, device="ios")
    parsed = spark.createDataFrame([(line,)], "value string").transform(parse_events, SOURCE)
    expected = spark.createDataFrame(
        [("e1", dt.datetime(2025, 1, 1, 10, 15), "u1", "purchase", "ios", 12.5, None, line)],
        "event_id string, event_time timestamp, user_id string, event_type string, device string, "
        "amount double, dead_letter_reason string, raw string",
    )
    # Compare the timestamp as UTC text: collected timestamps are converted to the local zone.
    assertDataFrameEqual(
        parsed.withColumn("event_time", parsed.event_time.cast("string")),
        expected.withColumn("event_time", expected.event_time.cast("string")),
    )


def test_event_matching_two_routes_lands_once_in_each_projected_to_its_columns(spark: SparkSession) -> None:
    line = event("e1", event_type="purchase", amount=12.5, device="ios")
    expected = spark.createDataFrame(
        [
            ("purchases", "e1", "u1", None, 12.5, None, None, DAY, 10),
            ("mobile", "e1", None, "ios", None, None, None, DAY, 10),
        ],
        ROUTED_SCHEMA,
    )
    assertDataFrameEqual(route_lines(spark, [line]), expected, ignoreNullable=True)


def test_event_matching_no_filter_appears_nowhere(spark: SparkSession) -> None:
    # A null amount makes `amount > 0` null, which routes nothing (SQL WHERE semantics).
    lines = [event("web-view", device="web"), event("no-amount", event_type="purchase")]
    assertDataFrameEqual(route_lines(spark, lines), spark.createDataFrame([], ROUTED_SCHEMA))


@pytest.mark.parametrize(
    ("line", "reason", "event_date", "event_hour"),
    [
        ('{"event_id": "e1", "event_ti', "invalid JSON", None, None),
        ("[1, 2]", "invalid JSON", None, None),
        (
            json.dumps({"event_id": "e1", "event_time": "2025-01-01T10:15:00Z", "event_type": "view"}),
            "missing required field 'user_id'",
            DAY,
            10,
        ),
        (event("e1", amount="abc"), "field 'amount': cannot parse 'abc' as double", DAY, 10),
        (
            event("e1", event_time="yesterday"),
            "field 'event_time': cannot parse 'yesterday' as timestamp",
            None,
            None,
        ),
        (
            json.dumps(
                {
                    "event_id": "e1",
                    "event_time": "2025-01-01T10:15:00Z",
                    "event_type": "view",
                    "amount": "1,5",
                }
            ),
            "missing required field 'user_id'; field 'amount': cannot parse '1,5' as double",
            DAY,
            10,
        ),
    ],
    ids=["truncated", "not-an-object", "missing-field", "wrong-type", "bad-event-time", "two-problems"],
)
def test_malformed_line_is_dead_lettered_with_reason_and_raw(
    spark: SparkSession, line: str, reason: str, event_date: dt.date | None, event_hour: int | None
) -> None:
    expected = spark.createDataFrame(
        [("dead_letter", None, None, None, None, reason, line, event_date, event_hour)], ROUTED_SCHEMA
    )
    assertDataFrameEqual(route_lines(spark, [line]), expected)


def test_invalid_route_filters_names_each_bad_route(spark: SparkSession) -> None:
    events = spark.createDataFrame([(event("e1"),)], "value string").transform(parse_events, SOURCE)
    routes = (
        Route(name="fine", filter="amount > 0", columns=("event_id",)),
        Route(name="syntax", filter="event_type = = 'view'", columns=("event_id",)),
        Route(name="unknown", filter="colour = 'red'", columns=("event_id",)),
        Route(name="not_boolean", filter="amount + 1", columns=("event_id",)),
    )
    problems = invalid_route_filters(events, routes)
    assert sorted(problems) == ["not_boolean", "syntax", "unknown"]
    assert "PARSE_SYNTAX_ERROR" in problems["syntax"]
    assert "colour" in problems["unknown"]
    assert problems["not_boolean"] == "is of type double, not boolean"


def test_read_route_filters_one_route_and_projects_its_columns(spark: SparkSession, tmp_path: Path) -> None:
    lines = [
        event("e1", event_type="purchase", amount=3.0, device="android"),
        event("e2", device="ios"),
        "oops",
    ]
    route_lines(spark, lines).write.partitionBy("route", "event_date", "event_hour").parquet(
        str(tmp_path / "sink")
    )
    assertDataFrameEqual(
        read_route(spark, tmp_path / "sink", "mobile", ["event_id", "device", "event_hour"]),
        spark.createDataFrame(
            [("e1", "android", 10), ("e2", "ios", 10)], "event_id string, device string, event_hour int"
        ),
    )
    assertDataFrameEqual(
        read_route(spark, tmp_path / "sink", "dead_letter", ["dead_letter_reason", "raw"]),
        spark.createDataFrame([("invalid JSON", "oops")], "dead_letter_reason string, raw string"),
    )
