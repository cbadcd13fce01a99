"""The campaign_uniques job's Flink SQL: the hourly exact uniques, the 24 h enrichment, dead letters.

`jobs.campaign_uniques.transform` as Flink SQL, one INSERT over the valid engagements (the shared
parse of `landing_sql`, event time watermarked by more than the whole input, so the end of the
input closes every window):

* `output=hourly_exact`: a TUMBLE window TVF of `hour_seconds` per campaign with
  COUNT(DISTINCT user_id), one row per campaign and hour (Spark: dropDuplicates, then a count);
* `output=enriched`: each engagement once (ROW_NUMBER per user and event id on processing time,
  the first copy kept, as the job's processor keeps the first pending copy), joined on
  user and window end to a HOP window TVF (slide `recent_slide_seconds`, size
  `recent_window_seconds`) with COUNT(DISTINCT campaign_id) per user. The window an engagement is
  reported in ends at the first slide boundary strictly after it: the end of its TUMBLE window of
  one slide. So `distinct_campaigns` counts the user's campaigns in `[end - window, end)`, the
  job's definition (its processor counts the accepted engagements there; copies do not change a
  distinct count). A regular join on (user, window end) rather than a window join: Flink's window
  join needs equal window starts as well, and the HOP and the TUMBLE windows share only the end;
* `output=dead_letter`: the malformed lines, as the job writes them.

Not computed, so not compared (`Comparison.uncompared_outputs`):

* `output=hourly_approx`: Spark's HyperLogLog++ with the spec's `approx_rsd`. Flink 2.3.0's
  APPROX_COUNT_DISTINCT is batch-only: in streaming mode (tried on a TUMBLE window TVF),
  the planner refuses it ("APPROX_COUNT_DISTINCT aggregate function does not support yet for
  streaming", checked), and no other built-in sketch exists. An exact COUNT(DISTINCT) in its place
  would be a second hourly_exact, not the same computation;
* `output=late`: Flink has no counterpart of the job's lateness decision (its windows
  drop late rows silently). The benchmark input has no late engagement, so Spark writes no `late`
  row either, and that partition is still checked: a Spark `late` row fails the comparison.

Differences in state, not in rows: Flink keeps every deduplicated id, event and window until the
end of the input (its watermark delay covers the input), where Spark evicts them as its watermark
passes them.
"""

from __future__ import annotations

from pathlib import Path

from benchmarks.flink.landing_sql import ROWTIME, event_source_table, ident, interval, parsed_view, sink_table
from ops.spec.job import JobSpec
from ops.spec.pipelines import DEAD_LETTER_ROUTE, CampaignUniquesPipeline

PARTITIONS = ("output", "event_date")
HOURLY_EXACT, HOURLY_APPROX, ENRICHED, LATE = "hourly_exact", "hourly_approx", "enriched", "late"
# The job's outputs this SQL does not compute (see the module docstring).
UNCOMPARED_OUTPUTS = frozenset({HOURLY_APPROX})
SINK_COLUMNS = [
    ("output", "STRING"),
    ("campaign_id", "STRING"),
    ("user_id", "STRING"),
    ("event_id", "STRING"),
    ("event_time", "TIMESTAMP(3)"),
    ("event_type", "STRING"),
    ("window_start", "TIMESTAMP(3)"),
    ("window_end", "TIMESTAMP(3)"),
    ("unique_users", "BIGINT"),
    ("distinct_campaigns", "BIGINT"),
    ("dead_letter_reason", "STRING"),
    ("raw", "STRING"),
    ("event_date", "STRING"),
]


def _select(values: dict[str, str], source: str) -> str:
    """A SELECT of every sink column in order: `values` by name, typed NULL for the others."""
    columns = [values.get(name, f"CAST(NULL AS {flink_type})") for name, flink_type in SINK_COLUMNS]
    return f"SELECT {', '.join(columns)} FROM {source}"


def statements(spec: JobSpec, landing_root: Path, out_dir: Path) -> list[str]:
    """DDL, then the INSERT that writes hourly_exact, enriched and dead-letter rows to `out_dir`."""
    pipeline = spec.pipeline
    assert isinstance(pipeline, CampaignUniquesPipeline)
    source = pipeline.source
    has_event_type = any(field.name == "event_type" for field in source.fields)
    event_type = ident("event_type") if has_event_type else "CAST(NULL AS STRING)"
    hour, slide = interval(pipeline.hour_seconds), interval(pipeline.recent_slide_seconds)
    window = interval(pipeline.recent_window_seconds)
    ddl = [
        event_source_table("engagement_lines", landing_root / source.path, source, proctime=True),
        *parsed_view("engagements", "engagement_lines", source, keep=(ROWTIME, "_pt")),
        f"CREATE TEMPORARY VIEW valid AS SELECT {ROWTIME}, _pt, event_id, campaign_id, user_id, "
        f"{event_type} AS event_type FROM engagements WHERE dead_letter_reason IS NULL",
        # Each engagement once; the time attribute survives the first-row deduplication.
        "CREATE TEMPORARY VIEW deduplicated AS SELECT * FROM ("
        "SELECT *, ROW_NUMBER() OVER (PARTITION BY user_id, event_id ORDER BY _pt ASC) AS _n "
        "FROM valid) WHERE _n = 1",
        # A regular join keeps no time attribute in its inputs: the times as plain timestamps.
        "CREATE TEMPORARY VIEW reported AS SELECT event_id, campaign_id, user_id, event_type, "
        f"CAST({ROWTIME} AS TIMESTAMP(3)) AS event_time, window_end "
        f"FROM TABLE(TUMBLE(TABLE deduplicated, DESCRIPTOR({ROWTIME}), {slide}))",
        "CREATE TEMPORARY VIEW recent AS SELECT user_id, window_start, window_end, "
        "COUNT(DISTINCT campaign_id) AS distinct_campaigns "
        f"FROM TABLE(HOP(TABLE valid, DESCRIPTOR({ROWTIME}), {slide}, {window})) "
        "GROUP BY user_id, window_start, window_end",
    ]
    hourly_exact = _select(
        {
            "output": f"'{HOURLY_EXACT}'",
            "campaign_id": "campaign_id",
            "window_start": "window_start",
            "window_end": "window_end",
            "unique_users": "COUNT(DISTINCT user_id)",
            "event_date": "CAST(CAST(window_start AS DATE) AS STRING)",
        },
        f"TABLE(TUMBLE(TABLE valid, DESCRIPTOR({ROWTIME}), {hour})) "
        "GROUP BY campaign_id, window_start, window_end",
    )
    enriched = _select(
        {
            "output": f"'{ENRICHED}'",
            "campaign_id": "e.campaign_id",
            "user_id": "e.user_id",
            "event_id": "e.event_id",
            "event_time": "e.event_time",
            "event_type": "e.event_type",
            "window_start": "r.window_start",
            "window_end": "r.window_end",
            "distinct_campaigns": "r.distinct_campaigns",
            "event_date": "CAST(CAST(e.event_time AS DATE) AS STRING)",
        },
        "reported AS e JOIN recent AS r ON e.user_id = r.user_id AND e.window_end = r.window_end",
    )
    dead = _select(
        {
            "output": f"'{DEAD_LETTER_ROUTE}'",
            "dead_letter_reason": "dead_letter_reason",
            "raw": "`raw`",
            "event_date": "CAST(event_date AS STRING)",
        },
        "engagements WHERE dead_letter_reason IS NOT NULL",
    )
    return [
        *ddl,
        sink_table("campaign_uniques_sink", out_dir, SINK_COLUMNS, PARTITIONS),
        f"INSERT INTO campaign_uniques_sink {hourly_exact} UNION ALL {enriched} UNION ALL {dead}",
    ]
