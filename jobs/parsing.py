"""Landing lines -> typed events: the parse every job shares, pure DataFrame -> DataFrame.

Landing files are newline-delimited JSON read with the `text` source and parsed here, once, by
`parse_events`, so a malformed line becomes a dead letter with a precise reason instead of
failing the batch or vanishing (which is what the `json` source's modes offer).

The `text` source keeps each line's bytes as they are; only converting them to a Java string
(which `from_json` does) replaces invalid UTF-8 with U+FFFD. So the parse checks the bytes first
(`is_valid_utf8`, a native scan) and dead-letters a line that is not UTF-8 before anything reads
it, with the line's bytes in base64 as its `raw`: every column the parse writes is valid UTF-8, so
every Parquet reader can read the sinks, and nothing of the line is lost. The base64 is one unbroken
line whatever `spark.sql.chunkBase64String.enabled` says, so strict decoders accept it.

A leading UTF-8 byte-order mark (Windows producers write one) is not part of the JSON: the parse
reads the line after it, and `raw` keeps the line as it came. A blank line (empty, or only JSON
whitespace) is neither an event nor a dead letter: the parse drops it and counts it
(`BLANK_LINES`). A line nested deeper than the JSON parser's limit (`MAX_JSON_DEPTH`) is a dead
letter that says so, told from invalid JSON by a second parse with no limit for the rows the first
refused.

Each object is parsed into a `map<string,string>` (a value's JSON text by key) rather than a
struct: the map keeps every occurrence of a key, so a duplicate key is seen in the one parse. The
last occurrence is the value, as with JavaScript's `JSON.parse`, Python's `json` and Spark's own
struct parse, which gives it for the rare object with a duplicate key. A field's `path` reads
nested objects: each object on a path is parsed from its parent's text in turn.

Valid rows take the short way: each field's text is converted once, a row is valid when a few
null checks on those values hold (`_field_is_valid`), and only the other rows work out their
dead-letter reason (a CASE branch runs only for the rows that take it), so nothing builds strings
for a good row. No Python runs per row.

Cost (JVM CPU seconds over 400K router events, text read + parse, noop sink, median of 5, load
5-7, 2026-11-24): 2.96 s with every row's reason built, 2.72 s with the reason for invalid rows
only; the map parse with the duplicate check and the conversions alone is 2.40 s, a struct parse of
the same fields 2.14 s (but it cannot see duplicate keys), Spark's `json` source with the typed
schema 0.94 s (but it keeps neither the raw line of a row that parses nor the bytes of a line
that is not UTF-8). So most of the gap to the `json` source is `from_json` itself.
"""

from __future__ import annotations

from collections.abc import Iterable

from pyspark.errors import PySparkException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ops.driver.listener import BLANK_LINES, DUPLICATE_KEY_LINES
from ops.spec.pipelines import DEAD_LETTER_REASON, EVENT_DATE, EVENT_HOUR, FieldType, FileSource, SourceField

RAW = "raw"
# Landing files appear under a temporary name and are renamed to *.json once complete.
LANDING_GLOB = "*.json"

INVALID_UTF8 = "invalid UTF-8 (raw holds the line's bytes in base64)"
INVALID_JSON = "invalid JSON"
# The nesting depth `from_json` parses to: Jackson's default `StreamReadConstraints`, which Spark
# keeps unless a `maxNestingDepth` option says otherwise.
MAX_JSON_DEPTH = 1000
NESTED_TOO_DEEP = f"JSON nested deeper than {MAX_JSON_DEPTH} levels (the parser's limit)"

BYTE_ORDER_MARK = "\ufeff"
# JSON's whitespace (RFC 8259) that can be in a line: the line reader splits at "\n".
JSON_WHITESPACE = " \t\r"

SPARK_TYPES: dict[FieldType, T.DataType] = {
    "string": T.StringType(),
    "long": T.LongType(),
    "double": T.DoubleType(),
    "boolean": T.BooleanType(),
    "timestamp": T.TimestampType(),
}

# Microseconds per unit of each epoch format.
EPOCH_UNITS = {"epoch_seconds": 1_000_000, "epoch_millis": 1_000, "epoch_micros": 1}
# Spark's timestamp range, 0001-01-01 to 9999-12-31 UTC, in epoch microseconds: a number outside it
# does not parse (Spark would fail the batch on an overflow).
MIN_MICROS = -62_135_596_800_000_000
MAX_MICROS = 253_402_300_799_999_999
# Epoch text is read as a decimal: integers or fractions, in plain or exponent notation.
_EPOCH_DECIMAL = T.DecimalType(38, 9)

_OBJECT_MAP = T.MapType(T.StringType(), T.StringType())
_VALUE = "value"
_VALID_UTF8 = "_valid_utf8"
_LINE = "_line"
_BLANK = "_blank"
_VALID = "_valid"
# The depth probe's corrupt-record column: set when a line does not parse even with no depth limit.
_UNPARSED = "_streamwarden_unparsed"
_DEPTH_PROBE = T.StructType([T.StructField(_UNPARSED, T.StringType())])
_DEPTH_PROBE_OPTIONS = {"maxNestingDepth": str(2**31 - 1), "columnNameOfCorruptRecord": _UNPARSED}

ObjectPath = tuple[str, ...]


def parse_events(raw: DataFrame, source: FileSource, observe_as: str | None = None) -> DataFrame:
    """Raw JSON lines -> one typed column per source field, plus `dead_letter_reason` and `raw`.

    Each line is parsed once, with every value read as text, and each field's text is then
    converted to its declared type without failing the batch (ANSI mode). The reason is null for a
    good row; otherwise `INVALID_UTF8`, `NESTED_TOO_DEEP`, "invalid JSON", or the field problems
    joined by "; ", each quoting the field: "missing required field 'user_id'", "field 'amount':
    cannot parse 'abc' as double", "field 'device_id': 'device' is not an object". `raw` is the
    line, except for a line that is not UTF-8: its bytes in base64, unchunked. The fields of such a
    line and of one that is not a JSON object are null. A leading byte-order mark is skipped; a
    blank line gives no row.

    With `observe_as`, the number of lines in which an object the source reads has a key more
    than once (`DUPLICATE_KEY_LINES`) and the number of blank lines (`BLANK_LINES`) are observed
    under that name, for the driver's metrics.
    """
    columns = _ParseColumns(source)
    value = F.col(_VALUE)
    utf8_lines = raw.select(value, F.is_valid_utf8(value).alias(_VALID_UTF8))
    # A line that is not UTF-8 is not parsed: its text would hold replacement characters.
    lines = utf8_lines.select(
        value, F.col(_VALID_UTF8), F.when(F.col(_VALID_UTF8), _without_byte_order_mark(value)).alias(_LINE)
    )
    line = F.col(_LINE)
    parsed = lines.select(
        F.coalesce(F.when(F.col(_VALID_UTF8), value), _unchunked_base64(value)).alias(RAW),
        F.col(_VALID_UTF8),
        line,
        _is_blank(line).alias(_BLANK),
        *columns.parse_object((), line),
    )
    # One level deeper at a time: the text of each path, then the objects among them, parsed from it.
    for depth in range(1, columns.depth + 1):
        paths = [path for path in columns.text if len(path) == depth]
        objects = [path for path in paths if path in columns.is_object]
        parsed = parsed.withColumns({columns.text[path]: columns.text_in_parent(path) for path in paths})
        nested = [
            column for path in objects for column in columns.parse_object(path, F.col(columns.text[path]))
        ]
        parsed = parsed.select("*", *nested)
    duplicate_keys = F.lit(False)
    for flag in columns.duplicates.values():
        duplicate_keys = duplicate_keys | F.col(flag)
    if observe_as is not None:
        parsed = parsed.observe(
            observe_as,
            F.count_if(duplicate_keys).alias(DUPLICATE_KEY_LINES),
            F.count_if(F.col(_BLANK)).alias(BLANK_LINES),
        )
    parsed = parsed.where(~F.col(_BLANK))

    # Each field's value, converted once: the valid check and the output read the same column.
    parsed = parsed.withColumns(
        {columns.typed[field.name]: _typed(columns.text_of(field), field) for field in source.fields}
    )
    valid = F.col(_VALID_UTF8) & F.col(columns.is_object[()])
    for field in source.fields:
        valid = valid & _field_is_valid(field, columns)
    parsed = parsed.withColumn(_VALID, valid)
    # The reason is worked out only for the rows that are not valid: a CASE branch is evaluated only
    # for the rows that take it, so a valid row pays a few null checks and no string building.
    problems = [_field_problem(field, columns) for field in source.fields]
    reason = (
        F.when(F.col(_VALID), F.lit(None).cast("string"))
        .when(~F.col(_VALID_UTF8), F.lit(INVALID_UTF8))
        .when(~F.col(columns.is_object[()]), _not_an_object_reason(line))
        .otherwise(F.concat_ws("; ", *problems))
    )
    typed = [F.col(columns.typed[field.name]).alias(field.name) for field in source.fields]
    return parsed.select(*typed, reason.alias(DEAD_LETTER_REASON), RAW)


class _ParseColumns:
    """Names of the intermediate columns of one source's parse.

    `text` has every path the fields read or read through (the JSON text found there);
    `is_object`, `duplicates` and `values` every object read from, the line itself being `()`.
    """

    def __init__(self, source: FileSource) -> None:
        field_paths = [field.json_path for field in source.fields]
        objects = dict.fromkeys(path[:end] for path in field_paths for end in range(len(path)))
        paths = dict.fromkeys(sorted({*objects, *field_paths} - {()}, key=len))
        self.is_object = {path: f"_is_object_{index}" for index, path in enumerate(objects)}
        self.duplicates = {path: f"_duplicate_keys_{index}" for index, path in enumerate(objects)}
        self.values = {path: f"_values_{index}" for index, path in enumerate(objects)}
        self.text = {path: f"_text_{index}" for index, path in enumerate(paths)}
        self.typed = {field.name: f"_typed_{index}" for index, field in enumerate(source.fields)}
        self.depth = max(len(path) for path in field_paths)
        # The keys read in each object.
        self.keys: dict[ObjectPath, list[str]] = {path: [] for path in objects}
        for path in paths:
            self.keys[path[:-1]].append(path[-1])

    def text_of(self, field: SourceField) -> Column:
        return F.col(self.text[field.json_path])

    def parse_object(self, path: ObjectPath, text: Column) -> list[Column]:
        """The object at `path` parsed from its JSON `text`: the map, whether it has a duplicate
        key, and a struct of the text of each key read in it (the last occurrence).

        A map lookup finds a key's first occurrence. For an object with a duplicate key, the
        struct comes from a second parse into a struct of the keys read, which keeps the last
        value; a CASE branch is evaluated only for the rows that take it, so that parse runs for
        the rare duplicate only. (The three are one projection: Spark parses the map once.)
        """
        keys = self.keys[path]
        object_map = F.from_json(text, _OBJECT_MAP)
        duplicates = _has_duplicate_keys(object_map)
        first_values = F.struct(*[F.element_at(object_map, F.lit(key)).alias(key) for key in keys])
        values = F.when(duplicates, F.from_json(text, _text_struct(keys)))
        return [
            object_map.isNotNull().alias(self.is_object[path]),
            duplicates.alias(self.duplicates[path]),
            values.otherwise(first_values).alias(self.values[path]),
        ]

    def text_in_parent(self, path: ObjectPath) -> Column:
        """The JSON text of `path` in its parent object (its last occurrence), or null when absent."""
        return F.col(self.values[path[:-1]]).getField(path[-1])


def _without_byte_order_mark(line: Column) -> Column:
    """The line without a leading byte-order mark (only the lines with one pay for the copy)."""
    return F.when(line.startswith(BYTE_ORDER_MARK), F.substr(line, F.lit(2))).otherwise(line)


def _is_blank(line: Column) -> Column:
    """Whether a line is empty or only JSON whitespace; false for a null line (not UTF-8).

    Nearly every line starts with "{", so only the others pay for the trim (which copies the line).
    """
    trimmed = F.btrim(line, F.lit(JSON_WHITESPACE))
    return F.coalesce(F.when(~line.startswith("{"), trimmed == F.lit("")), F.lit(False))


def _unchunked_base64(value: Column) -> Column:
    """The bytes of `value` in base64 as one line.

    Spark's `base64` puts "\r\n" after every 76 characters while
    `spark.sql.chunkBase64String.enabled` is true (the default); removing them does not depend on
    every session setting that conf, and is the same text when it is off.
    """
    return F.replace(F.base64(value.cast("binary")), F.lit("\r\n"), F.lit(""))


def _not_an_object_reason(line: Column) -> Column:
    """Why a UTF-8 line the parse refused is not an object: `NESTED_TOO_DEEP` when it parses as
    one with no depth limit, else `INVALID_JSON`.

    The probe reads no key (only the corrupt-record column), so no value's text is copied: Spark
    copies it with a JSON generator, which has the same depth limit. It runs only for the refused
    lines, the CASE branch that calls this.
    """
    probe = F.from_json(line, _DEPTH_PROBE, _DEPTH_PROBE_OPTIONS)
    parses = probe.isNotNull() & probe.getField(_UNPARSED).isNull()
    return F.when(parses, F.lit(NESTED_TOO_DEEP)).otherwise(F.lit(INVALID_JSON))


def _text_struct(keys: Iterable[str]) -> T.StructType:
    return T.StructType([T.StructField(key, T.StringType()) for key in keys])


def _has_duplicate_keys(object_map: Column) -> Column:
    """Whether a parsed object has a key more than once (false for a missing object)."""
    keys = F.map_keys(object_map)
    return F.coalesce(F.size(keys) != F.size(F.array_distinct(keys)), F.lit(False))


def _typed(text: Column, field: SourceField) -> Column:
    """The field's text converted to its type; null when it is null or does not parse."""
    if field.type == "string":
        return text
    if field.type != "timestamp" or field.time_format == "iso8601":
        return text.try_cast(SPARK_TYPES[field.type])
    if field.time_format in EPOCH_UNITS:
        micros = text.try_cast(_EPOCH_DECIMAL) * F.lit(EPOCH_UNITS[field.time_format])
        in_range = micros.between(F.lit(MIN_MICROS), F.lit(MAX_MICROS))
        # Digits below a microsecond are dropped, as Spark's own timestamp casts do.
        return F.when(in_range, F.timestamp_micros(micros.cast("long")))
    return F.try_to_timestamp(text, F.lit(field.time_format))


def _type_name(field: SourceField) -> str:
    """The type as problems name it: "timestamp (epoch_millis)" for a format other than ISO 8601."""
    if field.type == "timestamp" and field.time_format != "iso8601":
        return f"timestamp ({field.time_format})"
    return field.type


def _field_is_valid(field: SourceField, columns: _ParseColumns) -> Column:
    """Whether one field of a parsed row has no problem: `_field_problem` is null, without the text.

    Only null checks and booleans: this runs for every row, the problem's message for the others.
    """
    path = field.json_path
    text = columns.text_of(field)
    valid = F.lit(True)
    for end in range(1, len(path)):
        outer = path[:end]
        valid = valid & (F.col(columns.text[outer]).isNull() | F.col(columns.is_object[outer]))
    if field.required:
        valid = valid & text.isNotNull()
    if field.type != "string":
        valid = valid & (text.isNull() | F.col(columns.typed[field.name]).isNotNull())
    return valid


def _field_problem(field: SourceField, columns: _ParseColumns) -> Column:
    """What is wrong with one field of a parsed row, or null."""
    path = field.json_path
    text = columns.text_of(field)
    at = f" at '{'.'.join(path)}'" if path != (field.name,) else ""
    problems = []
    # An object on the path that is there but is not an object (a string, a number, an array).
    for end in range(1, len(path)):
        outer = path[:end]
        not_object = F.col(columns.text[outer]).isNotNull() & ~F.col(columns.is_object[outer])
        message = f"field '{field.name}': '{'.'.join(outer)}' is not an object"
        problems.append(F.when(not_object, F.lit(message)))
    if field.required:
        problems.append(F.when(text.isNull(), F.lit(f"missing required field '{field.name}'{at}")))
    if field.type != "string":
        unparsable = text.isNotNull() & F.col(columns.typed[field.name]).isNull()
        message_parts = [
            F.lit(f"field '{field.name}': cannot parse '"),
            text,
            F.lit(f"' as {_type_name(field)}"),
        ]
        problems.append(F.when(unparsable, F.concat(*message_parts)))
    # The first problem only: a field is either under a non-object, missing, or unparsable.
    return F.coalesce(*problems) if problems else F.lit(None).cast("string")


def invalid_time_formats(spark: SparkSession, source: FileSource) -> dict[int, str]:
    """Datetime patterns of the source's fields that Spark refuses, by field index -> why.

    Spark checks a pattern only when it first parses with it, so a bad one would fail every batch;
    this parses one literal with each pattern (on the driver, by constant folding) before the
    query starts.
    """
    problems: dict[int, str] = {}
    for index, field in enumerate(source.fields):
        if field.type != "timestamp" or field.time_format in ("iso8601", *EPOCH_UNITS):
            continue
        try:
            spark.range(1).select(F.try_to_timestamp(F.lit("1970-01-01"), F.lit(field.time_format))).collect()
        except PySparkException as exc:
            problems[index] = str(exc).strip().splitlines()[0]
    return problems


def with_event_partitions(events: DataFrame, source: FileSource) -> DataFrame:
    """Add the `event_date` and `event_hour` partition columns from the source's event time (UTC).

    A row whose event time did not parse gets nulls (Spark's default partition on disk).
    """
    event_time = F.col(source.event_time_field)
    return events.withColumns({EVENT_DATE: F.to_date(event_time), EVENT_HOUR: F.hour(event_time)})
