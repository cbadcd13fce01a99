"""Attack chains (Arctic Wolf): security events -> matches of declared event-pattern rules.

One query, one Parquet sink partitioned by `output` and `event_date`: `match` rows (one per
match: `rule`, `key`, the `event_ids` and `event_times` of the events that formed it, in event
time order), `late` rows (an event at or behind the watermark, per rule it was tagged for) and
`dead_letter` rows (malformed lines with `dead_letter_reason` and `raw`).

Rules (`ops.spec.pipelines.PatternRule`, declared in the job file; filters are Spark SQL, checked by
the analyzer with `invalid_rule_expressions` before the query starts):

* `sequence`: an event matching `first`, then one matching `then` with the same `key`, at most
  `within_seconds` later (inclusive: exactly 15:00 after matches, 15:00.001 does not). The `then`
  event pairs with the earliest open `first` event in its window, which is consumed: A, B, B gives
  one match; A, A, B, B gives two.
* `threshold_then`: at least `min_failures` `failure` events then a `success`, the first failure
  at most `within_seconds` before the success. A success consumes the open failures, matched
  or not (a new match needs new failures).
* `distinct_count`: events matching `filter` of one key touching at least `min_distinct`
  distinct `target` values within `within_seconds`. The events of a match are consumed, so more
  events to more targets do not repeat the match; the count starts again from the next event.

How: each event is tagged once per rule whose filters it matches (one projection, as in the
router), keyed by (rule, the rule's key value). One stateful processor per key
(`applyInPandasWithState`, event-time timeouts, RocksDB state, checkpoint format 1 or 2) buffers
the key's events until the watermark passes them and then feeds them, in event-time order (ties by
`event_id`), to the rule's matcher (`step`): so out-of-order events within the allowed lateness
give the same matches as in-order ones, and the batch runner (all events at once, same `step`)
gives the same rows. A timer at the earliest buffered event (or at the expiry of the matcher's
open events) wakes the key with no new data; a key whose buffer and open events are all older
than the watermark minus the rule window is removed. State is thus bounded by the events of one
rule window plus the allowed lateness per active key. The watermark is the newest event time of
earlier micro-batches minus `allowed_lateness_seconds`.

Duplicates (same `event_id`) are dropped while the original is buffered or processed at most
`allowed_lateness` ago. An event at or behind the watermark when it arrives (Spark's own rule, as
in every job with a `late` output) cannot be put in order any more: it goes to `late` (per rule),
never silently dropped. Spark would drop such rows in front of the processor, so, as in the
bucketed jobs, its watermark column is null (`jobs.bucketed_state.operator_watermark`) and it
receives the event time as microseconds.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

import pandas as pd
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout

from jobs.bucketed_state import operator_watermark, timeout_reaching
from jobs.expressions import invalid_boolean_expressions
from jobs.parsing import RAW
from ops.spec.pipelines import (
    DEAD_LETTER_REASON,
    DEAD_LETTER_ROUTE,
    AttackChainsPipeline,
    DistinctCountRule,
    PatternRule,
    SequenceRule,
    ThresholdThenRule,
)

OUTPUT = "output"
EVENT_DATE = "event_date"
MATCH = "match"
LATE = "late"
SINK_COLUMNS = (
    OUTPUT,
    "rule",
    "key",
    "event_ids",
    "event_times",
    DEAD_LETTER_REASON,
    RAW,
    EVENT_DATE,
)
_TAGGED = "_tagged"
_PROCESSOR_OUTPUT = "output string, rule string, key string, event_ids array<string>, event_us array<long>"
_PROCESSOR_STATE = "state string"
_MICROS = 1_000_000

# A tagged event as the matcher sees it: [event_id, event_us, first, then, target].
Record = list[Any]


# The fields of a rule that hold Spark SQL filters, over all rule kinds.
RULE_EXPRESSION_FIELDS = ("first", "then", "failure", "success", "filter")


def rule_expressions(rule: PatternRule) -> dict[str, str]:
    """The rule's Spark SQL filters by their field in the job file."""
    if isinstance(rule, SequenceRule):
        return {"first": rule.first, "then": rule.then}
    if isinstance(rule, ThresholdThenRule):
        return {"failure": rule.failure, "success": rule.success}
    return {"filter": rule.filter}


def invalid_rule_expressions(events: DataFrame, pipeline: AttackChainsPipeline, field: str) -> dict[str, str]:
    """Rules whose filter `field` (`first`, ...) Spark cannot parse or resolve over the parsed
    `events`, or that is not boolean, mapped to why. Only the analyzer runs: nothing is read."""
    expressions = {rule.name: rule_expressions(rule).get(field) for rule in pipeline.rules}
    return invalid_boolean_expressions(
        _with_event_time(events, pipeline),
        {name: expression for name, expression in expressions.items() if expression is not None},
    )


def rule_roles(rule: PatternRule) -> tuple[Column, Column, Column]:
    """(first, then, target) of an event for `rule`: which roles it can play, and its target."""
    if isinstance(rule, SequenceRule):
        return F.expr(rule.first), F.expr(rule.then), F.lit(None).cast("string")
    if isinstance(rule, ThresholdThenRule):
        return F.expr(rule.failure), F.expr(rule.success), F.lit(None).cast("string")
    return F.expr(rule.filter), F.lit(False), F.col(rule.target).cast("string")


def tag_events(valid: DataFrame, rules: Sequence[PatternRule]) -> DataFrame:
    """One row per (event, rule it may take part in): rule, key, event_id, event_us, roles, target."""
    branches = []
    for rule in rules:
        first, then, target = rule_roles(rule)
        first, then = F.coalesce(first, F.lit(False)), F.coalesce(then, F.lit(False))
        tagged = F.struct(
            F.lit(rule.name).alias("rule"),
            F.col(rule.key).cast("string").alias("key"),
            F.col("event_id").alias("event_id"),
            F.unix_micros("event_time").alias("event_us"),
            first.alias("first"),
            then.alias("then"),
            target.alias("target"),
        )
        branches.append(F.when(F.col(rule.key).isNotNull() & (first | then), tagged))
    matched = F.filter(F.array(*branches), lambda row: row.isNotNull())
    return valid.select(F.inline(matched))


def attack_chains(events: DataFrame, pipeline: AttackChainsPipeline) -> DataFrame:
    """Parsed security events -> match, late and dead-letter rows (see the module docstring)."""
    events = _with_event_time(events, pipeline)
    if events.isStreaming:
        events = events.withWatermark("event_time", f"{pipeline.allowed_lateness_seconds} seconds")
    tagged = tag_events(events.where(F.col(DEAD_LETTER_REASON).isNull()), pipeline.rules)
    rules = {rule.name: _rule_params(rule) for rule in pipeline.rules}
    lateness_us = pipeline.allowed_lateness_seconds * _MICROS
    if events.isStreaming:

        def process(
            key: tuple[Any, ...], batches: Iterator[pd.DataFrame], state: GroupState
        ) -> Iterator[pd.DataFrame]:
            if key[0] not in rules:
                # A rule since removed from the job file: its keys' state goes at their next timer.
                state.remove()
                return
            yield from _process_key(key, batches, state, rules[key[0]], lateness_us)

        rows = (
            tagged.select("*", *operator_watermark(events, "event_time"))
            .groupBy("rule", "key")
            .applyInPandasWithState(
                process, _PROCESSOR_OUTPUT, _PROCESSOR_STATE, "append", GroupStateTimeout.EventTimeTimeout
            )
        )
    else:

        def batch(key: tuple[Any, ...], frame: pd.DataFrame) -> pd.DataFrame:
            records = sorted(_dedup(_records(frame)), key=lambda record: (record[1], record[0]))
            return _frame(key, _run(rules[key[0]], [], records)[1])

        rows = tagged.groupBy("rule", "key").applyInPandas(batch, _PROCESSOR_OUTPUT)
    times = F.transform("event_us", lambda us: F.timestamp_micros(us))
    matches = rows.select(
        OUTPUT,
        "rule",
        "key",
        "event_ids",
        times.alias("event_times"),
        F.lit(None).cast("string").alias(DEAD_LETTER_REASON),
        F.lit(None).cast("string").alias(RAW),
        F.to_date(F.timestamp_micros(F.element_at("event_us", -1))).alias(EVENT_DATE),
    )
    dead = events.where(F.col(DEAD_LETTER_REASON).isNotNull()).select(
        F.lit(DEAD_LETTER_ROUTE).alias(OUTPUT),
        F.lit(None).cast("string").alias("rule"),
        F.lit(None).cast("string").alias("key"),
        F.lit(None).cast("array<string>").alias("event_ids"),
        F.lit(None).cast("array<timestamp>").alias("event_times"),
        DEAD_LETTER_REASON,
        RAW,
        F.to_date("event_time").alias(EVENT_DATE),
    )
    return matches.unionByName(dead)


def _with_event_time(events: DataFrame, pipeline: AttackChainsPipeline) -> DataFrame:
    """`events` with the source's event time field named `event_time`, as the rules see it."""
    event_time = pipeline.source.event_time_field
    return events if event_time == "event_time" else events.withColumnRenamed(event_time, "event_time")


# --- the matchers (plain Python, shared by the stream and the batch) ----------------------------


def _rule_params(rule: PatternRule) -> dict[str, Any]:
    if isinstance(rule, SequenceRule):
        threshold = 1
    elif isinstance(rule, ThresholdThenRule):
        threshold = rule.min_failures
    else:
        assert isinstance(rule, DistinctCountRule)
        threshold = rule.min_distinct
    return {"kind": rule.kind, "within_us": rule.within_seconds * _MICROS, "threshold": threshold}


def step(
    rule: dict[str, Any], open_events: list[Record], record: Record
) -> tuple[list[Record], list[Record] | None]:
    """Feed one event (in event-time order) to a rule's matcher: (open events after it, match or None)."""
    event_us, first, then = record[1], record[2], record[3]
    within, threshold = rule["within_us"], rule["threshold"]
    in_window = [event for event in open_events if event_us - event[1] <= within]
    match = None
    if rule["kind"] == "sequence":
        if then and in_window:
            match = [in_window[0], record]
            in_window = in_window[1:]
        if first:
            in_window.append(record)
    elif rule["kind"] == "threshold_then":
        if first:
            in_window.append(record)
        if then:
            if len(in_window) >= threshold:
                match = [*in_window, record]
            in_window = []
    else:
        in_window.append(record)
        if len({event[4] for event in in_window if event[4] is not None}) >= threshold:
            match, in_window = in_window, []
    return in_window, match


def _run(
    rule: dict[str, Any], open_events: list[Record], records: list[Record]
) -> tuple[list[Record], list[tuple[Any, ...]]]:
    """Feed `records` in order; (open events after them, match rows)."""
    rows: list[tuple[Any, ...]] = []
    for record in records:
        open_events, match = step(rule, open_events, record)
        if match is not None:
            rows.append((MATCH, [event[0] for event in match], [event[1] for event in match]))
    return open_events, rows


def _records(frame: pd.DataFrame) -> list[Record]:
    return [
        [
            row.event_id,
            int(row.event_us),
            bool(row.first),
            bool(row.then),
            None if pd.isna(row.target) else row.target,
        ]
        for row in frame.itertuples(index=False)
    ]


def _dedup(records: list[Record]) -> list[Record]:
    seen: set[str] = set()
    unique = []
    for record in records:
        if record[0] not in seen:
            seen.add(record[0])
            unique.append(record)
    return unique


def _frame(key: tuple[Any, ...], rows: list[tuple[Any, ...]]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=["output", "event_ids", "event_us"])
    frame.insert(1, "rule", key[0])
    frame.insert(2, "key", key[1])
    return frame


def _process_key(
    key: tuple[Any, ...],
    batches: Iterator[pd.DataFrame],
    state: GroupState,
    rule: dict[str, Any],
    lateness_us: int,
) -> Iterator[pd.DataFrame]:
    """One (rule, key)'s call of the stream processor: buffer, detect late/duplicates, match in order."""
    watermark_us = state.getCurrentWatermarkMs() * 1000
    kept: dict[str, Any] = (
        json.loads(state.get[0]) if state.exists else {"buffer": [], "open": [], "seen": {}}
    )
    buffer: list[Record] = kept["buffer"]
    seen: dict[str, int] = kept["seen"]
    rows: list[tuple[Any, ...]] = []
    if not state.hasTimedOut:
        for frame in batches:
            for record in _records(frame):
                if record[0] in seen:
                    continue
                if record[1] <= watermark_us:
                    rows.append((LATE, [record[0]], [record[1]]))
                    continue
                seen[record[0]] = record[1]
                buffer.append(record)
    buffer.sort(key=lambda record: (record[1], record[0]))
    # No on-time event at or behind the watermark can arrive any more: these are in order.
    ready = [record for record in buffer if record[1] <= watermark_us]
    buffer = buffer[len(ready) :]
    open_events, matches = _run(rule, kept["open"], ready)
    rows.extend(matches)
    # A later event is at or after the watermark: open events before the horizon cannot match it.
    open_events = [event for event in open_events if event[1] >= watermark_us - rule["within_us"]]
    seen = {event_id: at for event_id, at in seen.items() if at >= watermark_us - lateness_us}
    if buffer or open_events or seen:
        state.update((json.dumps({"buffer": buffer, "open": open_events, "seen": seen}),))
        # Wake when the watermark reaches the first buffered event, or passes the window of an
        # open event or the lateness of a remembered id.
        wake_us = [buffer[0][1]] if buffer else []
        wake_us += [min(event[1] for event in open_events) + rule["within_us"] + 1] if open_events else []
        wake_us += [min(seen.values()) + lateness_us + 1] if seen else []
        state.setTimeoutTimestamp(timeout_reaching(min(wake_us)))
    else:
        state.remove()
    if rows:
        yield _frame(key, rows)
