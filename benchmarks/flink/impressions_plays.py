"""The impressions_plays job's Flink SQL: the same left outer join within the window, as an interval join.

`jobs.impressions_plays.transform` as Flink SQL, one INSERT:

* each source is a raw-lines table with its event time as a time attribute (watermarked by more
  than the whole input, see `landing_sql.WATERMARK_DELAY_SECONDS`: the end of the input emits
  the unconverted impressions Spark emits as its watermark passes them); the valid rows are
  deduplicated by their id keeping the first row read (ROW_NUMBER over processing time, Flink's
  append-only deduplication; the Spark job also keeps the first copy);
* an interval LEFT JOIN on profile and title with `play_time BETWEEN impression_time AND
  impression_time + window` (both ends inclusive, as in the job): a row per (impression, play)
  pair, and the impression with null play columns once the watermark passes its window;
* the malformed lines of both sources as `outcome=dead_letter`.

The Spark job computes the join as a keyed co-process function per hash bucket (pandas), not as
Spark's stream-stream join; the rows are the same. Nothing in the benchmark input is late, so the
job's `late` output stays empty and is not compared.

Differences in state, not in rows: Flink keeps every deduplicated id, impression and play until
the end of the input, where Spark drops them as its watermark passes them.
"""

from __future__ import annotations

from pathlib import Path

from benchmarks.flink.landing_sql import ROWTIME, event_source_table, interval, parsed_view, sink_table
from ops.spec.job import JobSpec
from ops.spec.pipelines import DEAD_LETTER_ROUTE, ImpressionsPlaysPipeline

PARTITIONS = ("outcome", "event_date", "event_hour")


def _deduplicated(view: str, source_view: str, id_column: str, columns: str) -> str:
    return (
        f"CREATE TEMPORARY VIEW {view} AS SELECT {columns} FROM ("
        f"SELECT *, ROW_NUMBER() OVER (PARTITION BY {id_column} ORDER BY _pt ASC) AS _n "
        f"FROM {source_view} WHERE dead_letter_reason IS NULL) WHERE _n = 1"
    )


def statements(spec: JobSpec, landing_root: Path, out_dir: Path) -> list[str]:
    """DDL, then the INSERT that writes conversions, unconverted impressions and dead letters."""
    pipeline = spec.pipeline
    assert isinstance(pipeline, ImpressionsPlaysPipeline)
    ddl: list[str] = []
    for name, source in pipeline.inputs.items():
        ddl.append(event_source_table(f"{name}_lines", landing_root / source.path, source, proctime=True))
        ddl += parsed_view(name, f"{name}_lines", source, keep=(ROWTIME, "_pt"))
    ddl.append(
        _deduplicated(
            "left_side", "impressions", "impression_id", f"impression_id, profile_id, title_id, {ROWTIME}"
        )
    )
    ddl.append(_deduplicated("right_side", "plays", "play_id", f"play_id, profile_id, title_id, {ROWTIME}"))
    sink_columns = [
        ("outcome", "STRING"),
        ("impression_id", "STRING"),
        ("profile_id", "STRING"),
        ("title_id", "STRING"),
        ("impression_time", "TIMESTAMP(3)"),
        ("play_id", "STRING"),
        ("play_time", "TIMESTAMP(3)"),
        ("source", "STRING"),
        ("dead_letter_reason", "STRING"),
        ("raw", "STRING"),
        ("event_date", "STRING"),
        ("event_hour", "INT"),
    ]
    window = pipeline.conversion_window_seconds
    joined = (
        "SELECT CASE WHEN p.play_id IS NULL THEN 'unconverted' ELSE 'conversion' END, i.impression_id, "
        f"i.profile_id, i.title_id, CAST(i.{ROWTIME} AS TIMESTAMP(3)), "
        f"p.play_id, CAST(p.{ROWTIME} AS TIMESTAMP(3)), "
        "CAST(NULL AS STRING), CAST(NULL AS STRING), CAST(NULL AS STRING), "
        f"CAST(CAST(i.{ROWTIME} AS DATE) AS STRING), CAST(HOUR(i.{ROWTIME}) AS INT) "
        "FROM left_side AS i LEFT JOIN right_side AS p "
        "ON i.profile_id = p.profile_id AND i.title_id = p.title_id "
        f"AND p.{ROWTIME} BETWEEN i.{ROWTIME} AND i.{ROWTIME} + {interval(window)}"
    )
    dead = [
        f"SELECT '{DEAD_LETTER_ROUTE}', CAST(NULL AS STRING), CAST(NULL AS STRING), CAST(NULL AS STRING), "
        "CAST(NULL AS TIMESTAMP(3)), CAST(NULL AS STRING), CAST(NULL AS TIMESTAMP(3)), "
        f"'{name}', dead_letter_reason, `raw`, CAST(event_date AS STRING), event_hour "
        f"FROM {name} WHERE dead_letter_reason IS NOT NULL"
        for name in pipeline.inputs
    ]
    return [
        *ddl,
        sink_table("impressions_plays_sink", out_dir, sink_columns, PARTITIONS),
        f"INSERT INTO impressions_plays_sink {' UNION ALL '.join([joined, *dead])}",
    ]
