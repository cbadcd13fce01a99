"""The sessionizer's closest Flink SQL: session windows with the same gap, and the same dead letters.

`jobs.sessionizer.transform` cuts a key's events into sessions by the inactivity gap AND by a cap
on session length (`max_session_minutes`), counts each event id once and routes late events to
`output=late`. Flink SQL's SESSION window has the gap only: no window TVF or group window can cut a
session at a maximum length (MATCH_RECOGNIZE could, but it is a different operator with its own
cost, and nothing like the Spark job). So this is the closest honest equivalent, one INSERT:

* `output=sessions`: a SESSION window TVF per key with the same gap over the union of the
  sources' valid events, with `event_count` = COUNT(DISTINCT event_id) (the job counts an id
  once), `event_types` = LISTAGG(DISTINCT ...) (Spark: a sorted array), `session_end` = the last
  event + gap (= the window end), `closed_by` = 'gap';
* `output=dead_letter`: the malformed lines, as the job writes them;
* no `output=late`: the window drops late events silently (the benchmark input has none).

Flink's watermark trails each source by more than the whole input (`WATERMARK_DELAY_SECONDS` in
`landing_sql`: its file source does not read files in event-time order), so no event is late and
the end of the input closes every session; the job's watermark policy and lateness have no
counterpart here, and the benchmark input has no late event for either side.

The comparison is fair only while the cap never applies: `flink_compare` writes the sessionizer
input as 3-hour bursts an hour apart (`Scenario.period`), so every session, the bot's too, ends by
the gap before reaching the 4-hour cap, and both sides must write the same number of sessions per
day (the fairness check fails otherwise).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from benchmarks.flink.landing_sql import (
    ROWTIME,
    event_source_table,
    ident,
    interval,
    json_parsed_view,
    json_source_table,
    parsed_view,
    sink_table,
)
from ops.spec.job import JobSpec
from ops.spec.pipelines import DEAD_LETTER_ROUTE, FileSource, SessionizerPipeline

PARTITIONS = ("output", "event_date")


# (source name, its landing directory, the source) -> DDL of a view named after the source: its
# typed fields with the time attribute `_rt`, `dead_letter_reason`, `raw` and `event_date`.
SourceParse = Callable[[str, Path, FileSource], list[str]]


def _json_value_parse(name: str, landing_dir: Path, source: FileSource) -> list[str]:
    """Each line read raw, each field extracted with `JSON_VALUE`: every dead letter, raw line kept."""
    return [
        event_source_table(f"{name}_lines", landing_dir, source),
        *parsed_view(name, f"{name}_lines", source, keep=(ROWTIME,)),
    ]


def _json_format_parse(name: str, landing_dir: Path, source: FileSource) -> list[str]:
    """Each line parsed once by the `json` format: lines that are not JSON dropped, no raw line."""
    return [
        json_source_table(f"{name}_json", landing_dir, source, rowtime=True),
        json_parsed_view(name, f"{name}_json", source, keep=(ROWTIME,)),
    ]


def statements(spec: JobSpec, landing_root: Path, out_dir: Path) -> list[str]:
    """DDL, then the INSERT that writes the sessions and dead letters to `out_dir`."""
    return _statements(spec, landing_root, out_dir, _json_value_parse)


def json_statements(spec: JobSpec, landing_root: Path, out_dir: Path) -> list[str]:
    """`statements` with the sources read by the `json` format: Flink's strongest fair parse.

    Its dead letters are only the lines with a field problem, without their raw line, so
    `flink_compare` leaves `output=dead_letter` out of the row check (Spark still writes them all).
    """
    return _statements(spec, landing_root, out_dir, _json_format_parse)


def _statements(spec: JobSpec, landing_root: Path, out_dir: Path, parse: SourceParse) -> list[str]:
    pipeline = spec.pipeline
    assert isinstance(pipeline, SessionizerPipeline)
    gap = round(pipeline.gap_minutes * 60)
    keys = ", ".join(ident(name) for name in pipeline.key_fields)
    event_id, event_type = ident(pipeline.event_id_field), ident(pipeline.event_type_field)
    common = f"{keys}, {event_id} AS event_id, {event_type} AS event_type"
    ddl: list[str] = []
    branches = []
    for name, source in pipeline.sources.items():
        ddl += parse(name, landing_root / source.path, source)
        branches.append(
            f"SELECT {ROWTIME}, {common}, '{name}' AS source, dead_letter_reason, `raw`, event_date "
            f"FROM {name}"
        )
    ddl.append(f"CREATE TEMPORARY VIEW events AS {' UNION ALL '.join(branches)}")
    key_columns = [(name, "STRING") for name in pipeline.key_fields]
    sink_columns = [
        ("output", "STRING"),
        *key_columns,
        ("session_start", "TIMESTAMP(3)"),
        ("session_end", "TIMESTAMP(3)"),
        ("last_event_time", "TIMESTAMP(3)"),
        ("event_count", "BIGINT"),
        ("event_types", "STRING"),
        ("closed_by", "STRING"),
        ("source", "STRING"),
        ("dead_letter_reason", "STRING"),
        ("raw", "STRING"),
        ("event_date", "STRING"),
    ]
    sessions = (
        f"SELECT 'sessions', {keys}, window_start, window_end, MAX({ROWTIME}), COUNT(DISTINCT event_id), "
        "LISTAGG(DISTINCT event_type), 'gap', CAST(NULL AS STRING), CAST(NULL AS STRING), "
        "CAST(NULL AS STRING), CAST(CAST(window_start AS DATE) AS STRING) "
        f"FROM TABLE(SESSION(TABLE valid_events PARTITION BY {keys}, DESCRIPTOR({ROWTIME}), "
        f"{interval(gap)})) GROUP BY {keys}, window_start, window_end"
    )
    nulls = ", ".join(["CAST(NULL AS STRING)"] * len(pipeline.key_fields))
    dead = (
        f"SELECT '{DEAD_LETTER_ROUTE}', {nulls}, CAST(NULL AS TIMESTAMP(3)), CAST(NULL AS TIMESTAMP(3)), "
        "CAST(NULL AS TIMESTAMP(3)), CAST(NULL AS BIGINT), CAST(NULL AS STRING), CAST(NULL AS STRING), "
        "source, dead_letter_reason, `raw`, CAST(event_date AS STRING) "
        "FROM events WHERE dead_letter_reason IS NOT NULL"
    )
    return [
        *ddl,
        "CREATE TEMPORARY VIEW valid_events AS SELECT * FROM events WHERE dead_letter_reason IS NULL",
        sink_table("sessionizer_sink", out_dir, sink_columns, PARTITIONS),
        f"INSERT INTO sessionizer_sink {sessions} UNION ALL {dead}",
    ]


def naive_statements(spec: JobSpec, landing_root: Path, out_dir: Path) -> list[str]:
    """The counterpart of `benchmarks.naive_sessions`: a session-window COUNT(*) per key, sessions only."""
    pipeline = spec.pipeline
    assert isinstance(pipeline, SessionizerPipeline)
    gap = round(pipeline.gap_minutes * 60)
    keys = ", ".join(ident(name) for name in pipeline.key_fields)
    ddl: list[str] = []
    branches = []
    for name, source in pipeline.sources.items():
        ddl.append(event_source_table(f"{name}_lines", landing_root / source.path, source))
        ddl += parsed_view(name, f"{name}_lines", source, keep=(ROWTIME,))
        branches.append(f"SELECT {ROWTIME}, {keys} FROM {name} WHERE dead_letter_reason IS NULL")
    sink_columns = [
        ("output", "STRING"),
        *[(name, "STRING") for name in pipeline.key_fields],
        ("session_start", "TIMESTAMP(3)"),
        ("session_end", "TIMESTAMP(3)"),
        ("event_count", "BIGINT"),
        ("event_date", "STRING"),
    ]
    return [
        *ddl,
        f"CREATE TEMPORARY VIEW valid_events AS {' UNION ALL '.join(branches)}",
        sink_table("sessions_sink", out_dir, sink_columns, PARTITIONS),
        f"INSERT INTO sessions_sink SELECT 'sessions', {keys}, window_start, window_end, COUNT(*), "
        "CAST(CAST(window_start AS DATE) AS STRING) "
        f"FROM TABLE(SESSION(TABLE valid_events PARTITION BY {keys}, DESCRIPTOR({ROWTIME}), "
        f"{interval(gap)})) GROUP BY {keys}, window_start, window_end",
    ]
