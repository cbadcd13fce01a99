"""Impressions-plays transforms: which title impressions led to a play within the hour (co-process join).

Design: ONE streaming query, a stream-stream LEFT OUTER join of impressions (left) with plays
(right), ONE Parquet file sink partitioned by `outcome`, `event_date`, `event_hour` (of the
impression's event time; of the line's event time, when it parsed, for dead letters):

* `outcome=conversion`: one row per (impression, play) pair with the same `profile_id` and
  `title_id` and `impression_time <= play_time <= impression_time + window` (window =
  `conversion_window_seconds`, 1 hour; BOTH ends inclusive: a play at the impression's instant or
  exactly one hour later converts, one millisecond outside does not). Emitted in the micro-batch
  in which the second of the two events arrives.
* `outcome=unconverted`: an impression no play matched, play columns null. Spark emits it once the
  watermark guarantees that no play can still match, i.e. once the global watermark passes
  `impression_time + window`; since each watermark trails its source's newest event time by
  `allowed_lateness_seconds`, that is when a play later than `impression_time + window +
  lateness` has been seen (and as many micro-batches as that takes; a no-data batch does it when
  nothing else arrives). Until then the impression waits in state.
* `outcome=dead_letter`: malformed lines of either source with `source`, `dead_letter_reason` and
  `raw`, written at once (stateless).

Plays that match no impression are not written (the question is which impressions convert).

Semantics worth knowing (each is tested in tests/jobs/test_impressions_plays.py):

* A play matching several impressions converts each of them: one conversion row per pair. An
  impression followed by several plays within the window gives one conversion row per play, and
  no unconverted row. So count conversions as `count(distinct impression_id)`, not rows.
* Duplicates: a line resent with the same `impression_id` (or `play_id`) is dropped with
  `dropDuplicatesWithinWatermark`; the first copy read wins (the batch runner keeps one of them;
  resends are identical copies, so which one does not matter). The key is forgotten once the
  watermark passes the first copy's event time plus the lateness, by which time a resend with that
  event time would be late anyway.
* Out-of-order events within the lateness are joined exactly as if they had arrived in order:
  either side may arrive first, the other waits in state.
* Late events: a row whose event time is older than the global watermark (the minimum of both
  sources' watermarks, as of the end of the previous micro-batch) is DROPPED by the first stateful
  operator that sees it and counted in that operator's `numRowsDroppedByWatermark` in the query
  progress. Spark offers no side output for them, and they cannot be honoured anyway: a late play's
  impressions may already have been written as unconverted, and a late impression's plays evicted.
  So a play arriving after its impression was written as unconverted leaves that row as it is. The
  batch runner has no watermark and would join them: stream and batch agree only when no event is
  later than the lateness (which the scenarios respect).
* Both watermarks move only with their own source, and the global one is the slower of the two:
  while one source is idle, impressions stay in state and no unconverted row is written.

State: the join keeps impressions until the watermark passes `impression_time + window` and plays
until it passes `play_time` (no later impression can precede them); deduplication keeps each id
until the watermark passes its event time + lateness. All of it is bounded by the event-time
span of window + lateness, not by the length of the stream.

Each source is read twice per micro-batch (once for the join, once for its dead letters): a union
plans one scan per branch, and a stateful join cannot share a projection with a stateless one the
way the router's `inline` fan-out does.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from jobs.runtime import DEAD_LETTER_REASON, EVENT_DATE, EVENT_HOUR, RAW
from ops.pipelines import DEAD_LETTER_ROUTE, FileSource, ImpressionsPlaysPipeline

OUTCOME = "outcome"
CONVERSION = "conversion"
UNCONVERTED = "unconverted"
SOURCE = "source"
IMPRESSION_TIME = "impression_time"
PLAY_TIME = "play_time"
PARTITION_COLUMNS = (OUTCOME, EVENT_DATE, EVENT_HOUR)
OUTPUT_COLUMNS = (
    OUTCOME,
    "impression_id",
    "profile_id",
    "title_id",
    IMPRESSION_TIME,
    "play_id",
    PLAY_TIME,
    SOURCE,
    DEAD_LETTER_REASON,
    RAW,
)
OUTPUT_SCHEMA = (
    "outcome string, impression_id string, profile_id string, title_id string, "
    "impression_time timestamp, play_id string, play_time timestamp, source string, "
    "dead_letter_reason string, raw string, event_date date, event_hour int"
)
# Column -> SQL type, parsed from OUTPUT_SCHEMA ("name type, ...").
_TYPES = dict(column.strip().split(" ", 1) for column in OUTPUT_SCHEMA.split(","))
_PLAY_PROFILE = "_play_profile_id"
_PLAY_TITLE = "_play_title_id"


def watermarked(
    parsed: DataFrame, source: FileSource, columns: dict[str, str], time_column: str, lateness_seconds: int
) -> DataFrame:
    """The valid rows of a parsed source, renamed (`columns`: field -> name), watermarked and deduplicated.

    The first renamed column is the event's id: a second row with the same id within the watermark
    is a resend and dropped (in a batch, every second row with the same id).
    """
    renamed = parsed.where(F.col(DEAD_LETTER_REASON).isNull()).select(
        *(F.col(field).alias(name) for field, name in columns.items()),
        F.col(source.event_time_field).alias(time_column),
    )
    id_column = next(iter(columns.values()))
    events = renamed.withWatermark(time_column, f"{lateness_seconds} seconds")
    # Spark refuses dropDuplicatesWithinWatermark on a batch DataFrame; without a watermark every
    # copy is within it, which is what dropDuplicates does.
    if events.isStreaming:
        return events.dropDuplicatesWithinWatermark([id_column])
    return events.dropDuplicates([id_column])


def conversion_condition(window_seconds: int) -> Column:
    """Same profile and title, and the play at most `window_seconds` after the impression (inclusive)."""
    window = F.expr(f"INTERVAL {window_seconds} SECONDS")
    return (
        (F.col("profile_id") == F.col(_PLAY_PROFILE))
        & (F.col("title_id") == F.col(_PLAY_TITLE))
        & (F.col(PLAY_TIME) >= F.col(IMPRESSION_TIME))
        & (F.col(PLAY_TIME) <= F.col(IMPRESSION_TIME) + window)
    )


def join_plays(impressions: DataFrame, plays: DataFrame, window_seconds: int) -> DataFrame:
    """Impressions left-outer-joined to their plays: conversions, and unconverted impressions."""
    joined = impressions.join(plays, conversion_condition(window_seconds), "left_outer")
    outcome = F.when(F.col("play_id").isNull(), F.lit(UNCONVERTED)).otherwise(F.lit(CONVERSION))
    return joined.select(
        outcome.alias(OUTCOME),
        "impression_id",
        "profile_id",
        "title_id",
        IMPRESSION_TIME,
        "play_id",
        PLAY_TIME,
        F.lit(None).cast("string").alias(SOURCE),
        F.lit(None).cast("string").alias(DEAD_LETTER_REASON),
        F.lit(None).cast("string").alias(RAW),
        F.to_date(IMPRESSION_TIME).alias(EVENT_DATE),
        F.hour(IMPRESSION_TIME).alias(EVENT_HOUR),
    )


def dead_letters(parsed: DataFrame, source: FileSource, name: str) -> DataFrame:
    """The malformed rows of one parsed source in the output schema, `source` naming it."""
    event_time = F.col(source.event_time_field)
    nothing = {column: F.lit(None) for column in OUTPUT_COLUMNS}
    values = {
        **nothing,
        OUTCOME: F.lit(DEAD_LETTER_ROUTE),
        SOURCE: F.lit(name),
        DEAD_LETTER_REASON: F.col(DEAD_LETTER_REASON),
        RAW: F.col(RAW),
    }
    return parsed.where(F.col(DEAD_LETTER_REASON).isNotNull()).select(
        *(value.cast(_TYPES[column]).alias(column) for column, value in values.items()),
        F.to_date(event_time).alias(EVENT_DATE),
        F.hour(event_time).alias(EVENT_HOUR),
    )


def impressions_plays(
    impressions: DataFrame, plays: DataFrame, pipeline: ImpressionsPlaysPipeline
) -> DataFrame:
    """Both parsed sources -> conversions, unconverted impressions and dead letters (OUTPUT_SCHEMA)."""
    lateness = pipeline.allowed_lateness_seconds
    left = watermarked(
        impressions,
        pipeline.impressions,
        {"impression_id": "impression_id", "profile_id": "profile_id", "title_id": "title_id"},
        IMPRESSION_TIME,
        lateness,
    )
    right = watermarked(
        plays,
        pipeline.plays,
        {"play_id": "play_id", "profile_id": _PLAY_PROFILE, "title_id": _PLAY_TITLE},
        PLAY_TIME,
        lateness,
    )
    return (
        join_plays(left, right, pipeline.conversion_window_seconds)
        .unionByName(dead_letters(impressions, pipeline.impressions, "impressions"))
        .unionByName(dead_letters(plays, pipeline.plays, "plays"))
    )
