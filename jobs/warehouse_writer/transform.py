"""The warehouse writer: product events -> rows of a Parquet warehouse, few files each.

A python job that ships with the platform (`conf/jobs/warehouse_writer.yaml`: `kind: python`, no
`code`, entrypoint `build`): the team jobs' contract (`jobs.user_code`), so it has no kind of its
own. ONE stateless streaming query, ONE Parquet file sink partitioned by `route`, `event_date`,
`event_hour` (UTC, from the event time): valid events under `route=events/` with every typed
source field; malformed lines are the platform's dead letters (`route=dead_letter/`, with
`dead_letter_reason` and `raw`, in Spark's default partition of date and hour when the event time
did not parse).

Small files: Spark's file sink writes one file per (task, partition directory) it sees, so a
micro-batch spread over many tasks writes up to `tasks` files into every hour it touches, batch
after batch. Here the events are repartitioned by the partition columns plus a salt in
`[0, max_files_per_partition)` (a parameter, default 4; a hash of the event's fields, so the same
input always goes the same way), which puts every (date, hour, salt) group into exactly one task.
One hour's events therefore sit in at most `max_files_per_partition` tasks, and each micro-batch
writes at most that many files into it, however many rows or tasks there are. The salt keeps a
busy hour written by several tasks in parallel instead of one. Hash collisions can give an hour
fewer files than the bound, never more; so can adaptive execution, which Spark 4 runs on stateless
streaming queries and which merges the shuffle partitions of a small batch into fewer tasks.
Compacting older hours into larger files is a separate, offline concern.

The batch runner applies the same function, so a backfill has the same layout and bound.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from jobs.user_code import JobContext
from ops.spec.pipelines import EVENT_DATE, EVENT_HOUR

ROUTE = "route"
EVENTS_ROUTE = "events"
MAX_FILES_PARAMETER = "max_files_per_partition"
DEFAULT_MAX_FILES = 4
# Spark's file sink would write this many files per hour at most anyway with its default shuffle.
MAX_FILES_LIMIT = 256
_SALT = "_salt"


def build(inputs: Mapping[str, DataFrame], context: JobContext) -> DataFrame:
    """The valid `events` with `route` = events, at most `max_files_per_partition` tasks per hour."""
    max_files = context.parameters.get(MAX_FILES_PARAMETER, DEFAULT_MAX_FILES)
    if not isinstance(max_files, int) or not 1 <= max_files <= MAX_FILES_LIMIT:
        raise ValueError(
            f"parameter {MAX_FILES_PARAMETER} must be a whole number from 1 to {MAX_FILES_LIMIT}, "
            f"got {max_files!r}"
        )
    events = inputs["events"]
    fields = [name for name in events.columns if name not in (EVENT_DATE, EVENT_HOUR)]
    rows = events.select(
        *fields,
        F.lit(EVENTS_ROUTE).alias(ROUTE),
        EVENT_DATE,
        EVENT_HOUR,
        F.pmod(F.xxhash64(*fields), F.lit(max_files)).alias(_SALT),
    )
    return rows.repartition(EVENT_DATE, EVENT_HOUR, _SALT).drop(_SALT)
