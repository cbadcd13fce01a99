"""Impressions-plays transforms: which title impressions led to a play within the hour (co-process join).

Design: ONE streaming query, ONE Parquet file sink partitioned by `outcome`, `event_date`,
`event_hour` (of the impression's event time for conversions and unconverted impressions; of the
event's own time for late events, and of the line's event time, when it parsed, for dead letters):

* `outcome=conversion`: one row per (impression, play) pair with the same `profile_id` and
  `title_id` and `impression_time <= play_time <= impression_time + window` (window =
  `conversion_window_seconds`, 1 hour; BOTH ends inclusive: a play at the impression's instant or
  exactly one hour later converts, one microsecond outside does not). Emitted in the micro-batch
  in which the second of the two events arrives.
* `outcome=unconverted`: an impression no play matched, play columns null. Emitted once the
  watermark reaches `impression_time + window`: from then on any play that could match is late.
  Until then the impression waits in state.
* `outcome=late`: an event (either source, `source` names it) at or behind the watermark of the
  micro-batch it arrives in, with its own columns. It joins nothing: a late play's impressions may
  already have been written as unconverted, a late impression's plays forgotten. Nothing is
  dropped silently except resent duplicates.
* `outcome=dead_letter`: malformed lines of either source with `source`, `dead_letter_reason` and
  `raw`, written at once.

Plays that match no impression are not written (the question is which impressions convert).

Semantics worth knowing (each is tested in tests/jobs/test_impressions_plays.py):

* A play matching several impressions converts each of them: one conversion row per pair. An
  impression followed by several plays within the window gives one conversion row per play, and
  no unconverted row. So count conversions as `count(distinct impression_id)`, not rows.
* Duplicates: a line resent with the same `impression_id` (or `play_id`) while the first copy is
  in state is dropped; the first copy read wins (resends are identical copies, so which one does
  not matter). An impression stays in state until the watermark reaches its time + window, a play
  until the watermark reaches its time, so a resend arriving after that is late and goes to `late`.
* Out-of-order events within the lateness are joined exactly as if they had arrived in order:
  either side may arrive first, the other waits in state.
* Watermark: each source's trails its newest event time by `allowed_lateness_seconds`, and the
  query's is the slower of the two (Spark's default `multipleWatermarkPolicy=min`): a lagging
  source is never late, but while one source is idle, impressions stay in state and no
  unconverted row is written.

Why not Spark's stream-stream join: the join is the pattern Netflix implements as a keyed
co-process function, and Spark's symmetric hash join is the slow way to do it here: it scans a
key's whole value list in RocksDB per input row (6 state stores per shuffle partition with the
deduplication), and Spark offers no side output for the rows its watermark drops. This job is a
co-process function instead: both sources unioned, keys hashed into `state_buckets` buckets, one
pandas call per bucket and micro-batch (`jobs.bucketed_state`) that deduplicates, joins the new
events against the bucket's pending ones (`within_window`: a range join by binary search, not a
merge per key, whose candidate pairs grow with the square of a key's events), expires what the
watermark has passed, and keeps the rest as the bucket's state. Measured against PyFlink's
interval join in benchmarks/RESULTS.md, before (Spark's join) and after.

State: a bucket's pending impressions (with whether they converted) and plays, bounded by the
event-time span of window + lateness, not by the length of the stream. `state_buckets` is fixed by
the checkpoint: the function refuses state written for another bucket count.

Batch (backfill, parity): the same join per bucket with no watermark: every event is on time and
every impression is closed at the end of the input, so a stream whose watermark has passed
everything gives the same rows.
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
from ops.spec.pipelines import (
    DEAD_LETTER_REASON,
    DEAD_LETTER_ROUTE,
    EVENT_DATE,
    EVENT_HOUR,
    FileSource,
    ImpressionsPlaysPipeline,
)

OUTCOME = "outcome"
CONVERSION = "conversion"
UNCONVERTED = "unconverted"
LATE = "late"
SOURCE = "source"
IMPRESSIONS = "impressions"
PLAYS = "plays"
IMPRESSION_TIME = "impression_time"
PLAY_TIME = "play_time"
OUTPUT_SCHEMA = (
    "outcome string, impression_id string, profile_id string, title_id string, "
    "impression_time timestamp, play_id string, play_time timestamp, source string, "
    "dead_letter_reason string, raw string, event_date date, event_hour int"
)
KEY = ("profile_id", "title_id")
# Each source's id field (its first join field).
ID_FIELDS = {IMPRESSIONS: "impression_id", PLAYS: "play_id"}

_EVENT_ID = "_event_id"
_TIME_US = "_time_us"
_CONVERTED = "_converted"
_WATERMARK = "_wm"
# The operator's output: times in microseconds, turned into timestamps and partitions after it.
_OPERATOR_COLUMNS = (
    OUTCOME,
    "impression_id",
    *KEY,
    "impression_time_us",
    "play_id",
    "play_time_us",
    SOURCE,
    DEAD_LETTER_REASON,
    RAW,
    "event_time_us",
)
_OPERATOR_SCHEMA = T.StructType(
    [
        T.StructField(name, T.LongType() if name.endswith("_us") else T.StringType())
        for name in _OPERATOR_COLUMNS
    ]
)
# A bucket's pending events: either source's, `_converted` only meaningful for impressions.
_PENDING = (SOURCE, _EVENT_ID, *KEY, _TIME_US, _CONVERTED)


@dataclass(frozen=True)
class JoinRules:
    """What the pandas functions need, in microseconds (picklable, small)."""

    window_us: int
    buckets: int

    @classmethod
    def of(cls, pipeline: ImpressionsPlaysPipeline) -> JoinRules:
        return cls(window_us=pipeline.conversion_window_seconds * 1_000_000, buckets=pipeline.state_buckets)


def impressions_plays(
    impressions: DataFrame, plays: DataFrame, pipeline: ImpressionsPlaysPipeline
) -> DataFrame:
    """Both parsed sources -> conversions, unconverted impressions, late events and dead letters."""
    lateness = f"{pipeline.allowed_lateness_seconds} seconds"
    events = None
    for name, parsed in ((IMPRESSIONS, impressions), (PLAYS, plays)):
        projected = _project(parsed, name, pipeline.inputs[name])
        if projected.isStreaming:
            projected = projected.withWatermark(_WATERMARK, lateness)
        events = projected if events is None else events.unionByName(projected)
    assert events is not None
    rules = JoinRules.of(pipeline)
    # Dead letters (raw set) spread over the buckets by their text; valid rows go by key alone.
    bucketed = events.select(
        *(column for column in events.columns if column != _WATERMARK),
        bucket_of([F.col(KEY[0]), F.col(KEY[1]), F.col(RAW)], rules.buckets),
        *operator_watermark(events, _WATERMARK),
    ).groupBy(BUCKET)
    if events.isStreaming:
        rows = bucketed.applyInPandasWithState(
            stream_function(StreamJoin(rules)),
            _OPERATOR_SCHEMA,
            STATE_SCHEMA,
            "append",
            GroupStateTimeout.EventTimeTimeout,
        )
    else:
        rows = bucketed.applyInPandas(batch_function(BatchJoin(rules)), _OPERATOR_SCHEMA)
    event_time = F.timestamp_micros("event_time_us")
    return rows.select(
        OUTCOME,
        "impression_id",
        *KEY,
        F.timestamp_micros("impression_time_us").alias(IMPRESSION_TIME),
        "play_id",
        F.timestamp_micros("play_time_us").alias(PLAY_TIME),
        SOURCE,
        DEAD_LETTER_REASON,
        RAW,
        F.to_date(event_time).alias(EVENT_DATE),
        F.hour(event_time).alias(EVENT_HOUR),
    )


def _project(parsed: DataFrame, name: str, source: FileSource) -> DataFrame:
    """One source's rows in the operator's input columns; `raw` only on malformed rows."""
    valid = F.col(DEAD_LETTER_REASON).isNull()
    event_time = F.col(source.event_time_field)
    return parsed.select(
        F.lit(name).alias(SOURCE),
        F.col(ID_FIELDS[name]).alias(_EVENT_ID),
        *KEY,
        F.unix_micros(event_time).alias(_TIME_US),
        DEAD_LETTER_REASON,
        F.when(~valid, F.col(RAW)).alias(RAW),
        F.when(valid, event_time).alias(_WATERMARK),
    )


# --- the pandas side -----------------------------------------------------------------------------


def _rows(outcome: str, length: int, **columns: Any) -> pd.DataFrame:
    """Operator output rows: `columns` given as arrays of `length` values, the others null."""
    values = {name: columns.get(name) for name in _OPERATOR_COLUMNS}
    return pd.DataFrame({**values, OUTCOME: outcome}, index=pd.RangeIndex(length))


def _late_rows(events: pd.DataFrame) -> pd.DataFrame:
    """Late events in the output layout: their side's id and time columns, `source` naming it."""
    is_impression = events[SOURCE].to_numpy() == IMPRESSIONS
    event_id, time_us = events[_EVENT_ID].to_numpy(), events[_TIME_US].to_numpy()
    return _rows(
        LATE,
        len(events),
        impression_id=np.where(is_impression, event_id, None),
        profile_id=events[KEY[0]].to_numpy(),
        title_id=events[KEY[1]].to_numpy(),
        # NaN is null to Arrow.
        impression_time_us=np.where(is_impression, time_us, np.nan),
        play_id=np.where(is_impression, None, event_id),
        play_time_us=np.where(is_impression, np.nan, time_us),
        source=events[SOURCE].to_numpy(),
        event_time_us=time_us,
    )


def _dead_letter_rows(rows: pd.DataFrame) -> pd.DataFrame:
    return _rows(
        DEAD_LETTER_ROUTE,
        len(rows),
        source=rows[SOURCE].to_numpy(),
        dead_letter_reason=rows[DEAD_LETTER_REASON].to_numpy(),
        raw=rows[RAW].to_numpy(),
        event_time_us=rows[_TIME_US].to_numpy(),
    )


def _split_input(rows: pd.DataFrame) -> tuple[pd.DataFrame, list[pd.DataFrame]]:
    """(valid events in the pending layout, dead-letter output frames) of one bucket's input."""
    bad = rows[DEAD_LETTER_REASON].notna().to_numpy()
    dead = [_dead_letter_rows(rows[bad])] if bad.any() else []
    valid = rows.loc[~bad, list(_PENDING[:-1])].assign(**{_CONVERTED: False})
    return valid.astype(_PENDING_TYPES), dead


def join_bucket(
    pending: pd.DataFrame, arrived: pd.DataFrame, rules: JoinRules, watermark_us: int | None
) -> tuple[list[pd.DataFrame], pd.DataFrame]:
    """Join a bucket's arrived events with its pending ones; expire what the watermark has passed.

    `arrived` holds on-time events only (the caller sends late ones to `late`). With no watermark
    (batch) every impression expires at the end. Returns (output frames, events still pending).
    """
    known = pd.MultiIndex.from_frame(pending[[SOURCE, _EVENT_ID]])
    arrived = arrived.drop_duplicates([SOURCE, _EVENT_ID])
    arrived = arrived[~pd.MultiIndex.from_frame(arrived[[SOURCE, _EVENT_ID]]).isin(known)]
    events = pd.concat([pending.assign(_new=False), arrived.assign(_new=True)], ignore_index=True)
    is_impression = events[SOURCE].to_numpy() == IMPRESSIONS
    impressions, plays = events[is_impression], events[~is_impression]
    output = []
    if not arrived.empty and not impressions.empty and not plays.empty:
        shown_at, played_at = within_window(events, is_impression, rules.window_us)
        # A pair of two pending events was written when the second of them arrived.
        new = events["_new"].to_numpy()
        fresh = new[shown_at] | new[played_at]
        shown_at, played_at = shown_at[fresh], played_at[fresh]
        if len(shown_at):
            column = {name: events[name].to_numpy() for name in (_EVENT_ID, *KEY, _TIME_US)}
            output.append(
                _rows(
                    CONVERSION,
                    len(shown_at),
                    impression_id=column[_EVENT_ID][shown_at],
                    profile_id=column[KEY[0]][shown_at],
                    title_id=column[KEY[1]][shown_at],
                    impression_time_us=column[_TIME_US][shown_at],
                    play_id=column[_EVENT_ID][played_at],
                    play_time_us=column[_TIME_US][played_at],
                    event_time_us=column[_TIME_US][shown_at],
                )
            )
            converted = np.zeros(len(events), dtype=bool)
            converted[shown_at] = True
            impressions = impressions.assign(
                **{_CONVERTED: impressions[_CONVERTED].to_numpy(bool) | converted[is_impression]}
            )
    shown = impressions[_TIME_US].to_numpy()
    if watermark_us is None:
        expired = np.ones(len(impressions), dtype=bool)
        kept_plays = plays.iloc[0:0]
    else:
        expired = shown + rules.window_us <= watermark_us
        kept_plays = plays[plays[_TIME_US].to_numpy() > watermark_us]
    unconverted = impressions[expired & ~impressions[_CONVERTED].to_numpy(bool)]
    if not unconverted.empty:
        output.append(
            _rows(
                UNCONVERTED,
                len(unconverted),
                impression_id=unconverted[_EVENT_ID].to_numpy(),
                profile_id=unconverted[KEY[0]].to_numpy(),
                title_id=unconverted[KEY[1]].to_numpy(),
                impression_time_us=unconverted[_TIME_US].to_numpy(),
                event_time_us=unconverted[_TIME_US].to_numpy(),
            )
        )
    still_pending = pd.concat([impressions[~expired], kept_plays], ignore_index=True)
    return output, still_pending[list(_PENDING)]


_PENDING_TYPES = {_TIME_US: "int64", _CONVERTED: "bool"}


def within_window(
    events: pd.DataFrame, is_impression: np.ndarray, window_us: int
) -> tuple[np.ndarray, np.ndarray]:
    """Every (impression, play) pair of `events` with the same key and the play at most `window_us`
    after the impression (both ends inclusive), as two arrays of row positions in `events`."""
    key = events.groupby(list(KEY), sort=False).ngroup().to_numpy()
    time_us = events[_TIME_US].to_numpy(dtype=np.int64)
    shown, played = np.flatnonzero(is_impression), np.flatnonzero(~is_impression)
    rows, queries = range_pairs(
        key[shown],
        time_us[shown],
        key[played],
        time_us[played] - window_us,
        time_us[played],
        include_high=True,
    )
    return shown[rows], played[queries]


def _no_pending() -> pd.DataFrame:
    return pd.DataFrame({column: pd.Series(dtype=_PENDING_TYPES.get(column, object)) for column in _PENDING})


class BatchJoin:
    """`applyInPandas` function: a whole bucket at rest, every impression closed at the end."""

    def __init__(self, rules: JoinRules) -> None:
        self.rules = rules

    def __call__(self, rows: pd.DataFrame) -> pd.DataFrame:
        valid, dead = _split_input(rows)
        joined, _ = join_bucket(_no_pending(), valid, self.rules, None)
        frames = dead + joined
        return pd.concat(frames, ignore_index=True) if frames else _rows(CONVERSION, 0)


class StreamJoin:
    """`applyInPandasWithState` function: one bucket's new rows and pending events per batch."""

    def __init__(self, rules: JoinRules) -> None:
        self.rules = rules
        self.layout = state_layout(rules.buckets)

    def __call__(
        self, _key: tuple[Any, ...], frames: Iterator[pd.DataFrame], state: GroupState
    ) -> Iterator[pd.DataFrame]:
        watermark_us = state.getCurrentWatermarkMs() * 1000
        rows = concat_frames(frames)
        arrived = _no_pending()
        if rows is not None:
            valid, dead = _split_input(rows)
            yield from dead
            late = valid[_TIME_US].to_numpy() <= watermark_us
            if late.any():
                yield _late_rows(valid[late])
            arrived = valid[~late]
        pending = read_state(state, "impressions_plays", self.layout)
        joined, still_pending = join_bucket(
            _no_pending() if pending is None else pending, arrived, self.rules, watermark_us
        )
        yield from joined
        write_state(state, still_pending, self.layout, lambda: self._wake_ms(still_pending))

    def _wake_ms(self, pending: pd.DataFrame) -> int:
        """The next moment anything changes: an impression's window ends, or a play can be forgotten."""
        deadlines = pending[_TIME_US].to_numpy() + np.where(
            pending[SOURCE].to_numpy() == IMPRESSIONS, self.rules.window_us, 0
        )
        return timeout_reaching(int(deadlines.min()))
