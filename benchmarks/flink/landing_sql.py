"""Flink SQL for what every Streamwarden job shares: landing files in, a partitioned file sink out.

`parsed_view` is the Flink counterpart of `jobs.runtime.parse_events` plus
`jobs.runtime.with_event_partitions`, so a job's Flink SQL starts from the same rows as its Spark
transform: the file is read with the `raw` format (one row per line, as Spark's `text` source
does), each field is extracted as text with `JSON_VALUE` and cast like Spark's `try_cast`, and
`dead_letter_reason` carries the same texts ("invalid JSON", "missing required field 'x'",
"field 'x': cannot parse 'v' as double", joined by "; "). Differences, none of which the
generated input exercises:

* timestamps are parsed in the generator's one format (`2025-01-01T00:00:00.000Z`, UTC); Spark's
  cast also accepts other ISO forms;
* a field holding a JSON object or array is null here (`JSON_VALUE` returns scalars only) where
  Spark keeps its JSON text;
* hidden files (`.name`, `_name`) are skipped, which covers the generator's temporary files;
  Spark's source reads `*.json` only.

The sink is the `filesystem` connector with the `csv` format: the PyPI package ships `flink-csv`
and `flink-json` but not the Parquet format jar, and no Maven repository is reachable here. So
Flink writes uncompressed CSV where Spark writes Snappy Parquet (see benchmarks/RESULTS.md for
what that costs Spark). Partition directories are named as Spark names them, with Hive's default
partition name for a null value.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ops.spec.pipelines import FieldType, FileSource

# Spark's name for the partition of a null value; Flink's default differs.
DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"
FLINK_TYPES: dict[FieldType, str] = {
    "string": "STRING",
    "long": "BIGINT",
    "double": "DOUBLE",
    "boolean": "BOOLEAN",
    "timestamp": "TIMESTAMP(3)",
}
# The generator's event-time format (synthetic.generator._format_time), as a Java date pattern.
TIMESTAMP_PATTERN = "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'"


def quote(text: str) -> str:
    """A SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def ident(name: str) -> str:
    """A quoted identifier: field names such as `raw`, `value` or `timestamp` are Flink keywords."""
    return f"`{name}`"


def interval(seconds: int) -> str:
    """A SQL interval of whole seconds (a bare SECOND field holds at most 99)."""
    days, rest = divmod(seconds, 86_400)
    return f"INTERVAL '{days} {rest // 3600:02d}:{rest // 60 % 60:02d}:{rest % 60:02d}' DAY TO SECOND"


def source_table(table: str, landing_dir: Path) -> str:
    """DDL of a landing directory as a table of raw lines (`line STRING`)."""
    return (
        f"CREATE TEMPORARY TABLE {table} (line STRING) WITH ("
        f"'connector' = 'filesystem', 'path' = {quote(str(landing_dir))}, 'format' = 'raw')"
    )


# The watermark delay of every event source table. Flink's file source hands the files to its
# readers in listing order, not in modification (event-time) order, so a watermark that trails
# the newest event by the job's lateness makes whole files late (dropped by windows and joins,
# which then split sessions and miss joins). A delay longer than the whole input (the flush
# included) keeps every event on time; the end of the input then fires every window and join.
# The rows are the same; Flink keeps more in state until the end than with the job's lateness.
WATERMARK_DELAY_SECONDS = 40 * 24 * 3600
# The event-time attribute of an event source table (`event_source_table`).
ROWTIME = "_rt"
# A line whose event time does not parse gets this one: a watermark never goes back, so it moves
# nothing, and its row is a dead letter that only stateless queries use.
_NO_TIME = "TIMESTAMP '1970-01-01 00:00:00'"


def event_source_table(table: str, landing_dir: Path, source: FileSource, proctime: bool = False) -> str:
    """DDL of a landing directory of raw lines with the event time as a watermarked time attribute.

    `_rt` is the source's event time (parsed from the line), the watermark trails it by
    `WATERMARK_DELAY_SECONDS`; `_pt` (with `proctime`) the processing time.
    """
    text = f"JSON_VALUE(line, {quote('$.' + source.event_time_field)})"
    event_time = f"TO_TIMESTAMP({text}, {quote(TIMESTAMP_PATTERN)})"
    proctime_column = ", _pt AS PROCTIME()" if proctime else ""
    return (
        f"CREATE TEMPORARY TABLE {table} (line STRING, {ROWTIME} AS COALESCE({event_time}, {_NO_TIME})"
        f"{proctime_column}, WATERMARK FOR {ROWTIME} AS {ROWTIME} - {interval(WATERMARK_DELAY_SECONDS)}) "
        f"WITH ('connector' = 'filesystem', 'path' = {quote(str(landing_dir))}, 'format' = 'raw')"
    )


def json_source_table(table: str, landing_dir: Path, source: FileSource, rowtime: bool = False) -> str:
    """DDL of a landing directory read by Flink's `json` format, every source field declared STRING.

    The strongest fair way for Flink to read the lines: the format parses each line once and hands
    over each field's text (`json_parsed_view` converts and checks them). What it cannot do, and so
    does not pay for: a line that is not JSON is dropped (`json.ignore-parse-errors`), not kept as
    a dead letter, and no row has its raw line. Fields the source does not declare are skipped by
    the parser, as in Spark's struct parse; duplicate keys are not seen (Streamwarden counts them).
    With `rowtime`, `_rt` is the event time as a watermarked time attribute, as in
    `event_source_table`.
    """
    declared = ", ".join(f"{ident(f.name)} STRING" for f in source.fields)
    if rowtime:
        event_time = f"TO_TIMESTAMP({ident(source.event_time_field)}, {quote(TIMESTAMP_PATTERN)})"
        declared += (
            f", {ROWTIME} AS COALESCE({event_time}, {_NO_TIME}), "
            f"WATERMARK FOR {ROWTIME} AS {ROWTIME} - {interval(WATERMARK_DELAY_SECONDS)}"
        )
    return (
        f"CREATE TEMPORARY TABLE {table} ({declared}) WITH ('connector' = 'filesystem', "
        f"'path' = {quote(str(landing_dir))}, 'format' = 'json', "
        "'json.ignore-parse-errors' = 'true', 'json.fail-on-missing-field' = 'false')"
    )


def json_parsed_view(view: str, table: str, source: FileSource, keep: Sequence[str] = ()) -> str:
    """DDL of `view` over a `json_source_table`: what `parsed_view` gives, from the format's texts.

    The same conversions and reasons for a field's problems; no "invalid JSON" reason (the format
    dropped those lines) and `raw` is NULL.
    """
    kept = "".join(f"{column}, " for column in keep)
    texts = ", ".join(f"{ident(f.name)} AS _t_{f.name}" for f in source.fields)
    problems = ", ".join(_problem(f.name, f.type, f.required) for f in source.fields)
    typed = ", ".join(f"{_typed(f.name, f.type)} AS {ident(f.name)}" for f in source.fields)
    reason = f"CASE WHEN COALESCE({problems}) IS NOT NULL THEN CONCAT_WS('; ', {problems}) END"
    event_time = _typed(source.event_time_field, "timestamp")
    return (
        f"CREATE TEMPORARY VIEW {view} AS SELECT {kept}{typed}, {reason} AS dead_letter_reason, "
        f"CAST(NULL AS STRING) AS `raw`, CAST({event_time} AS DATE) AS event_date, "
        f"CAST(HOUR({event_time}) AS INT) AS event_hour FROM (SELECT {kept}{texts} FROM {table})"
    )


def _typed(name: str, field_type: FieldType) -> str:
    """The text of field `name` (column `_t_<name>`) cast to its type, null when it does not parse."""
    text = f"_t_{name}"
    if field_type == "string":
        return text
    if field_type == "timestamp":
        return f"TO_TIMESTAMP({text}, {quote(TIMESTAMP_PATTERN)})"
    return f"TRY_CAST({text} AS {FLINK_TYPES[field_type]})"


def _problem(name: str, field_type: FieldType, required: bool) -> str:
    """What is wrong with one field, or NULL: the same texts as `jobs.runtime._field_problem`."""
    text = f"_t_{name}"
    cases = []
    if required:
        missing = quote(f"missing required field '{name}'")
        cases.append(f"WHEN {text} IS NULL THEN {missing}")
    if field_type != "string":
        prefix, suffix = quote(f"field '{name}': cannot parse '"), quote(f"' as {field_type}")
        message = f"CONCAT({prefix}, {text}, {suffix})"
        cases.append(f"WHEN {text} IS NOT NULL AND {_typed(name, field_type)} IS NULL THEN {message}")
    return f"CASE {' '.join(cases)} END" if cases else "CAST(NULL AS STRING)"


def parsed_view(view: str, table: str, source: FileSource, keep: Sequence[str] = ()) -> list[str]:
    """DDL of `view`: the source's typed fields, `dead_letter_reason`, `raw`, `event_date`, `event_hour`.

    `keep` names columns of `table` passed through as they are (a time attribute stays one).
    """
    kept = "".join(f"{column}, " for column in keep)
    texts = ", ".join(f"JSON_VALUE(line, {quote('$.' + f.name)}) AS _t_{f.name}" for f in source.fields)
    problems = [_problem(f.name, f.type, f.required) for f in source.fields]
    typed = ", ".join(f"{_typed(f.name, f.type)} AS {ident(f.name)}" for f in source.fields)
    reason = (
        "CASE WHEN NOT _is_object THEN 'invalid JSON' "
        f"WHEN COALESCE({', '.join(problems)}) IS NOT NULL THEN CONCAT_WS('; ', {', '.join(problems)}) END"
    )
    event_time = f"{_typed(source.event_time_field, 'timestamp')}"
    return [
        f"CREATE TEMPORARY VIEW {view}_text AS "
        f"SELECT {kept}line, line IS JSON OBJECT AS _is_object, {texts} FROM {table}",
        f"CREATE TEMPORARY VIEW {view} AS SELECT {kept}{typed}, "
        f"{reason} AS dead_letter_reason, line AS `raw`, "
        f"CAST({event_time} AS DATE) AS event_date, CAST(HOUR({event_time}) AS INT) AS event_hour "
        f"FROM {view}_text",
    ]


def sink_table(
    table: str, out_dir: Path, columns: Sequence[tuple[str, str]], partitions: Sequence[str]
) -> str:
    """DDL of a partitioned CSV file sink; `columns` are (name, Flink type), partition columns included."""
    fields = ", ".join(f"{ident(name)} {flink_type}" for name, flink_type in columns)
    return (
        f"CREATE TEMPORARY TABLE {table} ({fields}) PARTITIONED BY ({', '.join(partitions)}) WITH ("
        f"'connector' = 'filesystem', 'path' = {quote(str(out_dir))}, 'format' = 'csv', "
        f"'partition.default-name' = {quote(DEFAULT_PARTITION)})"
    )
