"""Campaign uniques (Klaviyo; Fairfax's interval join): engagements -> unique counts and enrichments.

One query, one Parquet sink partitioned by `output` and `event_date`. The outputs:

* `hourly_exact`: per campaign and closed hour, the exact number of distinct users
  (`unique_users`), with `window_start`/`window_end`.
* `hourly_approx`: the same hours, estimated by HyperLogLog++ (`approx_count_distinct`, relative
  standard deviation `approx_rsd`).
* `enriched`: every accepted engagement exactly once, with `distinct_campaigns`: the number of
  distinct campaigns its user engaged with in the sliding window `[end - recent_window, end)`,
  where `end` is the first slide boundary strictly after the event (an event exactly at hh:00:00
  belongs to the window ending at hh+1:00).
* `late`: engagements that arrived after the watermark had passed them (see below).
* `dead_letter`: malformed lines with `dead_letter_reason` and `raw`.

What Spark 4.3 supports, and so how each output is computed (checked on 4.3.0):

* Exact distinct counts: `count_distinct` is refused on a streaming DataFrame ("distinct
  aggregations are not supported"). So the exact count is two chained stateful operators:
  `dropDuplicates(campaign_id, user_id, hour)` (state: one key per campaign, hour and user, evicted
  when the watermark passes the hour's end, because the hour window carries the watermark) and a
  tumbling-window `count` per campaign and hour, emitted once in append mode when the watermark
  passes the hour's end. Spark >= 3.4 allows several stateful operators in one append query and
  propagates the watermark between them.
* Approximate: `approx_count_distinct` is a plain streaming aggregation whose state is one sketch
  per campaign and hour, over the raw (not deduplicated) events: duplicates cannot change a
  distinct count. Sketches merge by register maximum, so the stream and the batch estimate agree.
* The sliding distinct count joined back onto each event: a window aggregation joined back to
  the events would chain aggregation -> stream-stream join, with a 24 h window of join state for
  each side, and its late rows would vanish without trace. Instead one per-user stateful
  processor (`applyInPandasWithState`, event-time timeouts, RocksDB state) keeps the user's
  accepted engagements of the last `recent_window` (for counting) and the engagements whose
  window has not closed yet (pending, deduplicated by `event_id`). When the watermark reaches a
  window's end every pending engagement of that window is emitted once, with the final count; a
  timer at the next window end (or when the history expires) wakes the user with no new data.
  State per user is bounded by their engagements in one `recent_window`.

Watermark and lateness: the watermark is the newest event time seen in earlier micro-batches
minus `allowed_lateness_seconds`. The per-user processor sees every row: Spark 4.3 drops rows
older than the previous batch's watermark in front of `applyInPandasWithState`, judged on the
column tagged as event time (checked: such a row never reached the processor), so the processor
gets the event time as plain microseconds plus a constant far-future tagged column (event-time
timeouts require one), and decides itself:

* an engagement with `event_time < watermark` of the batch it arrives in is `late`: written to
  the `late` output (its columns, no window, no count), and neither counted in nor enriched by
  the sliding windows; nothing is dropped silently;
* an engagement whose `event_id` is already pending for its user is a duplicate and is dropped
  (a resent copy after its window was emitted is older than the watermark, hence `late`).

The hourly operators are Spark's own: an engagement is left out of an hour only if that hour had
already closed (its end <= the previous batch's watermark, reported as `numRowsDroppedByWatermark`),
and such an engagement is older than the watermark, so it is also in `late`. An engagement slightly
older than the watermark while its hour is still open is counted in the hour and listed in `late`.

In batch every window is closed and nothing is late: the hourly outputs are the same operators,
and the enrichment runs the same per-user computation (`recent_counts`) over all of a user's
engagements at once, after `dropDuplicates(event_id)`.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

import pandas as pd
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout

from jobs.runtime import DEAD_LETTER_REASON, RAW
from ops.pipelines import DEAD_LETTER_ROUTE, CampaignUniquesPipeline

OUTPUT = "output"
EVENT_DATE = "event_date"
PARTITION_COLUMNS = (OUTPUT, EVENT_DATE)
HOURLY_EXACT = "hourly_exact"
HOURLY_APPROX = "hourly_approx"
ENRICHED = "enriched"
LATE = "late"

SINK_COLUMNS = (
    OUTPUT,
    "campaign_id",
    "user_id",
    "event_id",
    "event_time",
    "event_type",
    "window_start",
    "window_end",
    "unique_users",
    "distinct_campaigns",
    DEAD_LETTER_REASON,
    RAW,
    EVENT_DATE,
)
_SINK_TYPES: dict[str, T.DataType] = {
    OUTPUT: T.StringType(),
    "campaign_id": T.StringType(),
    "user_id": T.StringType(),
    "event_id": T.StringType(),
    "event_time": T.TimestampType(),
    "event_type": T.StringType(),
    "window_start": T.TimestampType(),
    "window_end": T.TimestampType(),
    "unique_users": T.LongType(),
    "distinct_campaigns": T.LongType(),
    DEAD_LETTER_REASON: T.StringType(),
    RAW: T.StringType(),
    EVENT_DATE: T.DateType(),
}
_HOUR = "_hour"
# The per-user processor's rows: times as microseconds since the epoch, converted back in Spark.
_PROCESSOR_OUTPUT = (
    "user_id string, output string, event_id string, campaign_id string, event_type string, "
    "event_us long, window_end_us long, distinct_campaigns long"
)
_PROCESSOR_STATE = "state string"
# Spark accepts event-time timeouts only when the processor's input has a column tagged as event
# time, and then drops the rows whose tagged column is older than the previous batch's watermark
# before the processor sees them. The processor decides lateness itself, so its input carries the
# event time as plain microseconds plus this far-future column tagged as event time: nothing is
# dropped in front of it. The watermark itself comes from `withWatermark` on the real event time.
_TIMER = "_timer"
# Within pandas timestamps (the processor receives the column), far beyond any event.
_FAR_FUTURE = dt.datetime(2200, 1, 1)


def undroppable_event_time() -> Column:
    """A constant far-future timestamp tagged as event time (see above)."""
    return F.lit(_FAR_FUTURE).alias(_TIMER, metadata={"spark.watermarkDelayMs": 0})


_MICROS = 1_000_000


def _conform(rows: DataFrame) -> DataFrame:
    """`rows` with every sink column, in sink order, missing ones as typed nulls."""
    return rows.select(
        *[
            (F.col(name) if name in rows.columns else F.lit(None)).cast(_SINK_TYPES[name]).alias(name)
            for name in SINK_COLUMNS
        ]
    )


def campaign_uniques(engagements: DataFrame, pipeline: CampaignUniquesPipeline) -> DataFrame:
    """Parsed engagements -> the rows of every output (see the module docstring)."""
    event_time = pipeline.source.event_time_field
    if event_time != "event_time":
        engagements = engagements.withColumnRenamed(event_time, "event_time")
    if "event_type" not in engagements.columns:
        engagements = engagements.withColumn("event_type", F.lit(None).cast("string"))
    if engagements.isStreaming:
        engagements = engagements.withWatermark("event_time", f"{pipeline.allowed_lateness_seconds} seconds")
    valid = engagements.where(F.col(DEAD_LETTER_REASON).isNull())
    dead = engagements.where(F.col(DEAD_LETTER_REASON).isNotNull()).select(
        F.lit(DEAD_LETTER_ROUTE).alias(OUTPUT),
        DEAD_LETTER_REASON,
        RAW,
        F.to_date("event_time").alias(EVENT_DATE),
    )
    return (
        hourly_exact(valid, pipeline)
        .unionByName(hourly_approx(valid, pipeline))
        .unionByName(enriched(valid, pipeline))
        .unionByName(_conform(dead))
    )


def _with_hour(valid: DataFrame, pipeline: CampaignUniquesPipeline) -> DataFrame:
    return valid.withColumn(_HOUR, F.window("event_time", f"{pipeline.hour_seconds} seconds"))


def _hourly_rows(counts: DataFrame, output: str) -> DataFrame:
    return _conform(
        counts.select(
            F.lit(output).alias(OUTPUT),
            "campaign_id",
            F.col(f"{_HOUR}.start").alias("window_start"),
            F.col(f"{_HOUR}.end").alias("window_end"),
            "unique_users",
            F.to_date(F.col(f"{_HOUR}.start")).alias(EVENT_DATE),
        )
    )


def hourly_exact(valid: DataFrame, pipeline: CampaignUniquesPipeline) -> DataFrame:
    """Exact distinct users per campaign and hour: deduplicate (campaign, hour, user), then count."""
    counts = (
        _with_hour(valid, pipeline)
        .dropDuplicates(["campaign_id", "user_id", _HOUR])
        .groupBy("campaign_id", _HOUR)
        .agg(F.count(F.lit(1)).alias("unique_users"))
    )
    return _hourly_rows(counts, HOURLY_EXACT)


def hourly_approx(valid: DataFrame, pipeline: CampaignUniquesPipeline) -> DataFrame:
    """HyperLogLog++ estimate of the distinct users per campaign and hour (one sketch per key)."""
    counts = (
        _with_hour(valid, pipeline)
        .groupBy("campaign_id", _HOUR)
        .agg(F.approx_count_distinct("user_id", pipeline.approx_rsd).alias("unique_users"))
    )
    return _hourly_rows(counts, HOURLY_APPROX)


def enriched(valid: DataFrame, pipeline: CampaignUniquesPipeline) -> DataFrame:
    """Each engagement once, with its user's distinct campaigns in the window ending after it;
    in a stream also the `late` engagements."""
    window_us = pipeline.recent_window_seconds * _MICROS
    slide_us = pipeline.recent_slide_seconds * _MICROS
    columns = valid.select(
        "user_id", "event_id", "campaign_id", "event_type", F.unix_micros("event_time").alias("event_us")
    )
    if valid.isStreaming:
        columns = columns.select("*", undroppable_event_time())

        def process(
            key: tuple[Any, ...], batches: Iterator[pd.DataFrame], state: GroupState
        ) -> Iterator[pd.DataFrame]:
            yield from _process_user(key, batches, state, window_us, slide_us)

        rows = columns.groupBy("user_id").applyInPandasWithState(
            process, _PROCESSOR_OUTPUT, _PROCESSOR_STATE, "append", GroupStateTimeout.EventTimeTimeout
        )
    else:

        def batch(key: tuple[Any, ...], events: pd.DataFrame) -> pd.DataFrame:
            pending = _records(events)
            return _frame(key, recent_counts(pending, pending, window_us, slide_us))

        rows = columns.dropDuplicates(["event_id"]).groupBy("user_id").applyInPandas(batch, _PROCESSOR_OUTPUT)
    event_time = F.timestamp_micros("event_us")
    window_end = F.timestamp_micros("window_end_us")
    return _conform(
        rows.select(
            OUTPUT,
            "campaign_id",
            "user_id",
            "event_id",
            event_time.alias("event_time"),
            "event_type",
            (window_end - F.make_dt_interval(secs=F.lit(pipeline.recent_window_seconds))).alias(
                "window_start"
            ),
            window_end.alias("window_end"),
            "distinct_campaigns",
            F.to_date(event_time).alias(EVENT_DATE),
        )
    )


# --- the per-user computation (plain Python, shared by the stream and the batch) ----------------

# An engagement as the processor keeps it: [event_id, campaign_id, event_type, event_us].
Record = list[Any]


def window_end_us(event_us: int, slide_us: int) -> int:
    """The end of the sliding window an event is reported in: the first slide boundary after it."""
    return (event_us // slide_us + 1) * slide_us


def distinct_campaigns_by_end(
    history: Iterable[Record], ends: Iterable[int], window_us: int
) -> dict[int, int]:
    """For each window end, the distinct campaigns of `history` in `[end - window_us, end)`.

    One sweep over the history in time order with a count per campaign in the window, so the cost
    is the sort, not history x windows (a user's engagements of a day, for each of them).
    """
    timeline = sorted((record[3], record[1]) for record in history)
    in_window: Counter[str] = Counter()
    counts: dict[int, int] = {}
    first = last = 0
    for end in sorted(ends):
        while last < len(timeline) and timeline[last][0] < end:
            in_window[timeline[last][1]] += 1
            last += 1
        while first < last and timeline[first][0] < end - window_us:
            campaign = timeline[first][1]
            in_window[campaign] -= 1
            if not in_window[campaign]:
                del in_window[campaign]
            first += 1
        counts[end] = len(in_window)
    return counts


def recent_counts(
    pending: Iterable[Record], history: list[Record], window_us: int, slide_us: int
) -> list[tuple[Any, ...]]:
    """Enriched rows for `pending`: each with the distinct campaigns of `history` in its window."""
    reported = [(record, window_end_us(record[3], slide_us)) for record in pending]
    campaigns = distinct_campaigns_by_end(history, {end for _, end in reported}, window_us)
    return [
        (ENRICHED, event_id, campaign_id, event_type, event_us, end, campaigns[end])
        for (event_id, campaign_id, event_type, event_us), end in reported
    ]


def _records(events: pd.DataFrame) -> list[Record]:
    return [
        [
            row.event_id,
            row.campaign_id,
            None if pd.isna(row.event_type) else row.event_type,
            int(row.event_us),
        ]
        for row in events.itertuples(index=False)
    ]


def _frame(key: tuple[Any, ...], rows: list[tuple[Any, ...]]) -> pd.DataFrame:
    columns = [
        "output",
        "event_id",
        "campaign_id",
        "event_type",
        "event_us",
        "window_end_us",
        "distinct_campaigns",
    ]
    frame = pd.DataFrame(rows, columns=columns).astype(
        {"event_us": "int64", "window_end_us": "Int64", "distinct_campaigns": "Int64"}
    )
    frame.insert(0, "user_id", key[0])
    return frame


def _process_user(
    key: tuple[Any, ...], batches: Iterator[pd.DataFrame], state: GroupState, window_us: int, slide_us: int
) -> Iterator[pd.DataFrame]:
    """One user's call of the stream processor: accept/late/dedup new rows, emit closed windows."""
    watermark_us = state.getCurrentWatermarkMs() * 1000
    kept: dict[str, list[Record]] = (
        json.loads(state.get[0]) if state.exists else {"history": [], "pending": []}
    )
    history, pending = kept["history"], kept["pending"]
    pending_ids = {record[0] for record in pending}
    rows: list[tuple[Any, ...]] = []
    if not state.hasTimedOut:
        for events in batches:
            for record in _records(events):
                event_id, campaign_id, event_type, event_us = record
                if event_id in pending_ids:
                    continue
                if event_us < watermark_us:
                    rows.append((LATE, event_id, campaign_id, event_type, event_us, None, None))
                else:
                    pending_ids.add(event_id)
                    pending.append(record)
                    history.append(record)
    closed = [record for record in pending if window_end_us(record[3], slide_us) <= watermark_us]
    rows.extend(recent_counts(closed, history, window_us, slide_us))
    pending = [record for record in pending if window_end_us(record[3], slide_us) > watermark_us]
    # Windows still to be emitted end after the watermark, so they start after watermark - window.
    history = [record for record in history if record[3] > watermark_us - window_us]
    if pending or history:
        state.update((json.dumps({"history": history, "pending": pending}),))
        wake_us = min(
            [window_end_us(record[3], slide_us) for record in pending]
            + [max(record[3] for record in history) + window_us]
        )
        # The timer fires once the watermark (ms) is > the timestamp, i.e. >= the wake-up time.
        state.setTimeoutTimestamp(-(-wake_us // 1000) - 1)
    else:
        state.remove()
    if rows:
        yield _frame(key, rows)
