"""campaign_uniques: hourly exact/HLL uniques and the per-user sliding distinct count, batch and stream."""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from pathlib import Path

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from jobs.campaign_uniques.transform import SINK_COLUMNS, campaign_uniques, distinct_campaigns
from jobs.parsing import parse_events
from jobs.runner import plan_job
from jobs.runtime import with_trigger
from ops.driver.listener import state_rows
from ops.driver.session import state_conf
from ops.spec.job import JobSpec, find_job
from ops.spec.pipelines import CampaignUniquesPipeline
from ops.spec.platform import PlatformConfig

JOB = "campaign_uniques"
ROW = tuple[object, ...]
SCHEMA = (
    "output string, campaign_id string, user_id string, event_id string, event_time timestamp, "
    "event_type string, window_start timestamp, window_end timestamp, unique_users long, "
    "distinct_campaigns long, dead_letter_reason string, raw string, event_date date"
)


def ts(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text)


def engagement(event_id: str, user: str, campaign: str, at: str) -> str:
    return json.dumps(
        {
            "event_id": event_id,
            "event_time": at + "Z",
            "campaign_id": campaign,
            "user_id": user,
            "event_type": "open",
        }
    )


def hourly(output: str, campaign: str, start: str, users: int) -> ROW:
    begin = ts(start)
    end = begin + dt.timedelta(hours=1)
    return (output, campaign, None, None, None, None, begin, end, users, None, None, None, begin.date())


def hourly_both(hours: list[tuple[str, str, int]]) -> list[ROW]:
    """The rows of (campaign, hour start, users) in `hourly_exact` and, equal here, `hourly_approx`."""
    return [
        hourly(output, campaign, start, users)
        for output in ("hourly_exact", "hourly_approx")
        for campaign, start, users in hours
    ]


def enriched(event_id: str, user: str, campaign: str, at: str, end: str, campaigns: int) -> ROW:
    stop = ts(end)
    moment = ts(at)
    start = stop - dt.timedelta(hours=24)
    return (
        "enriched",
        campaign,
        user,
        event_id,
        moment,
        "open",
        start,
        stop,
        None,
        campaigns,
        None,
        None,
        moment.date(),
    )


def late(event_id: str, user: str, campaign: str, at: str) -> ROW:
    moment = ts(at)
    return (
        "late",
        campaign,
        user,
        event_id,
        moment,
        "open",
        None,
        None,
        None,
        None,
        None,
        None,
        moment.date(),
    )


def dead(reason: str, raw: str) -> ROW:
    return ("dead_letter", None, None, None, None, None, None, None, None, None, reason, raw, None)


def pipeline_of(platform: PlatformConfig) -> CampaignUniquesPipeline:
    pipeline = find_job(JOB, platform.conf_dir).pipeline
    assert isinstance(pipeline, CampaignUniquesPipeline)
    return pipeline


def test_batch_counts_dedups_and_slides(spark: SparkSession, platform_conf: PlatformConfig) -> None:
    pipeline = pipeline_of(platform_conf)
    lines = [
        engagement("e6", "u1", "c4", "2024-12-31T10:30:00"),
        engagement("e5", "u1", "c3", "2025-01-01T09:15:00"),
        # Exactly on the hour: hour 10:00 and the sliding window ending at 11:00.
        engagement("e1", "u1", "c1", "2025-01-01T10:00:00"),
        engagement("e1", "u1", "c1", "2025-01-01T10:00:00"),
        engagement("e2", "u1", "c1", "2025-01-01T10:30:00"),
        engagement("e3", "u2", "c1", "2025-01-01T10:59:59.999"),
        engagement("e4", "u1", "c2", "2025-01-01T11:00:00"),
        "not json",
    ]
    raw = spark.createDataFrame([(line,) for line in lines], "value string")
    actual = campaign_uniques(parse_events(raw, pipeline.source), pipeline)
    expected = [
        *hourly_both(
            [
                ("c4", "2024-12-31T10:00:00", 1),
                ("c3", "2025-01-01T09:00:00", 1),
                ("c1", "2025-01-01T10:00:00", 2),
                ("c2", "2025-01-01T11:00:00", 1),
            ]
        ),
        enriched("e6", "u1", "c4", "2024-12-31T10:30:00", "2024-12-31T11:00:00", 1),
        # [12-31 10:00, 01-01 10:00) still holds e6.
        enriched("e5", "u1", "c3", "2025-01-01T09:15:00", "2025-01-01T10:00:00", 2),
        enriched("e1", "u1", "c1", "2025-01-01T10:00:00", "2025-01-01T11:00:00", 2),
        enriched("e2", "u1", "c1", "2025-01-01T10:30:00", "2025-01-01T11:00:00", 2),
        enriched("e3", "u2", "c1", "2025-01-01T10:59:59.999", "2025-01-01T11:00:00", 1),
        enriched("e4", "u1", "c2", "2025-01-01T11:00:00", "2025-01-01T12:00:00", 3),
        dead("invalid JSON", "not json"),
    ]
    assertDataFrameEqual(actual, spark.createDataFrame(expected, SCHEMA))


def test_distinct_campaigns_counts_each_users_window_start_in_end_out() -> None:
    hour = 3600 * 1_000_000
    history = pd.DataFrame(
        {
            "user_id": ["u1", "u1", "u1", "u1", "u2"],
            "campaign_id": ["c1", "c3", "c2", "c1", "c9"],
            "event_us": [0, 3 * hour - 1, hour, 2 * hour, hour],
        }
    )
    ends = np.array([4 * hour, hour, 3 * hour, 2 * hour, 5 * hour, 2 * hour, 3 * hour])
    users = np.array(["u1"] * 5 + ["u2", "u3"])
    # Two-hour windows [end - 2 h, end): the start is in, the end is out; users apart.
    counts = distinct_campaigns(history, users, ends, 2 * hour)
    assert counts.tolist() == [2, 1, 3, 2, 0, 1, 0]


def write_landing(landing: Path, files: list[list[str]]) -> None:
    """Files named in order, modification times in the same order (the file source reads oldest first)."""
    landing.mkdir(parents=True, exist_ok=True)
    now = time.time()
    for index, lines in enumerate(files):
        path = landing / f"part-{index:03d}.json"
        temp = landing / f".part-{index:03d}.tmp"
        temp.write_text("".join(line + "\n" for line in lines))
        moment = now - 1000 + index
        os.utime(temp, (moment, moment))
        os.replace(temp, path)


def one_file_per_batch(spec: JobSpec, **pipeline: object) -> JobSpec:
    trigger = spec.operations.trigger.model_copy(update={"max_files_per_trigger": 1})
    return spec.model_copy(
        update={
            "operations": spec.operations.model_copy(update={"trigger": trigger}),
            "pipeline": spec.pipeline.model_copy(update=pipeline),
        }
    )


def run_stream(spark: SparkSession, platform: PlatformConfig, spec: JobSpec) -> list[dict[str, object]]:
    for key, value in state_conf(spec).items():
        spark.conf.set(key, value)
    query = with_trigger(plan_job(platform, spec), spec, available_now=True)(spark).start()
    query.awaitTermination(600)
    assert query.exception() is None
    return list(query.recentProgress)


def assert_state_levels_off(progress: list[dict[str, object]], below: int) -> None:
    """State rows after the batches with input: the last third grows at most 20 % over the middle
    third (bounded, not growing with the input), and stays under `below`."""
    rows = [state_rows(p) or 0 for p in progress if p["numInputRows"]]
    third = len(rows) // 3
    assert max(rows[-third:]) <= max(rows[third : 2 * third]) * 1.2
    assert max(rows) < below


def sink(spark: SparkSession, platform: PlatformConfig, spec: JobSpec) -> DataFrame:
    return spark.read.parquet(str(platform.lake_root / spec.pipeline.sink.path)).select(*SINK_COLUMNS)


def test_stream_watermark_late_duplicates_and_out_of_order(
    spark: SparkSession, platform_conf: PlatformConfig
) -> None:
    spec = one_file_per_batch(find_job(JOB, platform_conf.conf_dir))
    # Watermark of each batch (10 min lateness): b0 none, b1 10:40, b2 10:50, b3 12:20, b4 12:20.
    write_landing(
        platform_conf.landing_root / "engagements",
        [
            [
                engagement("e1", "u1", "c1", "2025-01-01T10:00:00"),
                engagement("e1", "u1", "c1", "2025-01-01T10:00:00"),
                engagement("e2", "u1", "c1", "2025-01-01T10:30:00"),
                engagement("e3", "u2", "c1", "2025-01-01T10:50:00"),
                "{broken",
            ],
            # e7 is out of order but not older than the watermark (10:40); e1 is resent while pending;
            # e11 is exactly at the watermark: late for the enrichment (Spark's rule, at or behind),
            # counted in hour 10, which Spark's hourly operators close only at 11:00.
            [
                engagement("e4", "u1", "c2", "2025-01-01T11:00:00"),
                engagement("e7", "u3", "c1", "2025-01-01T10:42:00"),
                engagement("e1", "u1", "c1", "2025-01-01T10:00:00"),
                engagement("e11", "u6", "c1", "2025-01-01T10:40:00"),
            ],
            [engagement("e8", "u1", "c3", "2025-01-01T12:30:00")],
            # Older than the watermark (12:20) while hour 10 is still open for Spark's hourly
            # operators (closed by the previous batch's watermark, 10:50, only at 11:00): late for
            # the enrichment, still counted in its hour.
            [engagement("e9", "u4", "c1", "2025-01-01T10:20:00")],
            # Hour 10 closed at the previous batch's watermark (12:20): late, and not counted.
            [engagement("e10", "u5", "c1", "2025-01-01T10:05:00")],
            # The flush: closes every window above; its own stay open.
            [engagement("f", "uf", "cf", "2025-01-03T00:00:00")],
        ],
    )
    progress = run_stream(spark, platform_conf, spec)
    expected = [
        *hourly_both(
            [
                ("c1", "2025-01-01T10:00:00", 5),
                ("c2", "2025-01-01T11:00:00", 1),
                ("c3", "2025-01-01T12:00:00", 1),
            ]
        ),
        enriched("e1", "u1", "c1", "2025-01-01T10:00:00", "2025-01-01T11:00:00", 1),
        enriched("e2", "u1", "c1", "2025-01-01T10:30:00", "2025-01-01T11:00:00", 1),
        enriched("e3", "u2", "c1", "2025-01-01T10:50:00", "2025-01-01T11:00:00", 1),
        enriched("e7", "u3", "c1", "2025-01-01T10:42:00", "2025-01-01T11:00:00", 1),
        enriched("e4", "u1", "c2", "2025-01-01T11:00:00", "2025-01-01T12:00:00", 2),
        enriched("e8", "u1", "c3", "2025-01-01T12:30:00", "2025-01-01T13:00:00", 3),
        late("e9", "u4", "c1", "2025-01-01T10:20:00"),
        late("e10", "u5", "c1", "2025-01-01T10:05:00"),
        late("e11", "u6", "c1", "2025-01-01T10:40:00"),
        dead("invalid JSON", "{broken"),
    ]
    assertDataFrameEqual(sink(spark, platform_conf, spec), spark.createDataFrame(expected, SCHEMA))
    dropped = sum(op["numRowsDroppedByWatermark"] for p in progress for op in p["stateOperators"])
    # e10 is dropped by the dedup in front of the hourly aggregation, and reported.
    assert dropped == 1


def test_hll_within_rsd_of_exact(spark: SparkSession, platform_conf: PlatformConfig) -> None:
    pipeline = pipeline_of(platform_conf).model_copy(update={"approx_rsd": 0.05})
    lines = [
        engagement(f"e{i}", f"u{(i * 7919) % 3000}", f"c{i % 2}", f"2025-01-01T10:{(i // 100) % 60:02d}:00")
        for i in range(6000)
    ]
    raw = spark.createDataFrame([(line,) for line in lines], "value string")
    rows = campaign_uniques(parse_events(raw, pipeline.source), pipeline).where(
        F.col("output").startswith("hourly")
    )
    counts = {(row.output, row.campaign_id): row.unique_users for row in rows.collect()}
    for campaign in ("c0", "c1"):
        exact = counts[("hourly_exact", campaign)]
        assert exact == 1500
        # Three standard deviations: fails by chance with probability < 0.3 %, and the
        # estimate is deterministic for a given input.
        assert abs(counts[("hourly_approx", campaign)] - exact) <= 3 * pipeline.approx_rsd * exact


def test_state_stays_bounded(spark: SparkSession, platform_conf: PlatformConfig) -> None:
    spec = one_file_per_batch(
        find_job(JOB, platform_conf.conf_dir),
        hour_seconds=600,
        recent_window_seconds=1800,
        recent_slide_seconds=600,
        allowed_lateness_seconds=120,
    )
    start = dt.datetime(2025, 1, 1)
    files = []
    # The state levels off from the fifth batch on (window, slide and lateness): with 12, the
    # middle and last thirds both lie on the plateau.
    for batch in range(12):
        files.append(
            [
                engagement(
                    f"e{batch}-{i}",
                    f"u{(batch * 5 + i) % 40}",
                    f"c{i % 6}",
                    (start + dt.timedelta(minutes=5 * batch, seconds=15 * i)).isoformat(),
                )
                for i in range(20)
            ]
        )
    write_landing(platform_conf.landing_root / "engagements", files)
    # Each batch adds 20 engagements over 5 minutes; the window and slide bound what is kept.
    assert_state_levels_off(run_stream(spark, platform_conf, spec), below=400)
