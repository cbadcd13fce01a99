"""Reading Spark's streaming checkpoint and file-sink logs (Spark 4.x layout, docs/architecture.md §5).

A checkpoint holds `offsets/<N>` (written before batch N runs: a `v1` line, the batch metadata
with its watermark, then one offset per source), `commits/<N>` (written after the sink committed
N), `sources/<i>/` (the file source's log: which files each source batch read) and `state/`. The
file sink keeps its own log in `<sink>/_spark_metadata/`. Both file logs compact every tenth entry
into `<id>.compact`, which repeats every earlier entry, and Spark may delete entries older than
the newest compact one. Log files are never rewritten, which is what makes online copies safe.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from ops.atomic import write_atomically

# Log entries (offsets, commits, source and sink logs) are named by id, compacted ones `<id>.compact`.
LOG_ENTRY = re.compile(r"^(\d+)(\.compact)?$")


def log_entries(directory: Path) -> dict[int, list[Path]]:
    """A log directory's entry files by id (a compacted entry and a plain one may share an id)."""
    entries: dict[int, list[Path]] = {}
    if not directory.is_dir():
        return entries
    for path in directory.iterdir():
        match = LOG_ENTRY.match(path.name)
        if match and path.is_file():
            entries.setdefault(int(match.group(1)), []).append(path)
    return entries


def _entry_lines(path: Path) -> list[dict[str, Any]]:
    """The JSON records of one file-log entry (after its version line)."""
    return [json.loads(line) for line in path.read_text().splitlines()[1:] if line.strip()]


def _log_view(directory: Path, upto: int | None) -> list[dict[str, Any]]:
    """The records of a compacting file log as of entry `upto` (all entries when None).

    Starts from the newest compact entry at or below `upto` and adds the entries after it.
    """
    entries = {i: paths for i, paths in log_entries(directory).items() if upto is None or i <= upto}
    compacts = [i for i, paths in entries.items() if any(p.name.endswith(".compact") for p in paths)]
    start = max(compacts, default=-1)
    records: list[dict[str, Any]] = []
    for i in sorted(entries):
        if i < start:
            continue
        path = next((p for p in entries[i] if p.name.endswith(".compact")), entries[i][0])
        records += _entry_lines(path)
    return records


def local_path(uri: str) -> Path:
    """A `file:` URI as Spark logs paths (percent-encoded: `a b` is `a%20b`, a partition value's
    escaped `%3A` is `%253A`) as the local path it names."""
    return Path(unquote(uri.removeprefix("file://").removeprefix("file:")))


def sink_files(sink_log: Path, upto: int | None = None) -> set[Path]:
    """The data files a file sink's log lists as committed (as of batch `upto`)."""
    files: set[Path] = set()
    for record in _log_view(sink_log, upto):
        path = local_path(record["path"])
        if record.get("action", "add") == "delete":
            files.discard(path)
        else:
            files.add(path)
    return files


def batch_files(sink_log: Path, batch: int) -> set[Path]:
    """The data files batch `batch` of a file sink committed: those its log entry lists or, when the
    entry is a compact one (which repeats every earlier entry), those it lists beyond the entry
    before it."""
    paths = log_entries(sink_log).get(batch, [])
    if not paths:
        return set()
    if any(path.name.endswith(".compact") for path in paths):
        return sink_files(sink_log, batch) - sink_files(sink_log, batch - 1)
    return {
        local_path(record["path"])
        for record in _entry_lines(paths[0])
        if record.get("action", "add") != "delete"
    }


def source_files(source_log: Path, after: int = -1, upto: int | None = None) -> list[Path]:
    """The files a file source read in its batches `after` < id <= `upto` (source log ids; all by default)."""
    return [
        local_path(record["path"])
        for record in _log_view(source_log, upto)
        if after < int(record["batchId"]) and (upto is None or int(record["batchId"]) <= upto)
    ]


def landing_backlog(landing_dirs: Iterable[Path], sources_dir: Path) -> int | None:
    """Landing files (`*.json`) the query has not read yet, over all its sources; None before its
    first batch.

    What was read comes from the query's file-source logs (Spark's file source reports no backlog).
    """
    if not sources_dir.is_dir():
        return None
    read = {path for source_log in sources_dir.iterdir() for path in source_files(source_log)}
    return sum(1 for landing in landing_dirs for path in landing.glob("*.json") if path not in read)


def query_id(checkpoint: Path) -> str | None:
    """The id of the query a checkpoint belongs to (kept across restarts), None before its start."""
    try:
        return str(json.loads((checkpoint / "metadata").read_text())["id"])
    except FileNotFoundError:
        return None


def read_offsets(content: bytes) -> tuple[dict[str, Any], list[Any]]:
    """An `offsets/<N>` entry's content: (batch metadata, one offset per source; "-" for none yet)."""
    lines = content.decode().splitlines()
    metadata: dict[str, Any] = json.loads(lines[1]) if len(lines) > 1 else {}
    offsets: list[Any] = []
    for line in lines[2:]:
        try:
            offsets.append(json.loads(line))
        except json.JSONDecodeError:
            offsets.append(line)
    return metadata, offsets


def source_log_offset(offset: Any) -> int:
    """The file source's log id an offset points at (-1 before its first file)."""
    return int(offset["logOffset"]) if isinstance(offset, dict) and "logOffset" in offset else -1


def write_log_entry(path: Path, content: bytes) -> None:
    """Write a log file the way Spark expects to find it: complete, with no stale checksum beside it."""
    (path.parent / f".{path.name}.crc").unlink(missing_ok=True)
    write_atomically(path, content)
