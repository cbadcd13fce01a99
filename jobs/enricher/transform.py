"""Enricher transforms: parsed events + lookup table + mapping -> enriched rows (Netflix enricher,
Intuit's dynamic transformations).

Design: ONE stateless streaming query, ONE Parquet file sink partitioned by `route`,
`event_date`, `event_hour`. Each event is

1. joined (left, broadcast) with the reference table on `join_field = reference.key`. A hit adds
   the table's other fields as typed columns and `reference_version` (the table version the row
   came from); a miss keeps the event with nulls there and `lookup_hit = false`. Events are never
   dropped for a miss.
2. reshaped by the mapping: the event's JSON object (the raw line, every field, nested ones too)
   plus, on a hit, the matched row's fields under `document_key` (`{"reference": {...}}`; absent on
   a miss) is passed through the mapping's operations (`jobs/enricher/mapping.py`) and stored as
   JSON text in `document`, with the `mapping_version` that produced it.

Both side inputs change while the query runs and every micro-batch reads them when it runs, so a
refreshed table or an edited mapping applies from the next batch on, without a restart
(`jobs/enricher/side_inputs.py` says why that takes Python data sources). An invalid mapping file
is refused as a whole: batches keep using the last valid mapping and the problem shows in the
observed metric `enricher.mapping_problem` of each batch's progress, in a log line and in
`<runtime>/jobs/<job>/mapping-status.json`.

Because the mapping changes at run time while a streaming query's schema cannot, the mapped
document is a JSON string column, not columns of its own. The typed columns (source fields,
reference fields) are fixed by the job file.

What goes where: valid events under `route=enriched/`; malformed lines (`parse_events`) and events
the mapping cannot be applied to (a key along a written path is not an object, or no valid mapping
exists) under `route=dead_letter/` with `dead_letter_reason` and `raw`. No state, no watermark:
nothing is ever late.
"""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from jobs.enricher.mapping import MappingConflict, apply_mapping
from jobs.enricher.side_inputs import MAPPING_JSON, MAPPING_PROBLEM, MAPPING_VERSION, REFERENCE_VERSION
from jobs.parsing import RAW
from ops.spec.pipelines import DEAD_LETTER_REASON, DEAD_LETTER_ROUTE, EVENT_DATE, EVENT_HOUR, EnricherPipeline

ROUTE = "route"
ENRICHED_ROUTE = "enriched"
LOOKUP_HIT = "lookup_hit"
DOCUMENT = "document"
OBSERVATION = "enricher"
_REFERENCE_KEY = "_reference_key"
_MAPPED = "_mapped"
_MAPPED_SCHEMA = T.StructType(
    [T.StructField(DOCUMENT, T.StringType()), T.StructField("problem", T.StringType())]
)


def _operations(mapping_json: str) -> list[dict[str, Any]]:
    # One parse per batch and worker, not per row: the same text arrives with every row.
    cached = _PARSED.get(mapping_json)
    if cached is None:
        cached = _PARSED[mapping_json] = json.loads(mapping_json)
        if len(_PARSED) > 16:
            _PARSED.pop(next(iter(_PARSED)))
    return cached


_PARSED: dict[str, list[dict[str, Any]]] = {}


def map_document(
    raw: str, reference_json: str | None, document_key: str, mapping_json: str | None
) -> tuple[str | None, str | None]:
    """(mapped document as JSON, None) or (None, dead-letter reason) for one valid event line."""
    if mapping_json is None:
        return None, "no valid mapping"
    # Spark evaluates a Python UDF on every row, whatever the CASE WHEN around it says, so the
    # malformed lines arrive here too (their result is discarded).
    try:
        document = json.loads(raw)
    except ValueError:
        return None, "invalid JSON"
    if not isinstance(document, dict):
        return None, "invalid JSON"
    if reference_json is not None:
        document[document_key] = json.loads(reference_json)
    try:
        mapped = apply_mapping(document, _operations(mapping_json))
    except MappingConflict as exc:
        return None, f"mapping: {exc}"
    return json.dumps(mapped, separators=(",", ":")), None


def enrich(
    events: DataFrame, reference: DataFrame, mapping: DataFrame, pipeline: EnricherPipeline
) -> DataFrame:
    """Parsed events with partition columns -> enriched rows and dead letters.

    `reference` has the reference table's fields and `reference_version`; `mapping` is one row
    (`mapping_version`, `mapping_json`, `mapping_problem`). Columns: the source fields, the
    reference fields but the key, `reference_version`, `lookup_hit`, `document`, `mapping_version`,
    `dead_letter_reason`, `raw` (null for enriched rows), then `route`, `event_date`, `event_hour`.
    """
    table = pipeline.reference
    source_fields = [f.name for f in pipeline.source.fields]
    reference_fields = [f.name for f in table.fields if f.name != table.key]
    valid = F.col(DEAD_LETTER_REASON).isNull()
    hit = F.col(_REFERENCE_KEY).isNotNull()
    keyed = reference.withColumnRenamed(table.key, _REFERENCE_KEY)
    joined = events.join(
        F.broadcast(keyed), valid & (F.col(pipeline.join_field) == F.col(_REFERENCE_KEY)), "left"
    ).crossJoin(F.broadcast(mapping))
    udf = F.udf(map_document, _MAPPED_SCHEMA, useArrow=False)
    reference_json = F.when(hit, F.to_json(F.struct(*reference_fields)))
    mapped = joined.withColumn(
        _MAPPED,
        F.when(valid, udf(F.col(RAW), reference_json, F.lit(pipeline.document_key), F.col(MAPPING_JSON))),
    )
    reason = F.coalesce(F.col(DEAD_LETTER_REASON), F.col(f"{_MAPPED}.problem"))
    enriched = reason.isNull()

    def when_enriched(column: Column) -> Column:
        return F.when(enriched, column)

    rows = mapped.select(
        *source_fields,
        *[when_enriched(F.col(name)).alias(name) for name in reference_fields],
        when_enriched(F.col(REFERENCE_VERSION)).alias(REFERENCE_VERSION),
        when_enriched(hit).alias(LOOKUP_HIT),
        when_enriched(F.col(f"{_MAPPED}.{DOCUMENT}")).alias(DOCUMENT),
        when_enriched(F.col(MAPPING_VERSION)).alias(MAPPING_VERSION),
        reason.alias(DEAD_LETTER_REASON),
        F.when(~enriched, F.col(RAW)).alias(RAW),
        F.when(enriched, F.lit(ENRICHED_ROUTE)).otherwise(F.lit(DEAD_LETTER_ROUTE)).alias(ROUTE),
        EVENT_DATE,
        EVENT_HOUR,
        F.col(MAPPING_PROBLEM),
    )
    observed = rows.observe(
        OBSERVATION,
        F.max(MAPPING_PROBLEM).alias(MAPPING_PROBLEM),
        F.max(MAPPING_VERSION).alias(MAPPING_VERSION),
        F.max(REFERENCE_VERSION).alias(REFERENCE_VERSION),
        F.count_if(F.col(LOOKUP_HIT) == F.lit(False)).alias("lookup_misses"),
    )
    return observed.drop(MAPPING_PROBLEM)
