"""Device health transforms: telemetry -> diagnoses, recoveries, stale and late readings, dead letters.

The pattern (Comcast's device health): every device reports readings of a few data points
(`signal_db`, `temperature`, `error_rate`, ...). Each data point has a declarative rule in the job
file (`red_when: "value < -10"`, or `red_below`/`red_above` bounds) that makes a reading RED or
GREEN. Per key (device_id, data_point) the job keeps the latest reading and its health in state,
and fires a diagnosis only when the health turns RED.

Design (decided for this job):

* ONE query, ONE Parquet file sink partitioned by `output`, `event_date`, `event_hour`:
  - `output=diagnosis`: the key turned RED: GREEN -> RED, or the first reading ever seen (or seen
    again after the key's state expired) is RED, which counts as a transition from unknown
    (`previous_health` is null). RED -> RED never triggers, so a device stuck RED is diagnosed once.
  - `output=recovery`: RED -> GREEN, for on-call. Together with `diagnosis` this partition is the
    complete log of state changes; a first GREEN reading is not a change anyone acts on and emits
    nothing, nor does GREEN -> GREEN.
  - `output=stale`: a reading older than the key's latest one (out of order across micro-batches).
    It never changes the state; it is reported so late data stays visible.
  - `output=late`: a reading at or behind the watermark when it arrives (streaming only). It is
    not compared with the key's state and never changes it (a late reading of a key never seen
    creates no state); the row is the reading and its own `health`, the `previous_*` are null.
  - `output=dead_letter`: malformed lines (from `parse_events`, with `raw`) and readings of a data
    point that has no rule ("no health rule for data point 'x'").
  Every row but a dead letter carries the reading (`value`, `event_time`, `event_id`) and its own
  `health`; diagnosis, recovery and stale rows also the key's state when the reading was
  processed (`previous_health`, `previous_value`, `previous_event_time`).
* State: `transformWithStateInPandas` on RocksDB, one value state `latest` per key (value, event
  time, event id, health, `health_since`) - the queryable feature store, read by `warden state`
  through Spark's state data source. State is bounded by the number of keys, not by input.
* Order: within a micro-batch a key's readings are applied in (event_time, event_id) order, so
  out-of-order events inside a batch are harmless. Across batches, a reading ordered before the
  key's latest one is `stale`. A reading with the latest one's event id and time is a duplicate
  and is dropped; an older duplicate is just an older reading, so it is reported as stale.
* Time: event-time mode with a watermark of `allowed_lateness_seconds`. A reading whose event time
  is at or behind the watermark of the micro-batch it arrives in (Spark's own rule, as in
  `jobs.sessionizer`) is too late to say anything about a device's current health: it goes to
  `late`, nothing is dropped silently. Spark would drop such rows in front of the stateful
  operator, judged against the previous micro-batch's watermark (it lags one batch) and not
  counted in the progress' rows dropped by watermark. So, as the sessionizer does for
  `applyInPandasWithState`, the operator's event time column is null for every row while keeping
  the watermark metadata (checked on 4.3.0): Spark's late filter keeps every row, the watermark is
  still computed upstream from the real event time, and the processor compares each reading's
  time with the batch's watermark (`TimerValues.getCurrentWatermarkInMs`) itself. The state
  schema is the same as when Spark dropped late rows.
  Besides, the watermark drives the silent-key TTL: a key with no reading for
  `silent_ttl_seconds` of event time leaves the state (an event-time timer, set lazily:
  registered when the key's state is created and, when it fires early because the key kept
  reporting, registered again at the new deadline, so a steady key costs no timer work per batch).
  Expiry emits nothing. Spark's own state TTL needs processing-time mode, with which an
  available-now run never finishes (docs/architecture.md §7). The timers are not counted in the
  progress' state rows, which stay at one per key.
* Batch runs (`jobs.batch`) apply the same processor to all files at once: one "micro-batch", no
  watermark, no expiry, nothing late. The stream gives the same rows when each key's readings
  arrive in (event_time, event_id) order across files, none is later than the allowed lateness
  and no key is silent for longer than the TTL in between; `synthetic.scenarios` writes such input.
  Late readings change nothing else, so with them the stream differs from the batch run over the
  on-time files by its `late` rows only. The stream emits rows as readings arrive, so nothing
  waits for a watermark: no flush is needed.

Malformed lines never enter the stateful operator: the dead-letter branch is a separate,
stateless projection of the same parsed input, unioned with the processor's output (the input is
scanned twice per batch, so the progress counts every input line twice; device telemetry lines
are small, and dead letters must not be grouped under a null key).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pandas as pd
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)

from jobs.expressions import invalid_boolean_expressions
from jobs.parsing import RAW, with_event_partitions
from ops.spec.pipelines import DEAD_LETTER_REASON, DEAD_LETTER_ROUTE, DataPointRule, DeviceHealthPipeline

OUTPUT = "output"
DIAGNOSIS = "diagnosis"
RECOVERY = "recovery"
STALE = "stale"
LATE = "late"
KEY_COLUMNS = ("device_id", "data_point")
RED = "RED"
GREEN = "GREEN"
# The value state of each key: the latest reading, its health, and since when the key has that health.
STATE_VAR = "latest"
STATE_SCHEMA = "value double, event_time timestamp, event_id string, health string, health_since timestamp"
# The sink's columns before the partition columns.
SINK_COLUMNS = (
    OUTPUT,
    "device_id",
    "data_point",
    "value",
    "event_time",
    "event_id",
    "health",
    "previous_health",
    "previous_value",
    "previous_event_time",
    DEAD_LETTER_REASON,
    RAW,
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Columns between Spark and the processor. Not `_`-prefixed: Arrow hands such names to pandas as
# positional ones (`_4`).
_RED = "is_red"
_EVENT_US = "event_time_us"
_PREVIOUS_US = "previous_event_time_us"
# What the processor yields: times as epoch microseconds, so no time zone is involved in Python.
_PROCESSOR_OUTPUT = T.StructType(
    [
        T.StructField(OUTPUT, T.StringType()),
        T.StructField("device_id", T.StringType()),
        T.StructField("data_point", T.StringType()),
        T.StructField("value", T.DoubleType()),
        T.StructField(_EVENT_US, T.LongType()),
        T.StructField("event_id", T.StringType()),
        T.StructField("health", T.StringType()),
        T.StructField("previous_health", T.StringType()),
        T.StructField("previous_value", T.DoubleType()),
        T.StructField(_PREVIOUS_US, T.LongType()),
    ]
)


def red_condition(rule: DataPointRule) -> Column:
    """When a reading of the rule's data point is RED, as a Column (parsed by Spark)."""
    if rule.red_when is not None:
        return F.expr(rule.red_when)
    value = F.col("value")
    below = value < F.lit(rule.red_below) if rule.red_below is not None else F.lit(False)
    above = value > F.lit(rule.red_above) if rule.red_above is not None else F.lit(False)
    return below | above


def invalid_rules(events: DataFrame, rules: Sequence[DataPointRule]) -> dict[str, str]:
    """Data points whose `red_when` Spark cannot parse or resolve over `events`, or is not boolean.

    Maps the data point's name to why; only the analyzer runs, nothing is read. Bounds
    (`red_below`, `red_above`) are numbers and always valid.
    """
    return invalid_boolean_expressions(
        events, {rule.name: rule.red_when for rule in rules if rule.red_when is not None}
    )


def classify_readings(events: DataFrame, rules: Sequence[DataPointRule]) -> DataFrame:
    """Add `_red` to parsed telemetry, and dead-letter readings of a data point with no rule.

    A rule that evaluates to null counts as not RED, as a `WHERE` would.
    """
    data_point = F.col("data_point")
    red = F.lit(None).cast("boolean")
    for rule in reversed(rules):
        red = F.when(data_point == rule.name, red_condition(rule)).otherwise(red)
    known = data_point.isin([rule.name for rule in rules])
    unknown = F.concat(F.lit("no health rule for data point '"), data_point, F.lit("'"))
    reason = F.coalesce(F.col(DEAD_LETTER_REASON), F.when(~known, unknown))
    return events.withColumns({_RED: F.coalesce(red, F.lit(False)), DEAD_LETTER_REASON: reason})


def _micros(moment: Any) -> int:
    """Epoch microseconds of a state timestamp (Spark hands back its internal form, an int)."""
    if isinstance(moment, datetime):
        aware = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
        return (aware - _EPOCH) // timedelta(microseconds=1)
    return int(moment)


def _utc(micros: int) -> datetime:
    # Aware, so Spark stores the instant whatever the worker's local time zone.
    return _EPOCH + timedelta(microseconds=micros)


def _readings(readings: pd.DataFrame) -> Iterator[tuple[float, int, str, str]]:
    """(value, event time us, event id, health) of each reading, in the frame's order."""
    for value, event_us, event_id, red in zip(
        readings["value"], readings[_EVENT_US], readings["event_id"], readings[_RED], strict=True
    ):
        yield float(value), int(event_us), event_id, RED if red else GREEN


class DeviceHealthProcessor(StatefulProcessor):
    """The per-key state machine (see the module docstring): GREEN/RED, triggers on turning RED."""

    def __init__(self, silent_ttl_seconds: int | None, *, streaming: bool) -> None:
        self.silent_ttl_ms = None if silent_ttl_seconds is None else silent_ttl_seconds * 1000
        # Only a stream has a watermark to be late against; in batch every reading is on time.
        self.streaming = streaming

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.latest = handle.getValueState(STATE_VAR, STATE_SCHEMA)

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        device_id, data_point = key
        readings = pd.concat(list(rows), ignore_index=True).sort_values([_EVENT_US, "event_id"])
        out: list[tuple[Any, ...]] = []
        if self.streaming:
            # Spark's rule: at or behind the batch's watermark. Such a reading leaves the state alone.
            late = readings[_EVENT_US] <= timerValues.getCurrentWatermarkInMs() * 1000
            for value, event_us, event_id, red in _readings(readings[late]):
                out.append((LATE, device_id, data_point, value, event_us, event_id, red, None, None, None))
            readings = readings[~late]
        stored = self.latest.get()
        # (value, event time us, event id, health, health since us) of the key's latest reading.
        latest = (
            None
            if stored is None
            else (stored[0], _micros(stored[1]), stored[2], stored[3], _micros(stored[4]))
        )
        created = latest is None
        changed = False
        for value, event_us, event_id, health in _readings(readings):
            previous = (None, None, None) if latest is None else (latest[3], latest[0], latest[1])
            if latest is not None and (event_us, event_id) <= (latest[1], latest[2]):
                if (event_us, event_id) != (latest[1], latest[2]):
                    out.append((STALE, device_id, data_point, value, event_us, event_id, health, *previous))
                continue
            output = None
            if health == RED and (latest is None or latest[3] == GREEN):
                output = DIAGNOSIS
            elif health == GREEN and latest is not None and latest[3] == RED:
                output = RECOVERY
            if output is not None:
                out.append((output, device_id, data_point, value, event_us, event_id, health, *previous))
            since = event_us if latest is None or latest[3] != health else latest[4]
            latest = (value, event_us, event_id, health, since)
            changed = True
        if changed and latest is not None:
            self.latest.update((latest[0], _utc(latest[1]), latest[2], latest[3], _utc(latest[4])))
            if created and self.silent_ttl_ms is not None:
                self.handle.registerTimer(latest[1] // 1000 + self.silent_ttl_ms)
        if out:
            frame = pd.DataFrame(out, columns=_PROCESSOR_OUTPUT.names)
            yield frame.astype({_EVENT_US: "Int64", _PREVIOUS_US: "Int64"})

    def handleExpiredTimer(
        self, key: Any, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[pd.DataFrame]:
        stored = self.latest.get()
        if stored is not None and self.silent_ttl_ms is not None:
            deadline_ms = _micros(stored[1]) // 1000 + self.silent_ttl_ms
            if deadline_ms <= timerValues.getCurrentWatermarkInMs():
                self.latest.clear()
            else:
                # The key reported since the timer was set: wait for its current deadline.
                self.handle.registerTimer(deadline_ms)
        yield from ()

    def close(self) -> None:
        pass


def device_health(events: DataFrame, pipeline: DeviceHealthPipeline) -> DataFrame:
    """The sink rows from parsed telemetry (`parse_events` output): see the module docstring."""
    classified = classify_readings(events, pipeline.data_points)
    valid = F.col(DEAD_LETTER_REASON).isNull()
    event_time = pipeline.source.event_time_field
    readings = classified.where(valid).withWatermark(
        event_time, f"{pipeline.allowed_lateness_seconds} seconds"
    )
    processed = (
        readings.select(
            *KEY_COLUMNS,
            "value",
            "event_id",
            _RED,
            F.unix_micros(event_time).alias(_EVENT_US),
            *_operator_event_time(readings, event_time),
        )
        .groupBy(*KEY_COLUMNS)
        .transformWithStateInPandas(
            DeviceHealthProcessor(pipeline.silent_ttl_seconds, streaming=readings.isStreaming),
            _PROCESSOR_OUTPUT,
            "Append",
            "EventTime",
        )
    )
    transitions = _sink_projection(
        processed,
        event_time=F.timestamp_micros(_EVENT_US),
        previous_event_time=F.timestamp_micros(_PREVIOUS_US),
    )
    dead_letters = _sink_projection(
        classified.where(~valid), output=F.lit(DEAD_LETTER_ROUTE), event_time=F.col(event_time)
    )
    # The sink's event time column is `event_time` whatever the source calls it.
    sink_time = pipeline.source.model_copy(update={"event_time_field": "event_time"})
    return transitions.unionByName(dead_letters).transform(with_event_partitions, sink_time)


def _operator_event_time(readings: DataFrame, event_time: str) -> list[Column]:
    """The event time column the stateful operator sees: all nulls, with the watermark metadata.

    The metadata gives the processor the batch's watermark and event-time timers; being null, no
    row matches Spark's late filter, so the processor sends late readings to `late` itself.
    """
    if not readings.isStreaming:
        return []
    metadata = readings.schema[event_time].metadata
    return [F.lit(None).cast("timestamp").alias(event_time, metadata=metadata)]


_SINK_TYPES = {"value": "double", "previous_value": "double", "previous_event_time": "timestamp"}


def _sink_projection(rows: DataFrame, **columns: Column) -> DataFrame:
    """`rows` as the sink's columns: those given, else the column of that name, else a typed null."""

    def column(name: str) -> Column:
        if name in columns:
            return columns[name].alias(name)
        if name in rows.columns:
            return F.col(name)
        return F.lit(None).cast(_SINK_TYPES.get(name, "string")).alias(name)

    return rows.select(*(column(name) for name in SINK_COLUMNS))
