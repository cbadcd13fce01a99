"""Router transforms: parsed events -> one DataFrame of routed rows with a `route` column.

Design (decided, see the router issue): a router job runs ONE streaming query with ONE file sink,
partitioned by `route`, `event_date`, `event_hour`. Each route is its own partition directory,
`<sink>/route=<name>/event_date=.../event_hour=.../`, and malformed lines go to
`route=dead_letter` with `dead_letter_reason` and `raw`. So:

* one checkpoint anchors savepoints and rewinds for all routes at once (no cross-query skew);
* each JSON line is parsed once per batch, whatever the number of routes;
* a new route needs config only: routes are data (`Route` models), not code.

The fan-out is one projection, not a union of one filtered DataFrame per route. In a streaming
micro-batch every branch of a union plans its own scan of the batch's files, so N routes would read
and parse the input N+1 times. Instead each row builds an array with one struct per route whose
filter holds (null otherwise) and `inline` turns the non-null structs into rows. The result has the
schema `unionByName(allowMissingColumns=True)` of the per-route projections would have: `route`,
the superset of projected source fields (source order), `dead_letter_reason`, `raw`, then the
partition columns, with nulls where a route does not project a column.

A filter is a Spark SQL boolean expression with SQL semantics: a row for which it is null (e.g.
`amount > 0` with a null amount) is not routed, as with `WHERE`.

Readers use `read_route`, which reads the sink root so Spark goes through `_spark_metadata` and
sees committed files only.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.expressions import invalid_boolean_expressions
from jobs.parsing import RAW
from ops.spec.pipelines import DEAD_LETTER_REASON, DEAD_LETTER_ROUTE, EVENT_DATE, EVENT_HOUR, Route

ROUTE = "route"
DEAD_LETTER_COLUMNS = (DEAD_LETTER_REASON, RAW)
_ROUTED = "_routed"


def route_condition(route: Route) -> Column:
    """The route's filter as a Column (parsed by Spark, so a syntax error raises here)."""
    return F.expr(route.filter)


def invalid_route_filters(events: DataFrame, routes: Sequence[Route]) -> dict[str, str]:
    """Routes whose filter Spark cannot parse or resolve over `events`, or that is not boolean.

    Maps the route name to why, so a bad filter is refused before any query starts. Only Spark's
    analyzer runs: nothing is read.
    """
    return invalid_boolean_expressions(events, {route.name: route.filter for route in routes})


def routed_columns(events: DataFrame, routes: Sequence[Route]) -> list[str]:
    """The sink's columns before the partition columns: `route`, projected fields, dead-letter fields."""
    projected = {column for route in routes for column in route.columns}
    fields = [name for name in events.columns if name in projected]
    return [ROUTE, *fields, *DEAD_LETTER_COLUMNS]


def route_events(events: DataFrame, routes: Sequence[Route]) -> DataFrame:
    """Fan parsed events out to every route whose filter matches; malformed rows to `dead_letter`.

    `events` is the output of `jobs.runtime.parse_events` plus the partition columns. A valid
    event appears once per matching route, projected to that route's columns; a malformed row
    appears once, in `dead_letter`, with its reason and raw line; an event no filter matches
    appears nowhere.
    """
    columns = routed_columns(events, routes)
    types = {field.name: field.dataType for field in events.schema.fields}
    valid = F.col(DEAD_LETTER_REASON).isNull()

    def branch(name: str, condition: Column, projected: Sequence[str]) -> Column:
        values = [F.lit(name).alias(ROUTE)] + [
            F.col(column) if column in projected else F.lit(None).cast(types[column]).alias(column)
            for column in columns[1:]
        ]
        return F.when(condition, F.struct(*values))

    branches = [branch(route.name, valid & route_condition(route), route.columns) for route in routes]
    branches.append(branch(DEAD_LETTER_ROUTE, ~valid, DEAD_LETTER_COLUMNS))
    matched = F.filter(F.array(*branches), lambda routed: routed.isNotNull())
    return events.select(F.inline(matched), EVENT_DATE, EVENT_HOUR)


def read_route(spark: SparkSession, sink_path: Path | str, route: str, columns: Sequence[str]) -> DataFrame:
    """The committed rows of one route of a router sink, projected to `columns`.

    Reads the sink root, not the route's directory: only there does Spark use the sink's
    `_spark_metadata` log and skip files of uncommitted or rewound batches.
    """
    return spark.read.parquet(str(sink_path)).where(F.col(ROUTE) == route).select(*columns)
