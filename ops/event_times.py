"""The event-time span of a landing file: the earliest and latest event time its lines hold.

The archive records it for each file it keeps (`ops.archive`), once per way a job reads the time
(the field's path and format: `time_key`), so that a backfill can tell which arrival hours feed
which event-time partitions without downloading them (`ops.backfill.coverage`). A line without a
readable time (not JSON, no such field, a value that is not a time) is a dead letter with no event
time, which never reaches an event-time partition, and counts for nothing here. A Spark datetime
pattern cannot be read outside Spark: for such a field no span is recorded, and a backfill treats
the file as one that may feed any partition.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ops.spec.pipelines import SourceField

# Units per second of the epoch formats a source field may declare.
EPOCH_SCALE = {"epoch_seconds": 1.0, "epoch_millis": 1e3, "epoch_micros": 1e6}
UTF8_BOM = b"\xef\xbb\xbf"
# A span as the manifest stores it: [earliest, latest] in ISO 8601, or None for no readable time.
Span = tuple[datetime, datetime]


def time_key(field: SourceField) -> str:
    """How a span is filed in a manifest entry: the field's JSON path and its time format."""
    return f"{'.'.join(field.json_path)}|{field.time_format}"


def readable(field: SourceField) -> bool:
    """Whether spans of `field` can be read here (ISO 8601 and epoch times; not Spark patterns)."""
    return field.time_format == "iso8601" or field.time_format in EPOCH_SCALE


def parse_time(value: Any, time_format: str) -> datetime | None:
    """`value` as an aware UTC time, read as Spark reads it with the platform's UTC session time
    zone; None when it is not one."""
    try:
        if time_format in EPOCH_SCALE:
            if isinstance(value, bool) or not isinstance(value, int | float | str):
                return None
            return datetime.fromtimestamp(float(value) / EPOCH_SCALE[time_format], UTC)
        if not isinstance(value, str):
            return None
        moment = datetime.fromisoformat(value)
    except (ValueError, OverflowError, OSError):
        return None
    return moment.astimezone(UTC) if moment.tzinfo else moment.replace(tzinfo=UTC)


def _value_at(document: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(document, dict):
            return None
        document = document.get(key)
    return document


def file_spans(path: Path, fields: Iterable[SourceField]) -> dict[str, list[str] | None]:
    """The span of each readable field over the file's lines, by `time_key`, as the manifest
    stores it: `[earliest, latest]` in ISO 8601, or None when no line holds a readable time."""
    wanted = {time_key(field): field for field in fields if readable(field)}
    earliest: dict[str, datetime] = {}
    latest: dict[str, datetime] = {}
    for line in path.read_bytes().splitlines():
        try:
            document = json.loads(line.removeprefix(UTF8_BOM))
        except (ValueError, RecursionError):
            continue
        for key, field in wanted.items():
            moment = parse_time(_value_at(document, field.json_path), field.time_format)
            if moment is None:
                continue
            earliest[key] = min(earliest.get(key, moment), moment)
            latest[key] = max(latest.get(key, moment), moment)
    return {
        key: [earliest[key].isoformat(), latest[key].isoformat()] if key in earliest else None
        for key in wanted
    }


def stored_span(stored: list[str] | None) -> Span | None:
    """A span as the manifest stores it, read back."""
    if stored is None:
        return None
    return datetime.fromisoformat(stored[0]), datetime.fromisoformat(stored[1])
