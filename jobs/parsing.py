"""Landing lines -> typed events: the parse every job shares, pure DataFrame -> DataFrame.

Landing files are newline-delimited JSON read with the `text` source and parsed here, once, by
`parse_events`, so a malformed line becomes a dead letter with a precise reason instead of
failing the batch or vanishing (which is what the `json` source's modes offer).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ops.spec.pipelines import FieldType, FileSource

DEAD_LETTER_REASON = "dead_letter_reason"
RAW = "raw"
EVENT_DATE = "event_date"
EVENT_HOUR = "event_hour"
# Landing files appear under a temporary name and are renamed to *.json once complete.
LANDING_GLOB = "*.json"

SPARK_TYPES: dict[FieldType, T.DataType] = {
    "string": T.StringType(),
    "long": T.LongType(),
    "double": T.DoubleType(),
    "boolean": T.BooleanType(),
    "timestamp": T.TimestampType(),
}

_CORRUPT_RECORD = "_corrupt_record"
_JSON = "_json"


def parse_events(raw: DataFrame, source: FileSource) -> DataFrame:
    """Raw JSON lines -> one typed column per source field, plus `dead_letter_reason` and `raw`.

    Each line is parsed once, with every field read as text, and each field is then `try_cast` to
    its declared type, so a bad value is reported instead of failing the batch (ANSI mode). The
    reason is null for a good row; otherwise "invalid JSON", or the field problems joined by "; ",
    each quoting the field: "missing required field 'user_id'",
    "field 'amount': cannot parse 'abc' as double".
    """
    text_schema = T.StructType(
        [T.StructField(field.name, T.StringType()) for field in source.fields]
        + [T.StructField(_CORRUPT_RECORD, T.StringType())]
    )
    options = {"columnNameOfCorruptRecord": _CORRUPT_RECORD, "mode": "PERMISSIVE"}
    parsed = raw.select(F.col("value").alias(RAW), F.from_json("value", text_schema, options).alias(_JSON))
    # An empty line parses to a null struct; anything that is not a JSON object lands in the
    # corrupt-record column.
    invalid_json = F.col(_JSON).isNull() | F.col(f"{_JSON}.{_CORRUPT_RECORD}").isNotNull()
    problems = [_field_problem(field.name, field.type, field.required) for field in source.fields]
    reason = F.when(invalid_json, F.lit("invalid JSON")).when(
        F.coalesce(*problems).isNotNull(), F.concat_ws("; ", *problems)
    )
    typed = [
        F.col(f"{_JSON}.{field.name}").try_cast(SPARK_TYPES[field.type]).alias(field.name)
        for field in source.fields
    ]
    return parsed.select(*typed, reason.alias(DEAD_LETTER_REASON), RAW)


def _field_problem(name: str, field_type: FieldType, required: bool) -> Column:
    """What is wrong with one field of a parsed row, or null."""
    text = F.col(f"{_JSON}.{name}")
    problems = []
    if required:
        problems.append(F.when(text.isNull(), F.lit(f"missing required field '{name}'")))
    if field_type != "string":
        unparsable = text.isNotNull() & text.try_cast(SPARK_TYPES[field_type]).isNull()
        message = F.concat(F.lit(f"field '{name}': cannot parse '"), text, F.lit(f"' as {field_type}"))
        problems.append(F.when(unparsable, message))
    # At most one of the two holds: a field is either missing or present and unparsable.
    return F.coalesce(*problems) if problems else F.lit(None).cast("string")


def with_event_partitions(events: DataFrame, source: FileSource) -> DataFrame:
    """Add the `event_date` and `event_hour` partition columns from the source's event time (UTC).

    A row whose event time did not parse gets nulls (Spark's default partition on disk).
    """
    event_time = F.col(source.event_time_field)
    return events.withColumns({EVENT_DATE: F.to_date(event_time), EVENT_HOUR: F.hour(event_time)})
