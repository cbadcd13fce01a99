"""The router in PyFlink SQL with the `json` format: each line parsed once, by the format.

The strongest fair Flink counterpart of the router for `benchmarks.peers`. The landing files are a
`filesystem` table with the `json` format and every source field declared STRING, so the format
parses each line once and hands over each field's text; the fields are then converted and checked
exactly as `landing_sql.parsed_view` does (`TRY_CAST`, the same timestamp pattern, the same
reasons), and the fan-out is the router's (`router.fan_out`, one `CROSS JOIN UNNEST`).

What it cannot do, and so does not pay for: a line that is not JSON is dropped by the format
(`json.ignore-parse-errors`), not kept as a dead letter, and no dead letter has its raw line (the
format does not expose it): `raw` is NULL. Fields the source does not declare are skipped by the
parser, as in Spark's struct parse; duplicate keys are not seen (Streamwarden counts them).
"""

from __future__ import annotations

from pathlib import Path

from benchmarks.flink.landing_sql import _problem, _typed, ident, quote
from benchmarks.flink.router import fan_out
from ops.spec.job import JobSpec
from ops.spec.pipelines import RouterPipeline


def statements(spec: JobSpec, landing_root: Path, out_dir: Path) -> list[str]:
    """DDL, then the INSERT that writes the router's sink rows to `out_dir`."""
    pipeline = spec.pipeline
    assert isinstance(pipeline, RouterPipeline)
    source = pipeline.source
    declared = ", ".join(f"{ident(f.name)} STRING" for f in source.fields)
    landing = (
        f"CREATE TEMPORARY TABLE landing ({declared}) WITH ('connector' = 'filesystem', "
        f"'path' = {quote(str(landing_root / source.path))}, 'format' = 'json', "
        "'json.ignore-parse-errors' = 'true', 'json.fail-on-missing-field' = 'false')"
    )
    texts = ", ".join(f"{ident(f.name)} AS _t_{f.name}" for f in source.fields)
    problems = [_problem(f.name, f.type, f.required) for f in source.fields]
    typed = ", ".join(f"{_typed(f.name, f.type)} AS {ident(f.name)}" for f in source.fields)
    listed = ", ".join(problems)
    reason = f"CASE WHEN COALESCE({listed}) IS NOT NULL THEN CONCAT_WS('; ', {listed}) END"
    event_time = _typed(source.event_time_field, "timestamp")
    view = (
        f"CREATE TEMPORARY VIEW events AS SELECT {typed}, {reason} AS dead_letter_reason, "
        f"CAST(NULL AS STRING) AS `raw`, CAST({event_time} AS DATE) AS event_date, "
        f"CAST(HOUR({event_time}) AS INT) AS event_hour FROM (SELECT {texts} FROM landing)"
    )
    return [landing, view, *fan_out(pipeline, out_dir)]
