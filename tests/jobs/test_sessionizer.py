"""Sessionizer: exact sessions on tiny inputs (batch), and the real streaming query over micro-batches."""

from __future__ import annotations

import json
import os
import re
import time
from typing import Any

import pandas as pd
import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from jobs.parsing import parse_events
from jobs.sessionizer.transform import SessionRules, sessionize
from ops.driver.listener import state_rows
from ops.spec.job import find_job
from ops.spec.pipelines import SessionizerPipeline
from ops.spec.platform import PlatformConfig
from tests.support.drivers import edit_job
from tests.support.spark import run_available_now

FIELDS = [
    {"name": "event_id", "type": "string", "required": True},
    {"name": "event_time", "type": "timestamp", "required": True},
    {"name": "user_id", "type": "string", "required": True},
    {"name": "event_type", "type": "string", "required": True},
    {"name": "device", "type": "string"},
]
PIPELINE = SessionizerPipeline.model_validate(
    {
        "kind": "sessionizer",
        "sources": {
            "web": {"path": "web_events", "fields": FIELDS},
            "app": {"path": "app_events", "fields": FIELDS},
        },
        "sink": {"path": "sessions"},
        "gap_minutes": 30,
        "max_session_minutes": 90,
        "allowed_lateness_minutes": 10,
        "state_buckets": 4,
    }
)
SESSION_COLUMNS = [
    "user_id",
    "session_start",
    "session_end",
    "last_event_time",
    "event_count",
    "event_types",
    "closed_by",
]
SESSION_SCHEMA = (
    "user_id string, session_start string, session_end string, last_event_time string, "
    "event_count long, event_types array<string>, closed_by string"
)


def event(event_id: str, time: str, user: str = "u1", event_type: str = "view", **more: Any) -> str:
    """A product event line at 2025-01-01 `time` (HH:MM)."""
    fields = {"event_id": event_id, "event_time": f"2025-01-01T{time}:00.000Z", "user_id": user}
    return json.dumps({**fields, "event_type": event_type, **more})


def batch_output(spark: SparkSession, web: list[str], app: list[str]) -> DataFrame:
    raw = {"web": web, "app": app}
    inputs = {
        name: spark.createDataFrame([(line,) for line in raw[name]], "value string").transform(
            parse_events, source
        )
        for name, source in PIPELINE.sources.items()
    }
    return sessionize(inputs, PIPELINE)


def as_text(rows: DataFrame) -> DataFrame:
    """Timestamps as UTC text: collected timestamps are converted to the local zone."""
    return rows.select(
        *[F.date_format(c, "HH:mm").alias(c) if c in TIME_COLUMNS else F.col(c) for c in rows.columns]
    )


TIME_COLUMNS = {"session_start", "session_end", "last_event_time", "event_time"}


def sessions_of(rows: DataFrame) -> DataFrame:
    return as_text(rows.where("output = 'sessions'").select(*SESSION_COLUMNS))


def test_gap_cap_duplicates_and_out_of_order_events_make_exact_sessions(spark: SparkSession) -> None:
    web = [
        # u1: out of order across both sources; b is sent twice (once per source).
        event("c", "10:20", event_type="click"),
        event("a", "10:00"),
        event("b", "10:05"),
        # Exactly the 30-minute gap after c: a new session, as with session_window.
        event("d", "10:50"),
        # A bot every 20 minutes: never a gap, cut at 90 minutes.
        *[event(f"bot{i}", f"{10 + i * 20 // 60:02d}:{i * 20 % 60:02d}", user="bot") for i in range(7)],
        # 29 minutes apart: one session.
        event("x1", "09:00", user="u2"),
        event("x2", "09:29", user="u2", event_type="purchase"),
    ]
    app = [event("b", "10:05"), event("e", "11:10", event_type="purchase"), "{not json"]
    expected = spark.createDataFrame(
        [
            ("u1", "10:00", "10:50", "10:20", 3, ["click", "view"], "gap"),
            ("u1", "10:50", "11:40", "11:10", 2, ["purchase", "view"], "gap"),
            # bot events at 10:00 .. 11:20 (5 events); 11:40 >= 10:00 + 90 min starts a new one.
            ("bot", "10:00", "11:30", "11:20", 5, ["view"], "max_duration"),
            ("bot", "11:40", "12:30", "12:00", 2, ["view"], "gap"),
            ("u2", "09:00", "09:59", "09:29", 2, ["purchase", "view"], "gap"),
        ],
        SESSION_SCHEMA,
    )
    rows = batch_output(spark, web, app)
    assertDataFrameEqual(sessions_of(rows), expected)
    dead = rows.where("output = 'dead_letter'").select("source", "dead_letter_reason", "raw")
    assertDataFrameEqual(dead, [("app", "invalid JSON", "{not json")])


def test_a_session_that_reaches_the_cap_is_closed_by_it_even_without_a_next_event(
    spark: SparkSession,
) -> None:
    # 10:00 .. 11:20 every 20 minutes, then 11:29: start + 90 min (11:30) comes before 11:29 + 30.
    times = ["10:00", "10:20", "10:40", "11:00", "11:20", "11:29"]
    rows = batch_output(spark, [event(f"e{i}", t) for i, t in enumerate(times)], [])
    expected = [("u1", "10:00", "11:30", "11:29", 6, ["view"], "max_duration")]
    assertDataFrameEqual(sessions_of(rows), spark.createDataFrame(expected, SESSION_SCHEMA))


# --- the real streaming query --------------------------------------------------------------------


class Stream:
    """The sessionizer's real query over a throwaway platform, run available-now step by step."""

    def __init__(self, spark: SparkSession, platform: PlatformConfig) -> None:
        self.spark = spark
        self.platform = platform
        self.files = 0
        self.started = time.time() - 3600
        self.progress: list[dict[str, Any]] = []

    def write(self, source: str, lines: list[str]) -> None:
        landing = self.platform.landing_root / source
        landing.mkdir(parents=True, exist_ok=True)
        self.files += 1
        path = landing / f"{self.files:04d}.json"
        path.write_text("".join(line + "\n" for line in lines))
        # The file source reads files in modification-time order; make it the writing order.
        moment = self.started + self.files
        os.utime(path, (moment, moment))

    def run(self) -> None:
        """Read every new file (spec's max files per batch), then the no-data batch that closes."""
        spec = find_job("sessionizer", self.platform.conf_dir)
        self.progress.extend(run_available_now(self.spark, self.platform, spec).recentProgress)

    def output(self) -> DataFrame:
        return self.spark.read.parquet(str(self.platform.lake_root / "sessions"))


def set_operations(platform: PlatformConfig, **operations: Any) -> None:
    edit_job(platform, "sessionizer", lambda spec: spec["operations"].update(operations))


LATE_COLUMNS = ["user_id", "event_id", "event_time", "source"]


@pytest.mark.parametrize("checkpoint_format", [1, 2])
def test_stream_over_micro_batches_sends_events_behind_the_watermark_to_late(
    spark: SparkSession, platform_conf: PlatformConfig, checkpoint_format: int
) -> None:
    set_operations(platform_conf, checkpoint_format=checkpoint_format)
    stream = Stream(spark, platform_conf)
    stream.write("web_events", [event("a", "10:00"), event("b", "10:05"), event("b", "10:05"), "{bad"])
    stream.write("app_events", [event("c", "10:20", event_type="click"), event("z", "10:00", user="u2")])
    stream.run()
    # Nothing is final yet: the watermark is 10:10.
    assert stream.output().where("output = 'sessions'").count() == 0
    stream.write("web_events", [event("d", "11:30")])
    stream.run()
    # Watermark 11:20: u1's first session (ends 10:50) and u2's (ends 10:30) are closed;
    # 10:01 is behind it (late), 11:25 is not and joins d's session.
    stream.write("web_events", [event("late1", "10:01"), event("f", "11:25")])
    stream.write("app_events", [event("late2", "11:20", user="u2")])
    stream.run()
    stream.write("app_events", [event("flush", "23:00", user="flush")])
    stream.run()

    rows = stream.output()
    expected_sessions = [
        ("u1", "10:00", "10:50", "10:20", 3, ["click", "view"], "gap"),
        ("u1", "11:25", "12:00", "11:30", 2, ["view"], "gap"),
        ("u2", "10:00", "10:30", "10:00", 1, ["view"], "gap"),
    ]
    assertDataFrameEqual(sessions_of(rows), spark.createDataFrame(expected_sessions, SESSION_SCHEMA))
    late = as_text(rows.where("output = 'late'").select(*LATE_COLUMNS))
    assertDataFrameEqual(late, [("u1", "late1", "10:01", "web"), ("u2", "late2", "11:20", "app")])
    dead = rows.where("output = 'dead_letter'").select("source", "dead_letter_reason", "raw")
    assertDataFrameEqual(dead, [("web", "invalid JSON", "{bad")])
    watermarks = [p["eventTime"].get("watermark") for p in stream.progress]
    assert "2025-01-01T11:20:00.000Z" in watermarks


@pytest.mark.parametrize(
    ("policy", "expected_sessions", "expected_late"),
    [
        # One watermark on the union: the idle app source holds nothing back; its lagging event is late.
        ("union", [("u1", "10:00", "10:30", "10:00", 1, ["view"], "gap")], [("u3", "lag", "10:30", "app")]),
        # Per-source watermarks, min policy: the idle app source stops every session from closing.
        ("slowest_source", [], []),
    ],
)
def test_an_idle_source_holds_back_the_watermark_only_with_the_slowest_source_policy(
    spark: SparkSession,
    platform_conf: PlatformConfig,
    policy: str,
    expected_sessions: list[tuple[Any, ...]],
    expected_late: list[tuple[Any, ...]],
) -> None:
    edit_job(platform_conf, "sessionizer", lambda spec: spec["pipeline"].update(watermark=policy))
    stream = Stream(spark, platform_conf)
    # The malformed line gives the sink a file (and a schema) whatever the policy emits.
    stream.write("web_events", [event("a", "10:00"), "{bad"])
    stream.write("app_events", [event("b", "10:00", user="u2")])
    stream.run()
    # The app source goes idle while web moves on by two hours.
    stream.write("web_events", [event("c", "12:00", user="u9")])
    stream.run()
    stream.write("app_events", [event("lag", "10:30", user="u3")])
    stream.write("web_events", [event("d", "12:01", user="u9")])
    stream.run()
    rows = stream.output()
    sessions = sessions_of(rows).where("user_id = 'u1'")
    assertDataFrameEqual(sessions, spark.createDataFrame(expected_sessions, SESSION_SCHEMA))
    late = as_text(rows.where("output = 'late'").select(*LATE_COLUMNS))
    late_schema = "user_id string, event_id string, event_time string, source string"
    assertDataFrameEqual(late, spark.createDataFrame(expected_late, late_schema))


def test_state_stays_bounded_while_the_watermark_advances(
    spark: SparkSession, platform_conf: PlatformConfig
) -> None:
    edit_job(platform_conf, "sessionizer", lambda spec: spec["pipeline"].update(state_buckets=1024))
    set_operations(platform_conf, trigger={"interval_seconds": 1, "max_files_per_trigger": 1})
    stream = Stream(spark, platform_conf)
    # 20 files of 15 minutes each; every hour brings 8 new users, so keys ever seen keep growing.
    for step in range(20):
        minute = step * 15
        lines = [
            event(
                f"e{step}-{i}", f"{8 + minute // 60:02d}:{minute % 60 + i:02d}", user=f"h{minute // 60}-u{i}"
            )
            for i in range(8)
        ]
        stream.write("web_events", lines)
    stream.run()
    rows_in_state = [state_rows(p) or 0 for p in stream.progress]
    assert len(rows_in_state) >= 20
    third = len(rows_in_state) // 3
    assert max(rows_in_state[-third:]) <= 24, rows_in_state
    assert max(rows_in_state[-third:]) <= max(rows_in_state[:third]) + 8, rows_in_state
    output = stream.output()
    assert output.where("output = 'late'").count() == 0
    # Every user of the first four hours has its one session of four events.
    sessions = output.where("output = 'sessions'").groupBy("event_count").count()
    assertDataFrameEqual(sessions, [(4, 32)])


def test_a_wrong_gap_is_a_compatible_change_new_key_fields_are_refused_by_spark(
    spark: SparkSession, platform_conf: PlatformConfig
) -> None:
    stream = Stream(spark, platform_conf)
    stream.write("web_events", [event("a", "10:00", device="ios")])
    stream.run()
    # The "deliberately wrong version": same state schema, different results.
    edit_job(platform_conf, "sessionizer", lambda spec: spec["pipeline"].update(gap_minutes=5))
    stream.write("web_events", [event("b", "10:20", device="ios")])
    stream.run()
    # The incompatible upgrade: the state is keyed by other fields.
    edit_job(
        platform_conf, "sessionizer", lambda spec: spec["pipeline"].update(key_fields=["user_id", "device"])
    )
    stream.write("web_events", [event("c", "10:40", device="ios")])
    with pytest.raises(StreamingQueryException, match="STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE"):
        stream.run()


@pytest.mark.parametrize(
    ("edit", "written_with", "now"),
    [
        ({"state_buckets": 8}, "state_buckets=4 key_fields=user_id", "state_buckets=8 key_fields=user_id"),
        # A same-typed rename passes Spark's key schema check; the state's layout names the fields.
        (
            {"key_fields": ["device"]},
            "state_buckets=4 key_fields=user_id",
            "state_buckets=4 key_fields=device",
        ),
    ],
)
def test_state_of_another_layout_is_refused_naming_both(
    edit: dict[str, Any], written_with: str, now: str, spark: SparkSession, platform_conf: PlatformConfig
) -> None:
    edit_job(platform_conf, "sessionizer", lambda spec: spec["pipeline"].update(state_buckets=4))
    stream = Stream(spark, platform_conf)
    users = [f"u{i}" for i in range(8)]
    stream.write("web_events", [event(f"a-{u}", "10:00", user=u, device=u) for u in users])
    stream.run()
    edit_job(platform_conf, "sessionizer", lambda spec: spec["pipeline"].update(edit))
    stream.write("web_events", [event(f"b-{u}", "10:10", user=u, device=u) for u in users])
    refused = f"incompatible sessionizer state: the checkpoint has {written_with}, the job has {now}"
    with pytest.raises(StreamingQueryException, match=re.escape(refused)):
        stream.run()


def test_the_next_watermarks_floor_is_a_buckets_newest_event_in_whole_ms_less_the_lateness() -> None:
    """What a bucket may emit at once: sessions ending before the watermark Spark will set at the
    end of the batch, which is at least this (the union's newest event, or the slowest source's)."""
    minute_us = 60_000_000
    union = SessionRules.of(PIPELINE.model_copy(update={"watermark": "union"}))
    slowest = SessionRules.of(PIPELINE.model_copy(update={"watermark": "slowest_source"}))
    assert union.slowest_of == () and slowest.slowest_of == tuple(PIPELINE.sources)
    lateness_us = union.lateness_ms * 1000
    arrived = pd.DataFrame(
        {"_event_time_us": [10 * minute_us, 30 * minute_us + 999], "source": list(PIPELINE.sources)}
    )
    # Spark counts whole milliseconds of the newest event: the 999 microseconds do not count.
    assert union.next_watermark_us(arrived) == 30 * minute_us - lateness_us
    assert slowest.next_watermark_us(arrived) == 10 * minute_us - lateness_us
    # A source without an event in the bucket leaves the slowest one unknown.
    assert slowest.next_watermark_us(arrived.iloc[1:]) == 0
    assert union.next_watermark_us(arrived.iloc[1:]) == 30 * minute_us - lateness_us
    assert union.next_watermark_us(arrived.iloc[0:0]) == 0
