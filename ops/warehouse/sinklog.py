"""A bounded sink log: the raw files and `_spark_metadata` entries of published partitions expire.

Spark's file sink lists every file it ever committed in its log (`<sink>/_spark_metadata/`), and
each tenth entry, `<id>.compact`, repeats all earlier ones: the log grows with the job's age
(SPARK-27188). Spark 4's own remedy, the sink's `retention` option, drops an entry from the next
compact file once the file it names is older than a fixed age, whether or not anything has read it
since; here a partition's files are dropped once they are safe to lose: the partition is closed,
its published warehouse version was made from exactly its committed files (same fingerprint), and
its hour ended `operations.compaction.sink_retention_hours` ago (the sink's rewind horizon).

Expiring a partition, under the table and operation locks (no other compaction, savepoint or rewind
of the job runs):

1. `_expired.json` is written into its sink directory: which version holds its rows now. A
   directory-listing reader skips `_` files; files that land in such a partition late are
   compacted together with the rows of its published version (`ops.warehouse.compact`), and
   expire in their turn, rewriting the marker.
2. Every entry of the log up to its newest compact file that lists its files is rewritten without
   those lines, in one rename each, as Spark writes a compact file with `retention` (the other
   lines are kept byte for byte); Spark itself deletes the entries older than
   `spark.sql.streaming.minBatchesToRetain` batches. A driver that runs meanwhile reads the
   newest compact file only when it writes the next one; one that opened it before the rename
   holds a hidden `.<id>.compact.<uuid>.tmp` until it has written, so the rewrite waits for every
   such file and filters what it wrote too.
   Entries after the newest compact file are not rewritten: a partition with a file listed there
   waits for a later night.
3. Its raw files are deleted.

Savepoints taken before an expiry list the expired files: a rewind or restate to one is refused
(`sink_expired`, `ops.recovery.rewind.plan_rewind`), since it would restore a log naming files the
sink no longer holds. Savepoints taken after it copy the rewritten log.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from pathlib import Path

from ops.driver.checkpoint import local_path, log_entries, sink_files, write_log_entry
from ops.exceptions import WarehouseError
from ops.ledger.store import Ledger
from ops.spec.job import CompactionPolicy
from ops.warehouse.table import PUBLISHED, WarehouseTable, current_version

SINK_LOG = "_spark_metadata"
# The directory value Spark's file sink (like Hive) writes for a null partition value.
NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"
EXPIRED_MARKER = "_expired.json"
EXPIRE_ACTION = "expire_sink_log"
# A compact file a driver is writing (Hadoop's atomic create: a hidden temporary beside it).
IN_FLIGHT_COMPACT = re.compile(r"^\.(\d+)\.compact\..+\.tmp$")
# How long an expiry waits for a driver's compact file in flight (it takes milliseconds).
IN_FLIGHT_TIMEOUT_SECONDS = 60.0


@dataclass(frozen=True)
class SinkPartition:
    """One partition of the sink as its log lists it: the committed files, and their fingerprint
    taken when they were listed (what a version made from these files records)."""

    key: str
    values: dict[str, str]
    files: tuple[Path, ...]
    fingerprint: str


def fingerprint(files: tuple[Path, ...]) -> str:
    """What a partition's committed input is: its sorted files' names and sizes (a rewrite
    changes both)."""
    digest = hashlib.sha256()
    for path in files:
        digest.update(f"{path.name}:{path.stat().st_size}\n".encode())
    return digest.hexdigest()


def sink_partitions(sink: Path, table: WarehouseTable) -> list[SinkPartition]:
    """The sink's partitions with the files its log lists as committed, sorted by key."""
    by_key: dict[str, list[Path]] = {}
    for path in sink_files(sink / SINK_LOG):
        by_key.setdefault(path.parent.relative_to(sink).as_posix(), []).append(path)
    partitions = []
    for key, files in sorted(by_key.items()):
        listed = tuple(sorted(files))
        partitions.append(SinkPartition(key, table.parse_partition(key), listed, fingerprint(listed)))
    return partitions


def changed_since_published(ledger: Ledger, job: str, sink: Path) -> tuple[list[str], list[str]]:
    """The published partitions whose committed files differ from what their current version
    was made from (a restatement or late files changed them), and those the sink log no longer
    lists at all (a restatement removed every row); expired partitions are neither."""
    by_key: dict[str, list[Path]] = {}
    for path in sink_files(sink / SINK_LOG):
        by_key.setdefault(path.parent.relative_to(sink).as_posix(), []).append(path)
    changed, emptied = [], []
    for key in sorted({record.partition for record in ledger.partition_versions(job)}):
        current = next(
            (record for record in ledger.partition_versions(job, key) if record.status == PUBLISHED), None
        )
        if current is None or is_expired(sink, key):
            continue
        files = tuple(sorted(by_key.get(key, ())))
        if not files:
            emptied.append(key)
        elif fingerprint(files) != current.input_fingerprint:
            changed.append(key)
    return changed, emptied


def partition_end(values: Mapping[str, str]) -> datetime | None:
    """When a partition's event time ends: its hour's end, or its day's without `event_hour`;
    None for rows without an event time (dead letters of unparseable lines), which never close:
    they stay in the sink for whoever fixes their source."""
    if "event_date" not in values:
        raise ValueError(f"partition {dict(values)} has no event_date: it never closes")
    if NULL_PARTITION in (values["event_date"], values.get("event_hour")):
        return None
    start = datetime.combine(date.fromisoformat(values["event_date"]), datetime.min.time())
    if "event_hour" in values:
        return start + timedelta(hours=int(values["event_hour"]) + 1)
    return start + timedelta(days=1)


def is_expired(sink: Path, partition_key: str) -> bool:
    """Whether the partition's raw files were expired (its rows live only in the warehouse)."""
    return (sink / partition_key / EXPIRED_MARKER).is_file()


@dataclass(frozen=True)
class SinkLogExpiry:
    """What one expiry removed: the partitions, their raw files and bytes, the log bytes saved."""

    partitions: tuple[str, ...]
    files: int
    file_bytes: int
    log_bytes_before: int
    log_bytes_after: int

    def line(self) -> str:
        return (
            f"expired {len(self.partitions)} published partitions past the horizon: {self.files} raw "
            f"files ({self.file_bytes:,} bytes) and their sink-log entries; _spark_metadata "
            f"{self.log_bytes_before:,} -> {self.log_bytes_after:,} bytes"
        )


def log_size(sink_log: Path) -> int:
    """Bytes of every file in the sink log directory (checksums and temporaries too)."""
    return (
        sum(path.stat().st_size for path in sink_log.iterdir() if path.is_file()) if sink_log.is_dir() else 0
    )


def expirable(
    ledger: Ledger, table: WarehouseTable, sink: Path, policy: CompactionPolicy, now: datetime
) -> list[SinkPartition]:
    """The partitions whose raw files may go now (see the module docstring); none without a horizon."""
    if policy.sink_retention_hours is None:
        return []
    horizon = now.replace(tzinfo=None) - timedelta(hours=policy.sink_retention_hours)
    entries = log_entries(sink / SINK_LOG)
    newest_compact = max(
        (i for i, paths in entries.items() if any(p.name.endswith(".compact") for p in paths)), default=-1
    )
    recent = {
        local_path(str(record["path"]))
        for i, paths in entries.items()
        if i > newest_compact
        for record in _records(paths[0])
    }
    chosen = []
    for partition in sink_partitions(sink, table):
        end = partition_end(partition.values)
        if end is None or end > horizon or recent.intersection(partition.files):
            continue
        published = current_version(ledger, table, partition.key)
        if published is not None and published.input_fingerprint == partition.fingerprint:
            chosen.append(partition)
    return chosen


def _records(entry: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in entry.read_text().splitlines()[1:] if line.strip()]


def expire_sink_log(
    ledger: Ledger,
    table: WarehouseTable,
    sink: Path,
    policy: CompactionPolicy,
    now: datetime,
    in_flight_timeout: float = IN_FLIGHT_TIMEOUT_SECONDS,
) -> SinkLogExpiry | None:
    """Expire the raw files and log entries of the partitions `expirable` finds; None when there
    are none. The caller holds the job lock. A decision row (`expire_sink_log`) records it."""
    partitions = expirable(ledger, table, sink, policy, now)
    if not partitions:
        return None
    sink_log = sink / SINK_LOG
    dropped = {path for partition in partitions for path in partition.files}
    log_before = log_size(sink_log)
    decision = ledger.record_decision(
        table.job,
        EXPIRE_ACTION,
        f"published partitions past the sink's horizon ({policy.sink_retention_hours:g} h)",
        {"partitions": [partition.key for partition in partitions], "files": len(dropped)},
    )
    for partition in partitions:
        published = current_version(ledger, table, partition.key)
        assert published is not None
        marker = {
            "version": published.version,
            "location": published.location,
            "rows": published.output_rows,
            "files": len(partition.files),
            "fingerprint": partition.fingerprint,
            "expired_at": now.isoformat(),
        }
        write_log_entry(sink / partition.key / EXPIRED_MARKER, json.dumps(marker).encode())
    drop_from_log(sink_log, dropped, in_flight_timeout)
    file_bytes = 0
    for path in dropped:
        if path.is_file():
            file_bytes += path.stat().st_size
            path.unlink()
            (path.parent / f".{path.name}.crc").unlink(missing_ok=True)
    expiry = SinkLogExpiry(
        partitions=tuple(partition.key for partition in partitions),
        files=len(dropped),
        file_bytes=file_bytes,
        log_bytes_before=log_before,
        log_bytes_after=log_size(sink_log),
    )
    ledger.set_outcome(decision, expiry.line())
    return expiry


def drop_from_log(sink_log: Path, dropped: set[Path], in_flight_timeout: float) -> None:
    """Rewrite every log entry up to the newest compact file that lists a file of `dropped`, until
    none does and no driver is writing a compact file that may have read a listing of them."""
    deadline = time.monotonic() + in_flight_timeout
    while True:
        settled = _entries_upto_newest_compact(sink_log)
        for entry in settled:
            _rewrite_without(entry, dropped)
        while _compacts_in_flight(sink_log):
            if time.monotonic() > deadline:
                raise WarehouseError(
                    f"a driver has been writing a compact file of {sink_log} for {in_flight_timeout:g} s "
                    "(a leftover temporary file of a killed driver?): the sink log was not expired"
                )
            time.sleep(0.1)
        if not any(_lists_any(entry, dropped) for entry in _entries_upto_newest_compact(sink_log)):
            return


def _entries_upto_newest_compact(sink_log: Path) -> list[Path]:
    """The log's entry files up to its newest compact one: those no driver reads again but the
    newest compact file, which it reads to write the next."""
    entries = log_entries(sink_log)
    compacts = [i for i, paths in entries.items() if any(p.name.endswith(".compact") for p in paths)]
    newest = max(compacts, default=-1)
    return [path for i, paths in sorted(entries.items()) if i <= newest for path in paths]


def _compacts_in_flight(sink_log: Path) -> bool:
    return any(IN_FLIGHT_COMPACT.match(path.name) for path in sink_log.iterdir())


def _lists_any(entry: Path, dropped: set[Path]) -> bool:
    return any(local_path(str(record["path"])) in dropped for record in _records(entry))


def _rewrite_without(entry: Path, dropped: set[Path]) -> None:
    """Replace a log entry by itself without the lines naming `dropped` files (one rename)."""
    header, *lines = entry.read_text().splitlines()
    kept = [line for line in lines if line.strip() and local_path(json.loads(line)["path"]) not in dropped]
    if len(kept) == len([line for line in lines if line.strip()]):
        return
    mode = entry.stat().st_mode
    write_log_entry(entry, "\n".join([header, *kept]).encode())
    entry.chmod(mode)  # the rewrite's temporary file was private
