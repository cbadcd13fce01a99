"""Sessionizer transforms: events of several sources -> closed sessions per key, late events, dead letters.

Semantics (the same in the stream and in batch):

* A session is a run of one key's events (`key_fields`, default `user_id`) over the union of all
  sources, in order of (event time, event id). The next event starts a new session when it comes
  `gap` or more after the previous event (exactly `gap` apart is a new session, as with Spark's
  `session_window`, whose session is [start, last + gap)), or when it comes `max_session` or more
  after the session's first event, so a bot cannot keep one session open forever.
* A session ends at `session_end = min(last event + gap, session_start + max_session)` and is
  `closed_by` "max_duration" when the cap decides that end, "gap" otherwise. Both are functions of
  the session's own events, so a session can be emitted as soon as it is final, and its row never
  depends on events after it.
* Events with the same event id (per key) count once: the first in (event time, event id) order.
* Output, one Parquet sink partitioned by `output` and `event_date`: `output=sessions` (key,
  `session_start`, `session_end`, `last_event_time`, `event_count`, sorted distinct `event_types`,
  `closed_by`), `output=late` (one row per event at or behind the watermark, with its fields and
  source), `output=dead_letter` (malformed lines with `dead_letter_reason` and `raw`). Nothing is
  dropped silently except duplicates.

Streaming. The watermark is max event time - `allowed_lateness` (`union`: one watermark on the
union of the sources, so a source that goes idle holds nothing back, and a source lagging by more
than the lateness sees its events in `late`, never lost) or one per source combined by Spark's
default `multipleWatermarkPolicy=min` (`slowest_source`: a lagging source is never late, but an idle
source stops every session from closing; Spark has no idleness timeout). `union` is the default:
on product event streams a stalled app pipeline must not stop web sessions from closing. The
policy is a transform choice, not a session conf, because that conf is frozen in the checkpoint.

An event is late when its time is at or behind the watermark of its micro-batch (Spark's own
rule). A session is emitted once the watermark of the batches after it passes its `session_end`:
no on-time event can change it any more, since any later event starts a new session. That
watermark is set at the end of the batch, from its newest event; a bucket emits at once what its
own newest events already put behind it (`SessionRules.next_watermark_us`), so a batch that covers
hours (a backfill's) does not carry them all in state to the next. Until then a session's events
stay in state, because an out-of-order event may still bridge two pending sessions or move a cap
boundary.

State: `applyInPandasWithState` with `EventTimeTimeout`, over RocksDB with checkpoint format 1 or
2. Picked over `transformWithStateInPandas` because its state travels with the Arrow batches (no
state-server round trip per key), its event-time timeouts fire in the no-data batches that
available-now runs, and its state schema is checked by Spark on restart. Late events reach the
function (and go to `late`) through the null operator watermark of `jobs.bucketed_state`.

Performance: keys are hashed into `state_buckets` groups and each group is one pandas call that
sessionizes all its keys at once with numpy (sort, diff, cumsum); only a run of events longer than
`max_session` is walked in Python (`jobs.bucketed_state` says why buckets and not keys). The
state row of a bucket holds the pending (not yet final) events of its keys, so state is bounded by
the events of the last gap + lateness, not by the number of keys ever seen.

Batch (backfill, parity): the same sessionizing function over each bucket with no watermark: every
event is on time and every session is closed at the end of the input, so a stream whose watermark
has passed everything gives the same session rows.

Operations: `gap_minutes`, `max_session_minutes` and `allowed_lateness_minutes` change results but
not the state schema (a deliberately wrong value is fixed by a rewind). `key_fields` is part of the
state key schema (through typed null grouping columns): adding or retyping a key field makes Spark
refuse the old checkpoint with STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE. A same-typed rename, or a
new `state_buckets`, is caught by the function itself (the state records both), which fails
naming the old and new values.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
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
    FileSource,
    SessionizerPipeline,
)

OUTPUT = "output"
SESSIONS = "sessions"
LATE = "late"
CLOSED_BY_GAP = "gap"
CLOSED_BY_CAP = "max_duration"

EVENT_ID = "event_id"
EVENT_TIME = "event_time"
EVENT_TYPE = "event_type"
SOURCE = "source"
_WATERMARK = "_wm"
_TIME_US = "_event_time_us"
_MINUTE_US = 60_000_000


@dataclass(frozen=True)
class SessionRules:
    """The session parameters the pandas functions need, in microseconds (picklable, small)."""

    key_fields: tuple[str, ...]
    gap_us: int
    cap_us: int
    buckets: int
    # The watermark's delay, and the sources it is the slowest of (none: one over the union).
    lateness_ms: int
    slowest_of: tuple[str, ...]

    @classmethod
    def of(cls, pipeline: SessionizerPipeline) -> SessionRules:
        return cls(
            key_fields=pipeline.key_fields,
            gap_us=round(pipeline.gap_minutes * _MINUTE_US),
            cap_us=round(pipeline.max_session_minutes * _MINUTE_US),
            buckets=pipeline.state_buckets,
            lateness_ms=lateness_ms(pipeline),
            slowest_of=tuple(pipeline.sources) if pipeline.watermark == "slowest_source" else (),
        )

    def next_watermark_us(self, arrived: pd.DataFrame) -> int:
        """A floor of the watermark the next micro-batch gets, from one bucket's on-time events of
        this one (0 when they cannot tell).

        Spark sets it at the batch's end to the newest event time of the batch (in whole
        milliseconds) minus the lateness, the newest over the union or the slowest source's, and
        never lowers it; the newest of a bucket's own events can only be older than the batch's, and
        a source without events in the bucket leaves the slowest one unknown.
        """
        if arrived.empty:
            return 0
        if self.slowest_of:
            newest_each = arrived.groupby(SOURCE)[_TIME_US].max()
            if len(newest_each) < len(self.slowest_of):
                return 0
            newest = int(newest_each.min())
        else:
            newest = int(arrived[_TIME_US].max())
        return (newest // 1000 - self.lateness_ms) * 1000


def lateness_ms(pipeline: SessionizerPipeline) -> int:
    """The watermark's delay in milliseconds, as Spark is given it."""
    return round(pipeline.allowed_lateness_minutes * 60_000)


def unified_events(inputs: Mapping[str, DataFrame], pipeline: SessionizerPipeline) -> DataFrame:
    """Every source projected to the common columns and unioned, with the watermark applied.

    Columns: key fields, `event_id`, `event_time`, `event_type`, `source`, `dead_letter_reason`,
    `raw` (only on malformed rows, so the shuffle does not carry every raw line). In a stream the
    watermark is on `_wm` (event time of good rows), per source or on the union by policy.
    """
    lateness = f"{lateness_ms(pipeline)} milliseconds"
    watermark_each = (
        inputs[next(iter(pipeline.sources))].isStreaming and pipeline.watermark == "slowest_source"
    )
    projected = []
    for name, source in pipeline.sources.items():
        events = _project(inputs[name], name, source, pipeline)
        projected.append(events.withWatermark(_WATERMARK, lateness) if watermark_each else events)
    union = projected[0]
    for events in projected[1:]:
        union = union.unionByName(events)
    if union.isStreaming and pipeline.watermark == "union":
        union = union.withWatermark(_WATERMARK, lateness)
    return union


def _project(events: DataFrame, name: str, source: FileSource, pipeline: SessionizerPipeline) -> DataFrame:
    valid = F.col(DEAD_LETTER_REASON).isNull()
    event_time = F.col(source.event_time_field)
    return events.select(
        *pipeline.key_fields,
        F.col(pipeline.event_id_field).alias(EVENT_ID),
        event_time.alias(EVENT_TIME),
        F.col(pipeline.event_type_field).alias(EVENT_TYPE),
        F.lit(name).alias(SOURCE),
        DEAD_LETTER_REASON,
        F.when(~valid, F.col(RAW)).alias(RAW),
        F.when(valid, event_time).alias(_WATERMARK),
    )


def session_rows(events: DataFrame, pipeline: SessionizerPipeline) -> DataFrame:
    """Unified events -> the sink rows: sessions, late events and dead letters (see module doc)."""
    rules = SessionRules.of(pipeline)
    key_types = _key_types(events, pipeline.key_fields)
    bucketed = events.select(
        *pipeline.key_fields,
        EVENT_ID,
        F.unix_micros(EVENT_TIME).alias(_TIME_US),
        EVENT_TYPE,
        SOURCE,
        DEAD_LETTER_REASON,
        RAW,
        bucket_of([F.col(name) for name in pipeline.key_fields], rules.buckets),
        *_key_schema_columns(key_types),
        *operator_watermark(events, _WATERMARK),
    ).groupBy(BUCKET, *(f"_key_{name}" for name in key_types))
    output_schema = _output_schema(key_types)
    if events.isStreaming:
        rows = bucketed.applyInPandasWithState(
            stream_function(StreamSessionizer(rules)),
            output_schema,
            STATE_SCHEMA,
            "append",
            GroupStateTimeout.EventTimeTimeout,
        )
    else:
        rows = bucketed.applyInPandas(batch_function(BatchSessionizer(rules)), output_schema)
    return rows.select(
        OUTPUT,
        *pipeline.key_fields,
        F.timestamp_micros("session_start_us").alias("session_start"),
        F.timestamp_micros("session_end_us").alias("session_end"),
        F.timestamp_micros("last_event_us").alias("last_event_time"),
        "event_count",
        "event_types",
        "closed_by",
        EVENT_ID,
        F.timestamp_micros("event_time_us").alias(EVENT_TIME),
        EVENT_TYPE,
        SOURCE,
        DEAD_LETTER_REASON,
        RAW,
        F.to_date(F.timestamp_micros(F.coalesce("session_start_us", "event_time_us"))).alias(EVENT_DATE),
    )


def sessionize(inputs: Mapping[str, DataFrame], pipeline: SessionizerPipeline) -> DataFrame:
    """The job's transform: parsed sources -> sink rows."""
    return session_rows(unified_events(inputs, pipeline), pipeline)


def _key_types(events: DataFrame, key_fields: Sequence[str]) -> dict[str, T.DataType]:
    return {name: events.schema[name].dataType for name in key_fields}


# The output's columns after the kind of row and the key fields, with their types: a session's,
# then a single event's (late or dead letter). A kind of row leaves the others null (`_nulls`).
_OUTPUT_TAIL: dict[str, T.DataType] = {
    "session_start_us": T.LongType(),
    "session_end_us": T.LongType(),
    "last_event_us": T.LongType(),
    "event_count": T.LongType(),
    "event_types": T.ArrayType(T.StringType()),
    "closed_by": T.StringType(),
    EVENT_ID: T.StringType(),
    "event_time_us": T.LongType(),
    EVENT_TYPE: T.StringType(),
    SOURCE: T.StringType(),
    DEAD_LETTER_REASON: T.StringType(),
    RAW: T.StringType(),
}


def _output_schema(key_types: Mapping[str, T.DataType]) -> T.StructType:
    return T.StructType(
        [T.StructField(OUTPUT, T.StringType())]
        + [T.StructField(name, data_type) for name, data_type in key_types.items()]
        + [T.StructField(name, data_type) for name, data_type in _OUTPUT_TAIL.items()]
    )


def _key_schema_columns(key_types: Mapping[str, T.DataType]) -> list[Any]:
    """Null grouping columns typed like the key fields, so the state's key schema names them.

    The state is keyed by bucket; these constant columns do not split a bucket, but they make a
    change of `key_fields` (a field added or retyped) a key schema change Spark refuses on restart.
    """
    return [F.lit(None).cast(data_type).alias(f"_key_{name}") for name, data_type in key_types.items()]


# --- the pandas side -----------------------------------------------------------------------------

_PENDING = (_TIME_US, EVENT_ID, EVENT_TYPE)


def split_sessions(pending: pd.DataFrame, rules: SessionRules) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Dedupe and order one bucket's events and cut them into sessions.

    Returns (events, sessions): `events` sorted by key and time (ties in the order given) with a
    `_session` number; `sessions` one row per session (key fields, start, end, last, count,
    types, closed_by). Everything is numpy over integer codes: a string is hashed once
    (factorized), never compared in a sort.
    """
    keys = list(rules.key_fields)
    key_codes = _codes(pending, keys)
    id_codes, ids = pd.factorize(pending[EVENT_ID])
    order = np.lexsort((pending[_TIME_US].to_numpy(dtype=np.int64), key_codes))
    # The first of a key's events with one id, in (time, input) order: the state's before arrivals.
    first = ~pd.Series(key_codes[order] * (len(ids) + 1) + id_codes[order]).duplicated().to_numpy()
    order = order[first]
    events = pending.take(order).reset_index(drop=True)
    times = events[_TIME_US].to_numpy(dtype=np.int64)
    key_ids = key_codes[order]
    new_session = np.ones(len(events), dtype=bool)
    new_session[1:] = (key_ids[1:] != key_ids[:-1]) | (np.diff(times) >= rules.gap_us)
    run = np.cumsum(new_session) - 1
    run_first = times[new_session][run]
    # Only a run of events spanning the cap needs the sequential walk; there are few (bots).
    for run_id in np.unique(run[times - run_first >= rules.cap_us]):
        (positions,) = np.nonzero(run == run_id)
        start = times[positions[0]]
        for position in positions[1:]:
            if times[position] >= start + rules.cap_us:
                new_session[position] = True
                start = times[position]
    session = np.cumsum(new_session) - 1
    events["_session"] = session
    starts = np.flatnonzero(new_session)
    ends = np.append(starts[1:], len(events)) - 1
    first_time, last_time = times[starts], times[ends]
    cap_end = first_time + rules.cap_us
    gap_end = last_time + rules.gap_us
    sessions = events.loc[starts, keys].reset_index(drop=True)
    sessions["session_start_us"] = first_time
    sessions["session_end_us"] = np.minimum(cap_end, gap_end)
    sessions["last_event_us"] = last_time
    sessions["event_count"] = ends - starts + 1
    sessions["event_types"] = _sorted_distinct(events[EVENT_TYPE], session, len(starts))
    sessions["closed_by"] = np.where(cap_end <= gap_end, CLOSED_BY_CAP, CLOSED_BY_GAP)
    return events, sessions


def _codes(frame: pd.DataFrame, columns: list[str]) -> np.ndarray:
    """An integer per distinct combination of `columns` (nulls included as a value)."""
    if len(columns) == 1:
        codes = pd.factorize(frame[columns[0]], use_na_sentinel=False)[0]
    else:
        codes = frame.groupby(columns, sort=False, dropna=False).ngroup().to_numpy()
    return np.asarray(codes, dtype=np.int64)


def _sorted_distinct(values: pd.Series, group: np.ndarray, groups: int) -> list[list[str]]:
    """Per group (0 .. groups-1, `group` non-decreasing), its distinct non-null values in order."""
    codes, names = pd.factorize(values, sort=True)
    present = codes >= 0
    width = max(len(names), 1)
    pairs = np.unique(group[present] * width + codes[present])
    pair_names = np.asarray(names, dtype=object)[pairs % width]
    bounds = np.searchsorted(pairs // width, np.arange(groups + 1))
    return [pair_names[low:high].tolist() for low, high in zip(bounds[:-1], bounds[1:], strict=True)]


def _output_frame(rows: pd.DataFrame, output: str, key_fields: Sequence[str]) -> pd.DataFrame:
    """Rows in the operator's output layout, the columns this kind of row lacks null (`_nulls`)."""
    columns = [OUTPUT, *key_fields, *_OUTPUT_TAIL]
    frame = rows.rename(columns={_TIME_US: "event_time_us"})
    return pd.DataFrame(
        {name: frame[name] if name in frame.columns else _nulls(name, len(frame)) for name in columns},
        index=frame.index,
    ).assign(**{OUTPUT: output})


def _nulls(name: str, rows: int) -> Any:
    """An absent output column: pandas' nullable integers or strings, not objects.

    PySpark's worker concatenates the frames a partition's state function yields, and wherever their
    layouts differ (a late frame among sessions) pandas checks each value of an all-null object
    column in Python; a nullable array is checked at once. That was 2 of the 26 CPU seconds of the
    Python workers in a 30-hour backfill of the sessionizer (py-spy). Any other column (the list
    `event_types`, or the kind and key columns, which only a frame with no rows lacks): None, never
    NaN, which is no valid Arrow list or string.
    """
    data_type = _OUTPUT_TAIL.get(name)
    if isinstance(data_type, T.LongType):
        return pd.arrays.IntegerArray(np.zeros(rows, dtype=np.int64), np.ones(rows, dtype=bool))
    if isinstance(data_type, T.StringType):
        return pd.array(np.full(rows, None, dtype=object), dtype=pd.StringDtype("python"))
    return None


def sessionize_bucket(
    pending: pd.DataFrame, rules: SessionRules, watermark_us: int | None
) -> tuple[list[pd.DataFrame], pd.DataFrame, int]:
    """Close every session of a bucket whose end is behind the watermark (all of them if None).

    Returns (output frames, events still pending, the earliest end of a session still pending;
    the end is meaningless when no event is pending).
    """
    if pending.empty:
        return [], pending, 0
    events, sessions = split_sessions(pending, rules)
    if watermark_us is None:
        return [_output_frame(sessions, SESSIONS, rules.key_fields)], events.iloc[0:0], 0
    ends = sessions["session_end_us"].to_numpy()
    final = ends < watermark_us
    still_pending = events[~final[events["_session"].to_numpy()]]
    closed = [_output_frame(sessions[final], SESSIONS, rules.key_fields)] if final.any() else []
    return closed, still_pending, int(ends[~final].min(initial=np.iinfo(np.int64).max))


def _split_input(
    frames: Iterator[pd.DataFrame], rules: SessionRules
) -> tuple[pd.DataFrame, list[pd.DataFrame]]:
    """(valid events, dead-letter output frames) of one bucket's input."""
    rows = concat_frames(frames)
    if rows is None:
        return pd.DataFrame(columns=[*rules.key_fields, *_PENDING]), []
    bad = rows[DEAD_LETTER_REASON].notna()
    dead = [_output_frame(rows[bad], DEAD_LETTER_ROUTE, rules.key_fields)] if bad.any() else []
    return rows[~bad], dead


class BatchSessionizer:
    """`applyInPandas` function: a whole bucket at rest, every session closed at the end."""

    def __init__(self, rules: SessionRules) -> None:
        self.rules = rules

    def __call__(self, rows: pd.DataFrame) -> pd.DataFrame:
        valid, dead = _split_input(iter([rows]), self.rules)
        closed, _, _ = sessionize_bucket(valid[[*self.rules.key_fields, *_PENDING]], self.rules, None)
        frames = dead + closed
        if not frames:
            return _output_frame(pd.DataFrame(), SESSIONS, self.rules.key_fields).iloc[0:0]
        if len(frames) == 1:
            return frames[0]
        # As objects: a column all null in one frame (a dead letter's session fields) would make
        # pandas guess the result's dtype, a guess it deprecates; Arrow types it by the schema.
        return pd.concat([frame.astype(object) for frame in frames], ignore_index=True)


class StreamSessionizer:
    """`applyInPandasWithState` function: one bucket's new rows and pending events per batch."""

    def __init__(self, rules: SessionRules) -> None:
        self.rules = rules
        self.layout = state_layout(rules.buckets, rules.key_fields)
        self.columns = [*rules.key_fields, *_PENDING]

    def __call__(
        self, _key: tuple[Any, ...], frames: Iterator[pd.DataFrame], state: GroupState
    ) -> Iterator[pd.DataFrame]:
        rules = self.rules
        watermark_us = state.getCurrentWatermarkMs() * 1000
        valid, dead = _split_input(frames, rules)
        yield from dead
        late = valid[_TIME_US].to_numpy() <= watermark_us
        if late.any():
            yield _output_frame(valid[late], LATE, rules.key_fields)
        on_time = valid[~late]
        arrived = on_time[self.columns]
        kept = read_state(state, "sessionizer", self.layout)
        pending = arrived if kept is None else kept if arrived.empty else pd.concat([kept, arrived])
        # A session is final once its end is behind the watermark of the batches after this one:
        # an on-time event after it comes after its end, and starts a new session.
        final_before = max(watermark_us, rules.next_watermark_us(on_time))
        closed, still_pending, first_end = sessionize_bucket(pending, rules, final_before)
        yield from closed
        # Woken when the first pending session is final: once the watermark is past its end.
        write_state(state, still_pending[self.columns], self.layout, lambda: timeout_reaching(first_end + 1))
