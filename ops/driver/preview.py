"""Preview taps: the newest records at a named stage of a job, for `warden preview JOB STAGE`.

A job's spec enables taps with `operations.preview: {stages: [parsed, output], records: 100}`.
The driver then runs one small extra query per tapped stage (`jobs/preview.py`) that rewrites
`<runtime>/jobs/<job>/preview/<stage>.json` after each of its micro-batches, atomically, with the
newest `records` rows seen at that stage. This module owns that file: its path, its format, and
reading it and laying it out as table rows. It knows nothing of Spark.

Tap queries are named `<job>.preview.<stage>`, so the driver's telemetry listener can tell them
from the job's own query (`is_tap_query`) and keep them out of the heartbeat.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ops.atomic import write_atomically
from ops.exceptions import PreviewError
from ops.spec.job import JobSpec
from ops.spec.paths import JobPaths
from ops.spec.platform import PlatformConfig

TAP_MARKER = ".preview."


def tap_query_name(job: str, stage: str) -> str:
    """The name of the query that taps `stage` of `job`."""
    return f"{job}{TAP_MARKER}{stage}"


def is_tap_query(name: str | None) -> bool:
    """Whether a streaming query (by its name) is a preview tap rather than a job's own query."""
    return name is not None and TAP_MARKER in name


def preview_path(paths: JobPaths, stage: str) -> Path:
    """The file the tap on `stage` keeps its newest records in (`JobPaths.preview` holds the taps'
    files and checkpoints, beside, not in, the job's checkpoint)."""
    return paths.preview / f"{stage}.json"


@dataclass(frozen=True)
class Preview:
    """What a tap captured: the stage's columns and its newest records, oldest first."""

    job: str
    stage: str
    batch_id: int
    captured_at: float
    columns: tuple[str, ...]
    records: tuple[dict[str, Any], ...]


def merge_records(
    previous: Sequence[dict[str, Any]], new: Sequence[dict[str, Any]], keep: int
) -> list[dict[str, Any]]:
    """The newest `keep` records of `previous` followed by `new`."""
    return [*previous, *new][-keep:] if keep else []


def write_preview(path: Path, preview: Preview) -> None:
    """Replace the tap file atomically; values JSON cannot hold (timestamps, dates) become text."""
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "job": preview.job,
        "stage": preview.stage,
        "batch_id": preview.batch_id,
        "captured_at": preview.captured_at,
        "columns": list(preview.columns),
        "records": list(preview.records),
    }
    write_atomically(path, json.dumps(document, default=str))


def load_preview_file(path: Path) -> Preview | None:
    """The tap file's content, or None when the tap has not written one."""
    try:
        document = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    return Preview(
        job=document["job"],
        stage=document["stage"],
        batch_id=document["batch_id"],
        captured_at=document["captured_at"],
        columns=tuple(document["columns"]),
        records=tuple(document["records"]),
    )


def read_preview(platform: PlatformConfig, spec: JobSpec, stage: str) -> Preview:
    """What the tap on `stage` of the job captured; `PreviewError` says why there is nothing."""
    taps = spec.operations.preview
    if stage not in taps.stages:
        enabled = ", ".join(taps.stages) or "none"
        raise PreviewError(
            f"no preview tap on stage {stage!r} of job {spec.name!r} (tapped stages: {enabled}); "
            f"add it to operations.preview.stages in conf/jobs/{spec.name}.yaml and restart the job"
        )
    preview = load_preview_file(preview_path(JobPaths.of(platform, spec), stage))
    if preview is None:
        raise PreviewError(
            f"the tap on stage {stage!r} of job {spec.name!r} has captured nothing yet "
            "(is the job running, and has input arrived since it started?)"
        )
    return preview


def preview_rows(preview: Preview, limit: int | None = None) -> tuple[str, list[list[str]]]:
    """A one-line title and the newest `limit` records as table cells (oldest of them first), one
    cell per column of `preview.columns`."""
    records = preview.records[-limit:] if limit else preview.records
    rows = [
        ["" if record.get(column) is None else _cell(record[column]) for column in preview.columns]
        for record in records
    ]
    title = (
        f"{preview.job} / {preview.stage}: newest {len(records)} of {len(preview.records)} records, "
        f"batch {preview.batch_id}"
    )
    return title, rows


def _cell(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    # A cell stays on one line and readable: long raw lines are cut.
    text = " ".join(text.split())
    return text if len(text) <= 60 else text[:57] + "..."
