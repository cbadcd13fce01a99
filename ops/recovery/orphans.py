"""Output files a job's file sink holds that no committed batch lists, and their safe removal.

Spark's file sink writes a batch's Parquet files straight into the sink directory and lists them in
the sink log (`_spark_metadata/<batch>`) when the batch commits. A driver killed mid-batch leaves
what it had written unlisted; the re-run of the batch writes its rows again under new names.
Spark's readers go through the log and never see the leftovers, but anything that lists the
directory (pyarrow, pandas, DuckDB, Athena, Spark reading a partition directory) counts their rows
as well, and a file cut short by the kill makes such a reader fail.

An orphaned file is a Spark part file (`part-*`, with its `.part-*.crc` checksum) under the sink,
outside the `_`/`.` directories readers skip, that no entry of the sink log lists. Removing one is
safe only if no batch may still write or list it:

* with no driver of the job running (the supervisor removes them after it closed or stopped a
  run, its process group killed, and before it launches the next): every orphaned file;
* while a driver may run (housekeeping): only files last written before the newest `commits/`
  entry. Each batch starts after the previous one's commit, so a batch in flight writes only newer
  files, and every older batch is either listed in the log or was abandoned.

The scan refuses (`SinkCleanupError`) when a file the log lists is not on disk: the log's paths and
the directory no longer match (a moved sink, a path the reader decodes differently), and every
file would look orphaned.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ops.driver.checkpoint import log_entries, sink_files
from ops.exceptions import SinkCleanupError
from ops.spec.paths import JobPaths

PART_PREFIX = "part-"
EXAMPLES = 5


@dataclass(frozen=True)
class OrphanedOutput:
    """The orphaned files found in one job's sink; `written_before` is the age limit (epoch seconds)
    they were chosen under, None for any age."""

    job: str
    sink: Path
    files: tuple[Path, ...]
    total_bytes: int
    written_before: float | None

    def inputs(self, rows: int, unreadable: int) -> dict[str, Any]:
        """The decision row's inputs: what goes, how much of it, and under which age limit."""
        cutoff = self.written_before
        return {
            "files": len(self.files),
            "bytes": self.total_bytes,
            "rows": rows,
            "unreadable_files": unreadable,
            "written_before": None if cutoff is None else datetime.fromtimestamp(cutoff, UTC).isoformat(),
            "examples": [str(path.relative_to(self.sink)) for path in self.files[:EXAMPLES]],
        }


def _part_files(sink: Path) -> Iterator[Path]:
    """Spark's data files under `sink`, skipping the `_`/`.` directories (the sink log among them)."""
    for directory, subdirectories, names in os.walk(sink):
        subdirectories[:] = [d for d in subdirectories if not d.startswith(("_", "."))]
        for name in names:
            if name.startswith(PART_PREFIX):
                yield Path(directory) / name


def newest_commit_time(paths: JobPaths) -> float | None:
    """When the newest `commits/` entry was written (epoch seconds); None before the first commit."""
    entries = log_entries(paths.commits)
    if not entries:
        return None
    return max(entry.stat().st_mtime for entry in entries[max(entries)])


def find_orphaned_output(paths: JobPaths, *, written_before: float | None) -> OrphanedOutput:
    """The sink's part files that no sink-log entry lists, last written before `written_before`
    (any age when None). Reads only."""
    listed = sink_files(paths.sink_log)
    missing = sorted(path for path in listed if not path.is_file())
    if missing:
        raise SinkCleanupError(
            f"job {paths.job!r}: the sink log lists {len(missing)} files that are not on disk, e.g. "
            f"{missing[0]}; its paths do not match {paths.sink}, so nothing is removed"
        )
    orphans = []
    total = 0
    for path in sorted(_part_files(paths.sink)):
        if path in listed:
            continue
        try:
            status = path.stat()
        except FileNotFoundError:
            continue  # gone meanwhile: a failing task deletes what it wrote
        if written_before is None or status.st_mtime < written_before:
            orphans.append(path)
            total += status.st_size
    return OrphanedOutput(paths.job, paths.sink, tuple(orphans), total, written_before)


def count_rows(files: tuple[Path, ...]) -> tuple[int, int]:
    """(rows in the readable Parquet files, files unreadable: cut short by the kill)."""
    # Imported here: only a sweep that found something reads Parquet footers.
    import pyarrow.parquet as pq

    rows = unreadable = 0
    for path in files:
        try:
            rows += pq.ParquetFile(path).metadata.num_rows
        except (OSError, ValueError):
            unreadable += 1
    return rows, unreadable


def remove_orphaned_output(orphans: OrphanedOutput) -> None:
    """Delete the orphaned files, their checksum files and the partition directories they leave empty."""
    for path in orphans.files:
        path.unlink(missing_ok=True)
        (path.parent / f".{path.name}.crc").unlink(missing_ok=True)
    for directory in sorted({path.parent for path in orphans.files}, key=lambda d: -len(d.parts)):
        while directory != orphans.sink and directory.is_relative_to(orphans.sink):
            try:
                directory.rmdir()
            except OSError:
                break  # not empty: other batches' files live there
            directory = directory.parent
