"""The archive of landing input: every landing file, in the object store, by arrival hour.

Landing directories are where sources drop files, and nobody keeps them for ever. The archive
does, for `archive.retention_days`, so that a rewind or a backfill can read input the landing
zone no longer holds (docs/architecture.md §6, Kappa+). Layout, per landing directory (a source's
`path`, shared by every job that reads it)::

    s3://<bucket>/<archive.prefix>/<source path>/arrival_date=2026-11-24/arrival_hour=10/
        events-20261124T100000-000001.json      the landing files, byte for byte
        _manifest.json                          written last: what the partition holds

A file's arrival hour is the UTC hour of its modification time (the generator and well-behaved
writers rename a finished file into place, so that is when it arrived). An hour is archived once
it is over and `seal_after_minutes` have passed, so late writers land first; the manifest lists
each file's name, size and sha256 and is written only after every file was uploaded and checked,
so a partition without a manifest is incomplete and a crash mid-way is redone by the next pass.
Each entry also records the file's event-time span for every way a job reads its time
(`ops.event_times`), which a backfill reads to know which partitions an hour feeds; a manifest
written before spans were recorded gets them the first time a backfill asks (`event_time_spans`).
A file that lands in an hour already sealed (copied in later with its old time) is added with a
new manifest that lists it too.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import defaultdict
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from botocore.client import BaseClient
from botocore.exceptions import ClientError

from ops import event_times, progress
from ops.exceptions import ArchiveError
from ops.s3 import file_digest, list_objects, platform_client, s3_errors
from ops.spec.job import load_jobs
from ops.spec.pipelines import SourceField
from ops.spec.platform import PlatformConfig

MANIFEST_NAME = "_manifest.json"
LANDING_GLOB = "*.json"
UPLOAD_THREADS = 8


@dataclass(frozen=True)
class ArchivedFile:
    name: str
    size: int
    sha256: str
    # The file's event-time span by `ops.event_times.time_key`: [earliest, latest], or None.
    event_times: dict[str, list[str] | None] = field(default_factory=dict)


@dataclass(frozen=True)
class Partition:
    """One arrival hour of one landing directory (`source` is its path under the landing root)."""

    source: str
    hour: datetime

    @property
    def prefix(self) -> str:
        return f"{self.source}/arrival_date={self.hour:%Y-%m-%d}/arrival_hour={self.hour:%H}"

    def __str__(self) -> str:
        return f"{self.source} {self.hour:%Y-%m-%d %H}:00"


@dataclass(frozen=True)
class ArchiveReport:
    """What one `archive_landing` pass did."""

    sealed: tuple[Partition, ...]
    files: int
    bytes: int
    expired: tuple[Partition, ...]


def arrival_hour(path: Path) -> datetime:
    """The UTC hour a landing file arrived in (its modification time)."""
    moment = datetime.fromtimestamp(path.stat().st_mtime, UTC)
    return moment.replace(minute=0, second=0, microsecond=0)


def landing_sources(platform: PlatformConfig, source_paths: Iterable[str]) -> dict[str, Path]:
    """Each source path (`events`) and its landing directory, once however many jobs read it."""
    return {path: platform.landing_root / path for path in sorted(set(source_paths))}


def archive_landing(
    platform: PlatformConfig,
    source_paths: Iterable[str],
    now: datetime,
    client: BaseClient | None = None,
) -> ArchiveReport:
    """Archive every sealed arrival hour of the given sources, then expire those past retention
    (of the sources that sealed one).

    Idempotent: a partition whose manifest already lists every local file of its hour is skipped.
    Raises ArchiveError (naming the endpoint and the partition) when the store fails; what was
    sealed before stays sealed and the rest is retried by the next pass.
    """
    client = platform_client(platform, client, ArchiveError)
    sealed_before = now - timedelta(hours=1, minutes=platform.archive.seal_after_minutes)
    sealed: list[Partition] = []
    files = size = 0
    time_fields = _time_fields(platform)
    for source, landing in landing_sources(platform, source_paths).items():
        by_hour: dict[datetime, list[Path]] = defaultdict(list)
        for path in sorted(landing.glob(LANDING_GLOB)) if landing.is_dir() else []:
            by_hour[arrival_hour(path)].append(path)
        for hour, paths in sorted(by_hour.items()):
            if hour > sealed_before:
                continue
            partition = Partition(source, hour)
            archived = read_manifest(platform, partition, client)
            known = {entry.name for entry in archived or ()}
            new = [path for path in paths if path.name not in known]
            if archived is not None and not new:
                continue
            entries = _upload(platform, client, partition, new, time_fields.get(source, []))
            _write_manifest(platform, client, partition, [*(archived or ()), *entries])
            sealed.append(partition)
            files += len(entries)
            size += sum(entry.size for entry in entries)
    # Only a source that sealed an hour is listed for expiry: a pass with nothing to seal (the
    # every-minute DAG, a platform without input) touches no store. In steady operation that is
    # hourly; a source whose input stopped keeps its last partitions until input resumes.
    expired = expire(platform, sorted({partition.source for partition in sealed}), now, client)
    return ArchiveReport(tuple(sealed), files, size, expired)


def _time_fields(platform: PlatformConfig) -> dict[str, list[SourceField]]:
    """The event-time fields valid jobs read from each source path, one per way of reading it."""
    fields: dict[str, dict[str, SourceField]] = defaultdict(dict)
    for spec in load_jobs(platform.conf_dir).specs.values():
        for source in spec.pipeline.inputs.values():
            time_field = next(f for f in source.fields if f.name == source.event_time_field)
            fields[source.path][event_times.time_key(time_field)] = time_field
    return {path: list(by_key.values()) for path, by_key in fields.items()}


def archive_all(platform: PlatformConfig, now: datetime) -> list[str]:
    """One archive pass over the landing directory of every source a valid job reads; one line
    per partition sealed or expired, or per source the store failed for (the next pass retries
    it: `warden archive`, the `warden_platform` DAG)."""
    specs = load_jobs(platform.conf_dir).specs.values()
    lines = []
    for source in sorted({source.path for spec in specs for source in spec.pipeline.inputs.values()}):
        try:
            report = archive_landing(platform, [source], now)
        except ArchiveError as error:
            lines.append(f"{source}: not archived: {error}")
            continue
        lines += [f"sealed {partition}" for partition in report.sealed]
        lines += [f"expired {partition}" for partition in report.expired]
    return lines


def read_manifest(
    platform: PlatformConfig, partition: Partition, client: BaseClient | None = None
) -> list[ArchivedFile] | None:
    """The files a sealed partition holds, or None when it is not sealed (no manifest)."""
    client = platform_client(platform, client, ArchiveError)
    key = _key(platform, partition, MANIFEST_NAME)
    try:
        with s3_errors(platform, f"reading {key}", ArchiveError):
            body = client.get_object(Bucket=platform.s3.bucket, Key=key)["Body"].read()
    except ArchiveError as exc:
        if isinstance(exc.__cause__, ClientError) and _is_missing(exc.__cause__):
            return None
        raise
    document = json.loads(body)
    return [ArchivedFile(**entry) for entry in document["files"]]


def event_time_spans(
    platform: PlatformConfig, partition: Partition, time_field: SourceField, client: BaseClient | None = None
) -> list[event_times.Span | None] | None:
    """The event-time span of each file of a sealed partition as `time_field` reads it (None for a
    file without a readable time); None when the field's format cannot be read outside Spark.

    Spans the manifest lacks (it was written before they were recorded, or before a job read the
    source this way) are computed from a download of those files and written into the manifest.
    """
    if not event_times.readable(time_field):
        return None
    client = platform_client(platform, client, ArchiveError)
    key = event_times.time_key(time_field)
    entries = read_manifest(platform, partition, client) or []
    missing = [entry for entry in entries if key not in entry.event_times]
    if missing:
        with tempfile.TemporaryDirectory(prefix="spans-") as scratch:
            fetch(platform, partition, Path(scratch), client, missing)
            computed = {
                entry.name: event_times.file_spans(Path(scratch) / entry.name, [time_field])[key]
                for entry in missing
            }
        entries = [
            entry
            if entry.name not in computed
            else ArchivedFile(
                entry.name, entry.size, entry.sha256, {**entry.event_times, key: computed[entry.name]}
            )
            for entry in entries
        ]
        _write_manifest(platform, client, partition, entries)
    return [event_times.stored_span(entry.event_times[key]) for entry in entries]


def partitions(platform: PlatformConfig, source: str, client: BaseClient | None = None) -> list[Partition]:
    """The sealed partitions of a source, oldest first."""
    client = platform_client(platform, client, ArchiveError)
    prefix = f"{platform.archive.prefix.strip('/')}/{source}/"
    found = []
    with s3_errors(platform, f"listing {prefix}", ArchiveError):
        for item in list_objects(client, platform.s3.bucket, prefix):
            key: str = item["Key"]
            if key.endswith("/" + MANIFEST_NAME):
                found.append(_partition_of(source, key[len(prefix) :]))
    return sorted(found, key=lambda partition: partition.hour)


def verify(platform: PlatformConfig, partition: Partition, scratch: Path) -> list[str]:
    """Download a sealed partition into `scratch` and check every file; the problems found (none: [])."""
    client = platform_client(platform, None, ArchiveError)
    entries = read_manifest(platform, partition, client)
    if entries is None:
        return [f"{partition} is not sealed: no {MANIFEST_NAME}"]
    problems = []
    for entry in fetch(platform, partition, scratch, client, entries):
        size, sha256 = file_digest(scratch / entry.name)
        if (size, sha256) != (entry.size, entry.sha256):
            problems.append(
                f"{entry.name}: {size} bytes, sha256 {sha256[:12]}...; the manifest says {entry.size} "
                f"bytes, {entry.sha256[:12]}..."
            )
    return problems


def fetch(
    platform: PlatformConfig,
    partition: Partition,
    target: Path,
    client: BaseClient | None = None,
    entries: list[ArchivedFile] | None = None,
) -> list[ArchivedFile]:
    """Download a sealed partition's files into `target` (for a rewind or a backfill), each dated
    at its arrival hour (`_date_as_arrived`); its entries."""
    client = platform_client(platform, client, ArchiveError)
    entries = entries if entries is not None else read_manifest(platform, partition, client)
    if entries is None:
        raise ArchiveError(f"{partition} is not in the archive (no {MANIFEST_NAME})")
    target.mkdir(parents=True, exist_ok=True)

    def download(entry: ArchivedFile) -> None:
        key = _key(platform, partition, entry.name)
        with s3_errors(platform, f"reading {key}", ArchiveError):
            client.download_file(platform.s3.bucket, key, str(target / entry.name))
        _date_as_arrived(target / entry.name, partition)

    with ThreadPoolExecutor(max_workers=UPLOAD_THREADS) as pool:
        list(pool.map(download, entries))
    return entries


def locate(
    platform: PlatformConfig, source: str, names: Iterable[str], client: BaseClient | None = None
) -> dict[str, tuple[Partition, ArchivedFile]]:
    """Where the archive holds the named files of a source (a file it does not hold is left out).

    Landing file names are unique within a source (the archive keys its files by name within an
    hour), so a name found in a sealed partition is that file. Reads manifests newest first and
    stops once every name is found.
    """
    client = platform_client(platform, client, ArchiveError)
    wanted = set(names)
    found: dict[str, tuple[Partition, ArchivedFile]] = {}
    for partition in reversed(partitions(platform, source, client)):
        if not wanted:
            break
        for entry in read_manifest(platform, partition, client) or ():
            if entry.name in wanted:
                found[entry.name] = (partition, entry)
                wanted.discard(entry.name)
    return found


def restore(
    platform: PlatformConfig,
    partition: Partition,
    entry: ArchivedFile,
    target: Path,
    client: BaseClient | None = None,
) -> None:
    """Put an archived file back at `target`, checked against its manifest entry and dated at its
    arrival hour (`_date_as_arrived`). Written under a temporary name and renamed: readers see all
    of it or nothing.
    """
    client = platform_client(platform, client, ArchiveError)
    key = _key(platform, partition, entry.name)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.restoring")
    with s3_errors(platform, f"reading {key}", ArchiveError):
        client.download_file(platform.s3.bucket, key, str(partial))
    if file_digest(partial) != (entry.size, entry.sha256):
        partial.unlink()
        raise ArchiveError(f"{key} does not match its manifest's size and sha256")
    _date_as_arrived(partial, partition)
    partial.rename(target)


def _date_as_arrived(path: Path, partition: Partition) -> None:
    """Give an archived file's copy its arrival hour as modification time, as its landing file had
    within that hour. Spark's file source logs that date: a copy dated today would be taken for a
    new file by a source that read the original long ago, and, logged by a bootstrap backfill, would
    make the live job skip as too old (`maxFileAge`, 7 days before the newest date logged) every
    landing file after the bootstrap's end that is dated more than 7 days before the backfill.
    """
    arrived = partition.hour.timestamp()
    os.utime(path, (arrived, arrived))


def expire(
    platform: PlatformConfig, source_paths: Iterable[str], now: datetime, client: BaseClient | None = None
) -> tuple[Partition, ...]:
    """Delete the partitions older than `archive.retention_days`, manifest first (so a partly
    deleted partition reads as unsealed, never as complete)."""
    client = platform_client(platform, client, ArchiveError)
    horizon = now - timedelta(days=platform.archive.retention_days)
    expired = []
    for source in sorted(set(source_paths)):
        for partition in partitions(platform, source, client):
            if partition.hour + timedelta(hours=1) > horizon:
                break
            prefix = _key(platform, partition, "")
            with s3_errors(platform, f"expiring {prefix}", ArchiveError):
                client.delete_object(Bucket=platform.s3.bucket, Key=prefix + MANIFEST_NAME)
                for item in list(list_objects(client, platform.s3.bucket, prefix)):
                    client.delete_object(Bucket=platform.s3.bucket, Key=item["Key"])
            expired.append(partition)
    return tuple(expired)


def _upload(
    platform: PlatformConfig,
    client: BaseClient,
    partition: Partition,
    paths: list[Path],
    time_fields: list[SourceField],
) -> list[ArchivedFile]:
    """Upload the files and check each object's size; their manifest entries, with the files'
    event-time spans as `time_fields` read them."""
    total = sum(path.stat().st_size for path in paths)
    with (
        progress.track(f"archiving {partition}", total=total, unit=progress.BYTES) as task,
        ThreadPoolExecutor(max_workers=UPLOAD_THREADS) as pool,
    ):

        def upload(path: Path) -> ArchivedFile:
            size, sha256 = file_digest(path)
            key = _key(platform, partition, path.name)
            with s3_errors(platform, f"archiving {path} to {key}", ArchiveError):
                client.upload_file(str(path), platform.s3.bucket, key)
                stored = client.head_object(Bucket=platform.s3.bucket, Key=key)["ContentLength"]
            if stored != size:
                raise ArchiveError(f"{key} holds {stored} bytes after upload, {path} has {size}")
            task.advance(size)
            return ArchivedFile(path.name, size, sha256, event_times.file_spans(path, time_fields))

        return list(pool.map(upload, paths))


def _write_manifest(
    platform: PlatformConfig, client: BaseClient, partition: Partition, entries: list[ArchivedFile]
) -> None:
    document: dict[str, Any] = {
        "source": partition.source,
        "arrival_hour": partition.hour.isoformat(),
        "files": [entry.__dict__ for entry in sorted(entries, key=lambda entry: entry.name)],
    }
    key = _key(platform, partition, MANIFEST_NAME)
    with s3_errors(platform, f"writing {key}", ArchiveError):
        client.put_object(Bucket=platform.s3.bucket, Key=key, Body=json.dumps(document, indent=1).encode())


def _key(platform: PlatformConfig, partition: Partition, name: str) -> str:
    return f"{platform.archive.prefix.strip('/')}/{partition.prefix}/{name}"


def _partition_of(source: str, relative_key: str) -> Partition:
    """The partition of a manifest key relative to the source's prefix (`arrival_date=.../...`)."""
    date_part, hour_part, _ = relative_key.split("/")
    day = datetime.strptime(date_part.removeprefix("arrival_date="), "%Y-%m-%d").replace(tzinfo=UTC)
    return Partition(source, day + timedelta(hours=int(hour_part.removeprefix("arrival_hour="))))


def _is_missing(error: ClientError) -> bool:
    return error.response.get("Error", {}).get("Code") in ("404", "NoSuchKey")
