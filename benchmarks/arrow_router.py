"""The floor of the router benchmarks: the same bytes read, filtered and written by pyarrow alone.

One process, no engine: each landing file is read by `pyarrow.json` with the typed schema of the
source's fields, each route's rows are selected with a pyarrow filter and projected to the route's
columns (nulls for the others, as the router's sink has them), and `pyarrow.dataset` writes the
same `route`/`event_date`/`event_hour` partitioned Snappy Parquet. No dead letters: pyarrow's JSON
reader fails a whole file on one malformed line, so the floor is measured on clean input only.

The route filters are Spark SQL in the job file; `ROUTE_FILTERS` has each of the repo router's
filters written as a pyarrow expression, and a filter it lacks is an error, not a guess.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.json as pj

from jobs.router.transform import ROUTE
from ops.spec.job import JobSpec
from ops.spec.pipelines import EVENT_DATE, EVENT_HOUR, RouterPipeline

ARROW_TYPES = {
    "string": pa.string(),
    "long": pa.int64(),
    "double": pa.float64(),
    "boolean": pa.bool_(),
    "timestamp": pa.timestamp("us", tz="UTC"),
}
EU = ["DE", "FR", "ES", "IT", "NL"]
ROUTE_FILTERS = {
    "event_type = 'purchase' AND amount > 0": (pc.field("event_type") == "purchase")
    & (pc.field("amount") > 0),
    "event_type = 'view' AND country IN ('DE', 'FR', 'ES', 'IT', 'NL')": (pc.field("event_type") == "view")
    & pc.field("country").isin(EU),
    "device IN ('ios', 'android')": pc.field("device").isin(["ios", "android"]),
}


def route_files(spec: JobSpec, landing: Path, out: Path) -> int:
    """Route every `*.json` file of `landing` into `out`; returns the rows written."""
    pipeline = spec.pipeline
    assert isinstance(pipeline, RouterPipeline)
    source = pipeline.source
    unknown = [route.filter for route in pipeline.routes if route.filter not in ROUTE_FILTERS]
    if unknown:
        raise ValueError(f"no pyarrow expression for route filters {unknown}: add them to ROUTE_FILTERS")
    schema = pa.schema([(f.name, ARROW_TYPES[f.type]) for f in source.fields])
    options = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    events = pa.concat_tables(
        pj.read_json(path, parse_options=options) for path in sorted(landing.glob("*.json"))
    )
    event_time = events[source.event_time_field]
    events = events.append_column(EVENT_DATE, pc.cast(event_time, pa.date32())).append_column(
        EVENT_HOUR, pc.hour(event_time).cast(pa.int32())
    )
    projected = {column for route in pipeline.routes for column in route.columns}
    columns = [f.name for f in source.fields if f.name in projected]
    routed = []
    for route in pipeline.routes:
        selected = events.filter(ROUTE_FILTERS[route.filter])
        arrays = [pa.repeat(pa.scalar(route.name, pa.string()), selected.num_rows)]
        arrays += [
            selected[c] if c in route.columns else pa.nulls(selected.num_rows, schema.field(c).type)
            for c in columns
        ]
        arrays += [selected[EVENT_DATE], selected[EVENT_HOUR]]
        routed.append(pa.table(arrays, names=[ROUTE, *columns, EVENT_DATE, EVENT_HOUR]))
    table = pa.concat_tables(routed)
    ds.write_dataset(
        table,
        out,
        format="parquet",
        partitioning=list(RouterPipeline.fixed_partition_columns),
        partitioning_flavor="hive",
        existing_data_behavior="overwrite_or_ignore",
    )
    return table.num_rows
