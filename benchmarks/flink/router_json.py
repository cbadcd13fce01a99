"""The router in PyFlink SQL with the `json` format: each line parsed once, by the format.

The strongest fair Flink counterpart of the router for `benchmarks.peers`. The landing files are a
`landing_sql.json_source_table` (every source field declared STRING), so the format parses each
line once and hands over each field's text; the fields are then converted and checked exactly as
`landing_sql.parsed_view` does (`TRY_CAST`, the same timestamp pattern, the same reasons), and the
fan-out is the router's (`router.fan_out`, one `CROSS JOIN UNNEST`). What the format cannot do,
and so does not pay for, is in `json_source_table`'s doc: lines that are not JSON are dropped, and
no dead letter has its raw line.
"""

from __future__ import annotations

from pathlib import Path

from benchmarks.flink.landing_sql import json_parsed_view, json_source_table
from benchmarks.flink.router import fan_out
from ops.spec.job import JobSpec
from ops.spec.pipelines import RouterPipeline


def statements(spec: JobSpec, landing_root: Path, out_dir: Path) -> list[str]:
    """DDL, then the INSERT that writes the router's sink rows to `out_dir`."""
    pipeline = spec.pipeline
    assert isinstance(pipeline, RouterPipeline)
    source = pipeline.source
    return [
        json_source_table("landing", landing_root / source.path, source),
        json_parsed_view("events", "landing", source),
        *fan_out(pipeline, out_dir),
    ]
