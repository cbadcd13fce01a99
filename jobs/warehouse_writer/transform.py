"""Warehouse-writer transforms: parsed product events -> rows of a Parquet warehouse, few files each.

Design: ONE stateless streaming query, ONE Parquet file sink partitioned by `route`,
`event_date`, `event_hour` (UTC, from the event time): valid events under `route=events/`,
malformed lines under `route=dead_letter/` with `dead_letter_reason` and `raw` (a line whose event
time did not parse lands in Spark's default partition of date and hour, `__HIVE_DEFAULT_PARTITION__`).
Valid rows keep every typed source field and a null `raw` (the line adds nothing to them).

Small files: Spark's file sink writes one file per (task, partition directory) it sees, so a
micro-batch spread over many tasks writes up to `tasks` files into every hour it touches, batch
after batch. Here the rows are repartitioned by the partition columns plus a salt in
`[0, max_files_per_partition)` (a hash of the raw line, so the same input always goes the same
way), which puts every (route, date, hour, salt) group into exactly one task. One directory's rows
therefore sit in at most `max_files_per_partition` tasks, and each micro-batch writes at most that
many files into it, however many rows or tasks there are. The salt keeps a busy hour written by
several tasks in parallel instead of one. Hash collisions can give an hour fewer files than the
bound, never more; so can adaptive execution, which Spark 4 runs on stateless streaming queries and
which merges the shuffle partitions of a small batch into fewer tasks. Compacting older hours into
larger files is a separate, offline concern.

The batch runner applies the same transform, so a backfill has the same layout and bound.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from jobs.parsing import DEAD_LETTER_REASON, RAW
from ops.spec.pipelines import DEAD_LETTER_ROUTE, EVENT_DATE, EVENT_HOUR, WarehouseWriterPipeline

ROUTE = "route"
EVENTS_ROUTE = "events"
_SALT = "_salt"


def warehouse_rows(events: DataFrame, max_files_per_partition: int) -> DataFrame:
    """Parsed events with partition columns -> warehouse rows, at most N tasks per partition.

    `events` is the output of `jobs.runtime.parse_events` plus `event_date`/`event_hour`. Columns:
    the source fields, `dead_letter_reason`, `raw` (null for valid rows), then the partition
    columns `route`, `event_date`, `event_hour`.
    """
    valid = F.col(DEAD_LETTER_REASON).isNull()
    fields = [
        name for name in events.columns if name not in (DEAD_LETTER_REASON, RAW, EVENT_DATE, EVENT_HOUR)
    ]
    rows = events.select(
        *fields,
        DEAD_LETTER_REASON,
        F.when(~valid, F.col(RAW)).alias(RAW),
        F.when(valid, F.lit(EVENTS_ROUTE)).otherwise(F.lit(DEAD_LETTER_ROUTE)).alias(ROUTE),
        EVENT_DATE,
        EVENT_HOUR,
        F.pmod(F.xxhash64(RAW), F.lit(max_files_per_partition)).alias(_SALT),
    )
    return rows.repartition(*WarehouseWriterPipeline.fixed_partition_columns, _SALT).drop(_SALT)
