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
* Approximate: `approx_count_distinct` in the same aggregation, over the deduplicated rows: a
  HyperLogLog sketch ignores duplicates, so it estimates the same as over the raw events, and one
  aggregation (one read of the input, one state store per partition) gives both rows of an hour.
  Sketches merge by register maximum, so the stream and the batch estimate agree.
* The sliding distinct count joined back onto each event: a window aggregation joined back to
  the events would chain aggregation -> stream-stream join, with a 24 h window of join state for
  each side, and its late rows would vanish without trace. Instead one stateful processor
  (`applyInPandasWithState`, event-time timeouts, RocksDB state) keeps each user's accepted
  engagements of the last `recent_window` (for counting), flagging those whose window has not
  closed yet (pending, deduplicated by `event_id`). When the watermark reaches a window's end every
  pending engagement of that window is emitted once, with the final count; a timer at the next
  window end (or when the history expires) wakes the processor with no new data. Users are hashed
  into `state_buckets` buckets, one pandas call and one state row per bucket
  (`jobs.bucketed_state`); the counts are a range join of the window ends over the users' sorted
  histories, with numpy. State is bounded by the engagements of one `recent_window`.

Watermark and lateness: the watermark is the newest event time seen in earlier micro-batches
minus `allowed_lateness_seconds`. The processor sees every row (Spark would drop late rows in
front of it; `jobs.bucketed_state.operator_watermark` says how they reach it) and decides itself:

* an engagement with `event_time <= watermark` of the batch it arrives in is `late` (Spark's own
  rule, as in every job with a `late` output): written to
  the `late` output (its columns, no window, no count), and neither counted in nor enriched by
  the sliding windows; nothing is dropped silently;
* an engagement whose `event_id` is already pending for its user is a duplicate and is dropped
  (a resent copy after its window was emitted is older than the watermark, hence `late`).

The hourly operators are Spark's own: an engagement is left out of an hour only if that hour had
already closed (its end <= the previous batch's watermark, reported as `numRowsDroppedByWatermark`),
and such an engagement is older than the watermark, so it is also in `late`. An engagement slightly
older than the watermark while its hour is still open is counted in the hour and listed in `late`.

In batch every window is closed and nothing is late: the hourly outputs are the same operators,
and the enrichment runs the same bucket computation (`enrich_bucket`) over all engagements at
once, after `dropDuplicates(event_id)`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout

from jobs.bucketed_state import (
    BUCKET,
    STATE_SCHEMA,
    batch_function,
    bucket_of,
    concat_frames,
    operator_watermark,
    range_pairs,
    read_state,
    state_layout,
    stream_function,
    timeout_reaching,
    write_state,
)
from jobs.parsing import RAW
from ops.spec.pipelines import DEAD_LETTER_REASON, DEAD_LETTER_ROUTE, CampaignUniquesPipeline

OUTPUT = "output"
EVENT_DATE = "event_date"
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
# The processor's rows: times as microseconds since the epoch, converted back in Spark.
_PROCESSOR_OUTPUT = (
    "user_id string, output string, event_id string, campaign_id string, event_type string, "
    "event_us long, window_end_us long, distinct_campaigns long, dead_letter_reason string, raw string"
)
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
    return hourly(valid, pipeline).unionByName(enriched(engagements, pipeline))


def hourly(valid: DataFrame, pipeline: CampaignUniquesPipeline) -> DataFrame:
    """Distinct users per campaign and hour, exact and HyperLogLog++: deduplicate (campaign, hour,
    user), then count the rows and sketch the users; one `hourly_exact` and one `hourly_approx`
    row per campaign and hour."""
    counts = (
        valid.withColumn(_HOUR, F.window("event_time", f"{pipeline.hour_seconds} seconds"))
        .dropDuplicates(["campaign_id", "user_id", _HOUR])
        .groupBy("campaign_id", _HOUR)
        .agg(
            F.count(F.lit(1)).alias(HOURLY_EXACT),
            F.approx_count_distinct("user_id", pipeline.approx_rsd).alias(HOURLY_APPROX),
        )
    )
    both = F.array(
        *(
            F.struct(F.lit(output).alias(OUTPUT), F.col(output).alias("unique_users"))
            for output in (HOURLY_EXACT, HOURLY_APPROX)
        )
    )
    return _conform(
        counts.select("campaign_id", _HOUR, F.inline(both)).select(
            OUTPUT,
            "campaign_id",
            F.col(f"{_HOUR}.start").alias("window_start"),
            F.col(f"{_HOUR}.end").alias("window_end"),
            "unique_users",
            F.to_date(F.col(f"{_HOUR}.start")).alias(EVENT_DATE),
        )
    )


def enriched(engagements: DataFrame, pipeline: CampaignUniquesPipeline) -> DataFrame:
    """Each engagement once, with its user's distinct campaigns in the window ending after it;
    in a stream also the `late` engagements; and the malformed lines as dead letters.

    The dead letters pass through the processor (which writes them at once) so that the input
    is read and parsed once for the enrichment and the dead letters together.
    """
    rules = EnrichRules.of(pipeline)
    valid = F.col(DEAD_LETTER_REASON).isNull()
    malformed_raw = F.when(~valid, F.col(RAW))
    columns = engagements.select(
        *_RECORD[:-1],
        F.unix_micros("event_time").alias("event_us"),
        DEAD_LETTER_REASON,
        malformed_raw.alias(RAW),
        # Dead letters spread over the buckets by their text; engagements go by user alone.
        bucket_of([F.col("user_id"), malformed_raw], rules.buckets),
    )
    if engagements.isStreaming:
        # The watermark column the processor sees (all nulls, see `operator_watermark`).
        columns = columns.select("*", *operator_watermark(engagements, "event_time"))
        rows = columns.groupBy(BUCKET).applyInPandasWithState(
            stream_function(StreamEnricher(rules)),
            _PROCESSOR_OUTPUT,
            STATE_SCHEMA,
            "append",
            GroupStateTimeout.EventTimeTimeout,
        )
    else:
        once = columns.where(valid).dropDuplicates(["event_id"]).unionByName(columns.where(~valid))
        rows = once.groupBy(BUCKET).applyInPandas(batch_function(BatchEnricher(rules)), _PROCESSOR_OUTPUT)
    event_time = F.timestamp_micros("event_us")
    window_end = F.timestamp_micros("window_end_us")
    return _conform(
        rows.select(
            OUTPUT,
            "campaign_id",
            "user_id",
            "event_id",
            F.when(F.col(OUTPUT) != DEAD_LETTER_ROUTE, event_time).alias("event_time"),
            "event_type",
            (window_end - F.make_dt_interval(secs=F.lit(pipeline.recent_window_seconds))).alias(
                "window_start"
            ),
            window_end.alias("window_end"),
            "distinct_campaigns",
            DEAD_LETTER_REASON,
            RAW,
            F.to_date(event_time).alias(EVENT_DATE),
        )
    )


# --- the bucket computation (pandas and numpy, shared by the stream and the batch) ---------------

# An engagement as the processor keeps it, and whether its window is still to be reported.
_RECORD = ("user_id", "event_id", "campaign_id", "event_type", "event_us")
_PENDING = "_pending"
_OUTPUT_COLUMNS = [column.split(" ")[0] for column in _PROCESSOR_OUTPUT.split(", ")]


@dataclass(frozen=True)
class EnrichRules:
    """What the pandas functions need, in microseconds (picklable, small)."""

    window_us: int
    slide_us: int
    buckets: int

    @classmethod
    def of(cls, pipeline: CampaignUniquesPipeline) -> EnrichRules:
        return cls(
            window_us=pipeline.recent_window_seconds * _MICROS,
            slide_us=pipeline.recent_slide_seconds * _MICROS,
            buckets=pipeline.state_buckets,
        )


def window_end_us(event_us: np.ndarray, slide_us: int) -> np.ndarray:
    """The end of the sliding window an event is reported in: the first slide boundary after it."""
    return (event_us // slide_us + 1) * slide_us


def distinct_campaigns(
    history: pd.DataFrame, users: np.ndarray, ends: np.ndarray, window_us: int
) -> np.ndarray:
    """For each (user, window end), the distinct campaigns of the user's `history` engagements in
    `[end - window_us, end)`: a range join of the ends over the histories, then distinct pairs."""
    user_codes, _ = pd.factorize(np.concatenate([history["user_id"].to_numpy(), users]))
    campaign_codes, _ = pd.factorize(history["campaign_id"])
    rows, queries = range_pairs(
        user_codes[: len(history)],
        history["event_us"].to_numpy(dtype=np.int64),
        user_codes[len(history) :],
        ends - window_us,
        ends,
        include_high=False,
    )
    stride = len(campaign_codes) + 1
    distinct = np.unique(queries * stride + campaign_codes[rows])
    return np.bincount(distinct // stride, minlength=len(ends))


def _output(output: str, records: pd.DataFrame, **columns: Any) -> pd.DataFrame:
    """Processor output rows: the records' columns, then `columns` (arrays), the others null."""
    values = {name: records[name].to_numpy() for name in _RECORD}
    nothing = dict.fromkeys(_OUTPUT_COLUMNS)
    frame = pd.DataFrame({**nothing, **values, **columns, OUTPUT: output}, index=pd.RangeIndex(len(records)))
    return frame[_OUTPUT_COLUMNS]


def enrich_bucket(
    kept: pd.DataFrame, arrived: pd.DataFrame, rules: EnrichRules, watermark_us: int | None
) -> tuple[list[pd.DataFrame], pd.DataFrame]:
    """One bucket's call: accept, dedup or mark late the arrived engagements, report the windows the
    watermark has closed (all of them when None, in batch). Returns (output frames, kept)."""
    output = []
    pending = kept[kept[_PENDING].to_numpy(bool)]
    known = pd.MultiIndex.from_frame(pending[["user_id", "event_id"]])
    arrived = arrived[~pd.MultiIndex.from_frame(arrived[["user_id", "event_id"]]).isin(known)]
    if watermark_us is not None:
        late = arrived["event_us"].to_numpy() <= watermark_us
        if late.any():
            output.append(_output(LATE, arrived[late]))
        arrived = arrived[~late]
    arrived = arrived.drop_duplicates(["user_id", "event_id"]).assign(**{_PENDING: True})
    kept = pd.concat([kept, arrived], ignore_index=True)
    ends = window_end_us(kept["event_us"].to_numpy(dtype=np.int64), rules.slide_us)
    is_pending = kept[_PENDING].to_numpy(bool)
    closing = is_pending if watermark_us is None else is_pending & (ends <= watermark_us)
    if closing.any():
        closed = kept[closing]
        closed_ends = ends[closing]
        window_of, windows = pd.factorize(pd.MultiIndex.from_arrays([closed["user_id"], closed_ends]))
        counts = distinct_campaigns(
            kept,
            windows.get_level_values(0).to_numpy(),
            windows.get_level_values(1).to_numpy(dtype=np.int64),
            rules.window_us,
        )
        output.append(
            _output(ENRICHED, closed, window_end_us=closed_ends, distinct_campaigns=counts[window_of])
        )
    if watermark_us is None:
        return output, kept.iloc[0:0]
    # Windows still to be reported end after the watermark, so they start after watermark - window.
    still = is_pending & ~closing
    keep = still | (kept["event_us"].to_numpy() > watermark_us - rules.window_us)
    return output, kept[keep].assign(**{_PENDING: still[keep]})


_KEPT_TYPES = {"event_us": "int64", _PENDING: "bool"}


def _no_kept() -> pd.DataFrame:
    return pd.DataFrame(
        {name: pd.Series(dtype=_KEPT_TYPES.get(name, object)) for name in (*_RECORD, _PENDING)}
    )


def _no_output() -> pd.DataFrame:
    return pd.DataFrame({name: pd.Series(dtype=object) for name in _OUTPUT_COLUMNS})


def _split_input(rows: pd.DataFrame) -> tuple[pd.DataFrame, list[pd.DataFrame]]:
    """(valid engagements as records, dead-letter output frames) of one bucket's input."""
    bad = rows[DEAD_LETTER_REASON].notna().to_numpy()
    dead = []
    if bad.any():
        malformed = rows[bad]
        # As a dead letter: reason, raw and (for its date) the event time when it parsed.
        dead = [
            _output(
                DEAD_LETTER_ROUTE,
                malformed,
                **dict.fromkeys(_RECORD[:-1]),
                dead_letter_reason=malformed[DEAD_LETTER_REASON].to_numpy(),
                raw=malformed[RAW].to_numpy(),
            )
        ]
    return rows.loc[~bad, list(_RECORD)].astype({"event_us": "int64"}), dead


class BatchEnricher:
    """`applyInPandas` function: a whole bucket at rest, every window reported."""

    def __init__(self, rules: EnrichRules) -> None:
        self.rules = rules

    def __call__(self, rows: pd.DataFrame) -> pd.DataFrame:
        arrived, dead = _split_input(rows)
        frames, _ = enrich_bucket(_no_kept(), arrived, self.rules, None)
        return pd.concat(dead + frames, ignore_index=True) if dead or frames else _no_output()


class StreamEnricher:
    """`applyInPandasWithState` function: one bucket's new engagements and kept ones per batch."""

    def __init__(self, rules: EnrichRules) -> None:
        self.rules = rules
        self.layout = state_layout(rules.buckets)

    def __call__(
        self, _key: tuple[Any, ...], frames: Iterator[pd.DataFrame], state: GroupState
    ) -> Iterator[pd.DataFrame]:
        watermark_us = state.getCurrentWatermarkMs() * 1000
        rows = concat_frames(frames)
        arrived = _no_kept()[list(_RECORD)]
        if rows is not None:
            arrived, dead = _split_input(rows)
            yield from dead
        kept = read_state(state, "campaign_uniques", self.layout)
        output, kept = enrich_bucket(_no_kept() if kept is None else kept, arrived, self.rules, watermark_us)
        yield from output
        write_state(state, kept, self.layout, lambda: self._wake_ms(kept))

    def _wake_ms(self, kept: pd.DataFrame) -> int:
        """The next pending window end, or else when the newest engagement leaves every window."""
        pending = kept[_PENDING].to_numpy(bool)
        event_us = kept["event_us"].to_numpy(dtype=np.int64)
        wake_us = (
            int(window_end_us(event_us[pending], self.rules.slide_us).min())
            if pending.any()
            else int(event_us.max()) + self.rules.window_us
        )
        return timeout_reaching(wake_us)
