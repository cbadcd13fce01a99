"""The impressions_plays job: transforms on tiny inline inputs, and the real streaming query.

Times are UTC on 2025-01-01 unless a test says otherwise; the job's window is 1 hour and its
allowed lateness 10 minutes (conf/jobs/impressions_plays.yaml).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from jobs.bucketed_state import frame_from_ipc
from jobs.impressions_plays.transform import OUTPUT_SCHEMA, impressions_plays, within_window
from jobs.parsing import parse_events
from ops.spec.job import find_job
from ops.spec.pipelines import ImpressionsPlaysPipeline
from ops.spec.platform import DEFAULT_CONF_DIR, PlatformConfig
from synthetic.scenarios import write_json_lines
from tests.support.drivers import edit_job
from tests.support.spark import run_available_now

JOB = "impressions_plays"
SPEC = find_job(JOB, DEFAULT_CONF_DIR)
assert isinstance(SPEC.pipeline, ImpressionsPlaysPipeline)
PIPELINE: ImpressionsPlaysPipeline = SPEC.pipeline
# Expected rows give times as text; `expected` casts them in the UTC session zone.
TEXT_SCHEMA = OUTPUT_SCHEMA.replace("timestamp", "string")
# The sink puts its partition columns last; tests read it back in the transform's column order.
OUTPUT_COLUMNS = [column.strip().split(" ")[0] for column in OUTPUT_SCHEMA.split(",")]
DAY = dt.date(2025, 1, 1)


def at(clock: str, day: str = "2025-01-01") -> str:
    """An event time from a wall-clock time such as "10:00" or "10:59:59.999"."""
    clock = clock if clock.count(":") == 2 else f"{clock}:00"
    return f"{day}T{clock}{'' if '.' in clock else '.000'}Z"


def impression(impression_id: str, profile: str, title: str, clock: str) -> str:
    return json.dumps(
        {"impression_id": impression_id, "profile_id": profile, "title_id": title, "event_time": at(clock)}
    )


def play(play_id: str, profile: str, title: str, clock: str) -> str:
    return json.dumps({"play_id": play_id, "profile_id": profile, "title_id": title, "event_time": at(clock)})


def join_lines(spark: SparkSession, impression_lines: Sequence[str], play_lines: Sequence[str]) -> DataFrame:
    """The batch transform over raw lines of each source."""

    def parsed(lines: Sequence[str], name: str) -> DataFrame:
        raw = spark.createDataFrame([(line,) for line in lines], "value string")
        return raw.transform(parse_events, PIPELINE.inputs[name])

    return impressions_plays(parsed(impression_lines, "impressions"), parsed(play_lines, "plays"), PIPELINE)


def expected(spark: SparkSession, rows: Sequence[tuple[Any, ...]]) -> DataFrame:
    text = spark.createDataFrame(list(rows), TEXT_SCHEMA)
    return text.withColumns({c: F.col(c).cast("timestamp") for c in ("impression_time", "play_time")})


def conversion(
    impression_id: str, profile: str, title: str, shown: str, play_id: str, played: str
) -> tuple[Any, ...]:
    hour = int(shown[:2])
    return (
        "conversion",
        impression_id,
        profile,
        title,
        at(shown),
        play_id,
        at(played),
        None,
        None,
        None,
        DAY,
        hour,
    )


def unconverted(impression_id: str, profile: str, title: str, shown: str) -> tuple[Any, ...]:
    hour = int(shown[:2])
    return ("unconverted", impression_id, profile, title, at(shown), None, None, None, None, None, DAY, hour)


def test_window_is_one_hour_after_the_impression_both_ends_inclusive(spark: SparkSession) -> None:
    impressions = [
        impression("i-hour", "p1", "t1", "10:00"),
        impression("i-past-hour", "p2", "t1", "10:00"),
        impression("i-same-instant", "p3", "t1", "10:00"),
        impression("i-play-before", "p4", "t1", "10:00"),
        impression("i-other-title", "p5", "t1", "10:00"),
    ]
    plays = [
        play("q-hour", "p1", "t1", "11:00"),
        play("q-past-hour", "p2", "t1", "11:00:00.001"),
        play("q-same-instant", "p3", "t1", "10:00"),
        play("q-play-before", "p4", "t1", "09:59:59.999"),
        play("q-other-title", "p5", "t2", "10:10"),
    ]
    assertDataFrameEqual(
        join_lines(spark, impressions, plays),
        expected(
            spark,
            [
                conversion("i-hour", "p1", "t1", "10:00", "q-hour", "11:00"),
                unconverted("i-past-hour", "p2", "t1", "10:00"),
                conversion("i-same-instant", "p3", "t1", "10:00", "q-same-instant", "10:00"),
                unconverted("i-play-before", "p4", "t1", "10:00"),
                unconverted("i-other-title", "p5", "t1", "10:00"),
            ],
        ),
    )


def test_pairs_duplicates_unmatched_plays_and_dead_letters(spark: SparkSession) -> None:
    bad_play = json.dumps({"profile_id": "p9", "title_id": "t1", "event_time": at("10:00")})
    impressions = [
        # Two impressions, then two plays within the hour of both: four conversion rows.
        impression("i-first", "p6", "t1", "10:00"),
        impression("i-second", "p6", "t1", "10:30"),
        # Resent copies count once.
        impression("i-resent", "p7", "t1", "10:00"),
        impression("i-resent", "p7", "t1", "10:00"),
        '{"impression_id": "i-bro',
    ]
    plays = [
        play("q-first", "p6", "t1", "10:45"),
        play("q-second", "p6", "t1", "10:50"),
        play("q-resent", "p7", "t1", "10:05"),
        play("q-resent", "p7", "t1", "10:05"),
        # A play with no impression is not written.
        play("q-alone", "p8", "t1", "10:00"),
        bad_play,
    ]
    assertDataFrameEqual(
        join_lines(spark, impressions, plays),
        expected(
            spark,
            [
                conversion("i-first", "p6", "t1", "10:00", "q-first", "10:45"),
                conversion("i-first", "p6", "t1", "10:00", "q-second", "10:50"),
                conversion("i-second", "p6", "t1", "10:30", "q-first", "10:45"),
                conversion("i-second", "p6", "t1", "10:30", "q-second", "10:50"),
                conversion("i-resent", "p7", "t1", "10:00", "q-resent", "10:05"),
                (
                    "dead_letter",
                    *[None] * 6,
                    "impressions",
                    "invalid JSON",
                    '{"impression_id": "i-bro',
                    None,
                    None,
                ),
                (
                    "dead_letter",
                    *[None] * 6,
                    "plays",
                    "missing required field 'play_id'",
                    bad_play,
                    DAY,
                    10,
                ),
            ],
        ),
    )


def test_range_join_finds_exactly_the_pairs_a_cross_join_would() -> None:
    rng = np.random.default_rng(7)
    for _ in range(200):
        n = int(rng.integers(1, 60))
        events = pd.DataFrame(
            {
                "source": rng.choice(["impressions", "plays"], n),
                "profile_id": rng.choice(["p1", "p2", "p3"], n),
                "title_id": rng.choice(["t1", "t2"], n),
                # Coarse times, so equal times and both window ends occur.
                "_time_us": rng.integers(0, 20, n) * 500,
            }
        )
        window_us = int(rng.integers(0, 5000))
        is_impression = events["source"].to_numpy() == "impressions"
        shown, played = within_window(events, is_impression, window_us)
        rows = events.to_dict("records")
        expected_pairs = sorted(
            (i, j)
            for i in np.flatnonzero(is_impression)
            for j in np.flatnonzero(~is_impression)
            if (rows[i]["profile_id"], rows[i]["title_id"]) == (rows[j]["profile_id"], rows[j]["title_id"])
            and rows[i]["_time_us"] <= rows[j]["_time_us"] <= rows[i]["_time_us"] + window_us
        )
        assert sorted(zip(shown.tolist(), played.tolist(), strict=True)) == expected_pairs


# --- the real streaming query ----------------------------------------------------------------------


def land(platform: PlatformConfig, step: str, impressions: Sequence[str], plays: Sequence[str]) -> None:
    write_json_lines(platform.landing_root / "impressions", f"impressions-{step}.json", list(impressions))
    write_json_lines(platform.landing_root / "plays", f"plays-{step}.json", list(plays))


def sink(spark: SparkSession, platform: PlatformConfig) -> DataFrame:
    return spark.read.parquet(str(platform.lake_root / PIPELINE.sink.path))


def test_stream_joins_out_of_order_dedups_emits_unconverted_after_the_hour_and_keeps_late_events(
    spark: SparkSession, platform_conf: PlatformConfig
) -> None:
    # Run 1. Watermarks after it: impressions 10:20 - 10 min, plays 10:50 - 10 min; global 10:10.
    land(
        platform_conf,
        "1",
        [
            impression("i1", "p1", "t1", "10:00"),
            impression("i2", "p1", "t2", "10:00"),
            impression("i3", "p2", "t1", "10:20"),
        ],
        # q3 arrives before its impression i4.
        [play("q1", "p1", "t1", "10:30"), play("q3", "p3", "t1", "10:50"), "not json"],
    )
    run_available_now(spark, platform_conf, find_job(JOB, platform_conf.conf_dir))
    # Run 2: i4 joins q3 from state; resends of i3 and q1 are within the watermark and dropped;
    # q2 is out of order (10:15 >= 10:10) but precedes i3, so it converts nothing. Global 10:30.
    land(
        platform_conf,
        "2",
        [impression("i4", "p3", "t1", "10:40"), impression("i3", "p2", "t1", "10:20")],
        [play("q2", "p2", "t1", "10:15"), play("q1", "p1", "t1", "10:30")],
    )
    run_available_now(spark, platform_conf, find_job(JOB, platform_conf.conf_dir))
    written = sorted(
        (row.outcome, row.impression_id, row.play_id) for row in sink(spark, platform_conf).collect()
    )
    # No impression's hour has run out yet: nothing unconverted.
    assert written == [("conversion", "i1", "q1"), ("conversion", "i4", "q3"), ("dead_letter", None, None)]
    # Run 3 moves both watermarks to 11:50: i2 (window to 11:00) and i3 (to 11:20) are written
    # unconverted; i1 and i4 converted, so they leave state silently.
    land(platform_conf, "3", [impression("i5", "p9", "t9", "12:00")], [play("q4", "p9", "t9", "12:00")])
    run_available_now(spark, platform_conf, find_job(JOB, platform_conf.conf_dir))
    # Run 4: older than the 11:50 watermark, so late: written as such and joined to nothing. q5
    # would have converted i3, already written unconverted; i6 would have joined q4.
    land(platform_conf, "4", [impression("i6", "p9", "t9", "11:30")], [play("q5", "p2", "t1", "10:25")])
    run_available_now(spark, platform_conf, find_job(JOB, platform_conf.conf_dir))

    assertDataFrameEqual(
        sink(spark, platform_conf).select(*OUTPUT_COLUMNS),
        expected(
            spark,
            [
                conversion("i1", "p1", "t1", "10:00", "q1", "10:30"),
                conversion("i4", "p3", "t1", "10:40", "q3", "10:50"),
                conversion("i5", "p9", "t9", "12:00", "q4", "12:00"),
                unconverted("i2", "p1", "t2", "10:00"),
                unconverted("i3", "p2", "t1", "10:20"),
                ("late", "i6", "p9", "t9", at("11:30"), None, None, "impressions", None, None, DAY, 11),
                ("late", None, "p2", "t1", None, "q5", at("10:25"), "plays", None, None, DAY, 10),
                ("dead_letter", *[None] * 6, "plays", "invalid JSON", "not json", None, None),
            ],
        ),
    )


def test_state_stays_bounded_as_the_watermark_advances(
    spark: SparkSession, platform_conf: PlatformConfig
) -> None:
    def one_file_per_batch(spec: dict[str, Any]) -> None:
        spec["operations"]["trigger"]["max_files_per_trigger"] = 1

    edit_job(platform_conf, JOB, one_file_per_batch)
    # 18 files per source, 10 minutes of event time each: 8 impressions and 4 plays per file,
    # landed and run 6 files at a time; the pending events in state are counted after each run.
    pending = []
    for run in range(3):
        for k in range(6 * run, 6 * run + 6):
            minute = 10 * k
            impressions = [
                impression(f"i{k}-{j}", f"p{j % 4}", f"t{k % 3}", clock(minute + j)) for j in range(8)
            ]
            plays = [play(f"q{k}-{j}", f"p{j}", f"t{k % 3}", clock(minute + 5 + j)) for j in range(4)]
            write_json_lines(
                platform_conf.landing_root / "impressions", f"i-{k:02d}.json", impressions, 100.0 - k
            )
            write_json_lines(platform_conf.landing_root / "plays", f"q-{k:02d}.json", plays, 100.0 - k)
        run_available_now(spark, platform_conf, find_job(JOB, platform_conf.conf_dir))
        pending.append(pending_events(spark, platform_conf))
    # Impressions wait window + lateness (about 7 files of 8), plays the lateness (1-2 files of
    # 4): about 70 events, whether 72 or 216 events have been read.
    assert max(pending[1:]) <= 80, pending
    assert pending[2] <= pending[1] + 8, pending
    assert sink(spark, platform_conf).where("outcome = 'late'").count() == 0


def pending_events(spark: SparkSession, platform: PlatformConfig) -> int:
    """The events held in the job's state (each bucket's Arrow blob), read with Spark's state reader."""
    state = spark.read.format("statestore").load(str(platform.checkpoint_root / JOB))
    blobs = state.select("value.groupState.events").collect()
    return sum(len(frame_from_ipc(row.events)) for row in blobs)


def clock(minutes: int) -> str:
    """HH:MM from minutes after 10:00 (on 2025-01-01; stays within the day)."""
    return f"{10 + minutes // 60:02d}:{minutes % 60:02d}"
