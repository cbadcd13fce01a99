"""The router's Flink SQL: the same fan-out as `jobs.router.transform.route_events`.

One INSERT, one pass: per parsed line, an array holds each route's name when its filter matches
(NULL otherwise) plus `dead_letter` for a malformed line; `CROSS JOIN UNNEST` turns the non-null
names into rows, and each column is kept only for the routes that project it (NULL for the
others). That is Spark's array-of-structs plus `inline`, and for the same reason: with a UNION
ALL of one SELECT per route, Flink's planner merges the parsing Calc into every branch (sub-plan
reuse then shares only the file scan), so each line's JSON would be parsed once per route. An
uncorrelated `UNNEST(ARRAY['purchases', ...])` is no better: in streaming mode it plans a
regular join on a single task that keeps every event in state.

Route filters are Spark SQL handed to Flink verbatim: the spec's filters (comparisons, AND, IN)
mean the same in both dialects, and one that does not parse in Flink fails the benchmark loudly
rather than routing differently.
"""

from __future__ import annotations

from pathlib import Path

from benchmarks.flink.landing_sql import FLINK_TYPES, ident, parsed_view, quote, sink_table, source_table
from ops.spec.job import JobSpec
from ops.spec.pipelines import DEAD_LETTER_ROUTE, RouterPipeline

PARTITIONS = ("route", "event_date", "event_hour")
DEAD_LETTER_COLUMNS = ("dead_letter_reason", "raw")


def statements(spec: JobSpec, landing_root: Path, out_dir: Path) -> list[str]:
    """DDL, then the INSERT that writes the router's sink rows to `out_dir`."""
    pipeline = spec.pipeline
    assert isinstance(pipeline, RouterPipeline)
    return [
        source_table("landing", landing_root / pipeline.source.path),
        *parsed_view("events", "landing", pipeline.source),
        *fan_out(pipeline, out_dir),
    ]


def fan_out(pipeline: RouterPipeline, out_dir: Path) -> list[str]:
    """The sink's DDL and the INSERT that fans the parsed `events` view out to it."""
    source = pipeline.source
    projected = {column for route in pipeline.routes for column in route.columns}
    fields = [(f.name, FLINK_TYPES[f.type]) for f in source.fields if f.name in projected]
    columns = fields + [(name, "STRING") for name in DEAD_LETTER_COLUMNS]
    # A DATE partition would be named by its day number; Spark names it yyyy-MM-dd.
    sink_columns = [("route", "STRING"), *columns, ("event_date", "STRING"), ("event_hour", "INT")]
    valid = "dead_letter_reason IS NULL"
    matches = [
        f"CASE WHEN {valid} AND ({route.filter}) THEN {quote(route.name)} END" for route in pipeline.routes
    ]
    matches.append(f"CASE WHEN NOT {valid} THEN {quote(DEAD_LETTER_ROUTE)} END")
    keepers = {name: [route.name for route in pipeline.routes if name in route.columns] for name, _ in fields}
    keepers.update({name: [DEAD_LETTER_ROUTE] for name in DEAD_LETTER_COLUMNS})
    values = [
        f"CASE WHEN route IN ({', '.join(quote(r) for r in keepers[name])}) THEN {ident(name)} END"
        for name, _ in columns
    ]
    insert = (
        f"INSERT INTO router_sink SELECT route, {', '.join(values)}, CAST(event_date AS STRING), event_hour "
        f"FROM events CROSS JOIN UNNEST(ARRAY[{', '.join(matches)}]) AS routed(route) WHERE route IS NOT NULL"
    )
    return [sink_table("router_sink", out_dir, sink_columns, PARTITIONS), insert]
