"""Savepoints: consistent, online, incremental copies of a streaming job's checkpoint in S3.

Spark has no savepoints (docs/architecture.md §5). A savepoint is anchored on the highest committed batch N
and holds what a restart at N needs: `offsets/` and `commits/` up to N, the source logs and the
file sink's `_spark_metadata` entries up to N, the state files that rebuild state version N+1
(with the RocksDB SST and log files they reference) and the checkpoint's `metadata`, copied last.
The job keeps running while it is copied: every file Spark writes at or below N is immutable, and
files written for later batches are left out.

Layout in the bucket, under `<savepoint_prefix>/<job>/`:

- `objects/<sha256>`: a content store shared by the job's savepoints, so a file already copied by
  an earlier savepoint is not uploaded again;
- `<savepoint_id>/manifest.json`: the savepoint itself, listing every file by relative path, size
  and sha256. It is written last and only after every listed object is verified in the store: no
  manifest, no savepoint. The ledger row is written after the manifest.

One module, over 500 lines, because taking, reading, fetching and expiring a savepoint share
its layout and its manifest: splitting them would spread one file format over four modules.
"""

from __future__ import annotations

import json
import re
import subprocess
import uuid
import zipfile
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Any

from boto3.s3.transfer import S3Transfer, TransferConfig
from botocore.client import BaseClient

from ops import progress
from ops.driver.checkpoint import log_entries, read_offsets, source_log_offset
from ops.exceptions import SavepointError
from ops.ledger.records import SavepointRecord
from ops.ledger.store import Ledger
from ops.s3 import file_digest, list_objects, platform_client, s3_errors
from ops.spec.job import JobSpec
from ops.spec.paths import JobPaths
from ops.spec.platform import PlatformConfig

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = 1
UPLOAD_THREADS = 8
MULTIPART_THRESHOLD = 8 * 1024 * 1024
# One transfer manager serves a whole copy, its requests bounded by the same thread count; a large
# SST file goes up or down in parts at once instead of one long stream.
_TRANSFER = TransferConfig(
    multipart_threshold=MULTIPART_THRESHOLD,
    multipart_chunksize=MULTIPART_THRESHOLD,
    max_concurrency=UPLOAD_THREADS,
)
# Spark purges old log and state files in the background; a file listed and then purged before it
# was read makes the copy start over on a fresh listing, a few times at most.
COPY_ATTEMPTS = 3
STATUS_COMPLETE = "complete"
# A savepoint newer than the one a rewind went back to: it lists sink files the rewind deleted, so
# it can no longer be restored (the rewound job continues on another timeline).
STATUS_SUPERSEDED = "superseded"

# State files: HDFS-backed `<version>.delta|snapshot`, RocksDB `<version>.zip|changelog`, and with
# checkpoint format v2 `<version>_<uuid>.<ext>`.
_STATE_FILE = re.compile(r"^(\d+)(?:_([0-9a-fA-F-]+))?\.(delta|snapshot|zip|changelog)$")
_STATE_SNAPSHOTS = frozenset({"snapshot", "zip"})
# Directories of a RocksDB store that hold files referenced by its zips, not versions themselves.
_ROCKSDB_FILE_DIRS = {"SSTs", "logs"}
# Operator and schema metadata beside the state versions; files in them may start with a batch id.
_STATE_METADATA_DIRS = {"_metadata", "_stateSchema"}
_LEADING_BATCH = re.compile(r"^(\d+)")
_REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class SavepointFile:
    """One file of a savepoint: its path inside the savepoint, size and content hash."""

    path: str
    size: int
    sha256: str


@dataclass(frozen=True)
class _Plan:
    """What to copy for batch N: (savepoint path, local file) pairs, `metadata` last."""

    batch_id: int
    files: tuple[tuple[str, Path], ...]
    offsets: bytes


class _Vanished(Exception):
    """A listed checkpoint file was purged by Spark before it was read."""


# --- S3 ------------------------------------------------------------------------------------------


def _job_prefix(platform: PlatformConfig, job: str) -> str:
    return f"{platform.s3.savepoint_prefix.strip('/')}/{job}"


def _object_key(platform: PlatformConfig, job: str, sha256: str) -> str:
    return f"{_job_prefix(platform, job)}/objects/{sha256}"


def _manifest_key(platform: PlatformConfig, job: str, savepoint_id: str) -> str:
    return f"{_job_prefix(platform, job)}/{savepoint_id}/{MANIFEST_NAME}"


def _stored_objects(client: BaseClient, platform: PlatformConfig, job: str) -> dict[str, int]:
    """The job's content store: sha256 -> size."""
    prefix = f"{_job_prefix(platform, job)}/objects/"
    return {
        item["Key"][len(prefix) :]: int(item["Size"])
        for item in list_objects(client, platform.s3.bucket, prefix)
    }


# --- planning the copy ---------------------------------------------------------------------------


def _contiguous_to(entries: Iterable[int], last: int, what: str, checkpoint: Path) -> list[int]:
    """The batch ids min..last, or a SavepointError naming the gap."""
    ids = sorted(i for i in entries if i <= last)
    if not ids or ids[-1] != last:
        raise SavepointError(f"{checkpoint}/{what} has no entry for batch {last}")
    missing = sorted(set(range(ids[0], last + 1)) - set(ids))
    if missing:
        raise SavepointError(f"{checkpoint}/{what} is not contiguous: batches {missing} are missing")
    return ids


def _committed_state_ids(commit_text: str) -> dict[str, list[list[str]]]:
    """Format v2 commits name the state checkpoint id per operator and partition for version N+1."""
    lines = commit_text.splitlines()
    if len(lines) < 2:
        return {}
    ids = json.loads(lines[1]).get("stateUniqueIds") or {}
    return {str(operator): partitions for operator, partitions in ids.items()}


def _rocksdb_references(zip_path: Path) -> list[Path]:
    """The SST and log files a RocksDB checkpoint zip needs, from the `metadata` it carries."""
    try:
        with zipfile.ZipFile(zip_path) as archive:
            text = archive.read("metadata").decode()
    except FileNotFoundError as exc:
        raise _Vanished(str(zip_path)) from exc
    except (KeyError, zipfile.BadZipFile) as exc:
        raise SavepointError(f"RocksDB checkpoint {zip_path} has no readable metadata: {exc}") from exc
    store_dir = zip_path.parent
    lines = text.splitlines()
    described = json.loads(lines[1] if len(lines) > 1 else lines[0])
    references = [store_dir / "SSTs" / sst["dfsSstFileName"] for sst in described.get("sstFiles", [])]
    references += [store_dir / "logs" / log["dfsLogFileName"] for log in described.get("logFiles", [])]
    return references


def _store_files(store_dir: Path, version: int, wanted_ids: set[str] | None) -> list[Path]:
    """The files that rebuild one state store at `version`: newest snapshot up to it + deltas after.

    `wanted_ids` (checkpoint format v2) restricts the files of `version` itself to the ids the
    commit log recorded, so a retried task's orphaned checkpoint is not taken instead.
    """
    by_version: dict[int, list[tuple[str, str | None, Path]]] = {}
    for path in store_dir.iterdir():
        match = _STATE_FILE.match(path.name)
        if match and path.is_file() and int(match.group(1)) <= version:
            by_version.setdefault(int(match.group(1)), []).append((match.group(3), match.group(2), path))
    if wanted_ids is not None and version in by_version:
        by_version[version] = [entry for entry in by_version[version] if entry[1] in wanted_ids]
    if not by_version.get(version):
        raise SavepointError(f"state store {store_dir} cannot be rebuilt: no file for version {version}")
    snapshots = [
        v for v, entries in by_version.items() if any(kind in _STATE_SNAPSHOTS for kind, _, _ in entries)
    ]
    base = max(snapshots, default=0)
    chain = range(base + 1, version + 1)
    gaps = [v for v in chain if v not in by_version]
    if gaps:
        raise SavepointError(
            f"state store {store_dir} cannot be rebuilt at version {version}: versions {gaps} missing"
        )
    needed: list[Path] = []
    if base:
        needed += [path for kind, _, path in by_version[base] if kind in _STATE_SNAPSHOTS]
    for v in chain:
        needed += [path for kind, _, path in by_version[v] if kind not in _STATE_SNAPSHOTS]
    for path in list(needed):
        if path.suffix == ".zip":
            needed += _rocksdb_references(path)
    return needed


def _leading_batch(name: str) -> int:
    """The batch id a metadata file name starts with; 0 for names that carry none."""
    match = _LEADING_BATCH.match(name)
    return int(match.group(1)) if match else 0


def _state_files(checkpoint: Path, batch_id: int, commit_text: str) -> list[Path]:
    """Every state file a restart at `batch_id` needs (state version `batch_id` + 1)."""
    state_root = checkpoint / "state"
    if not state_root.is_dir():
        return []
    committed_ids = _committed_state_ids(commit_text)
    needed: list[Path] = []
    for directory in sorted(p for p in state_root.rglob("*") if p.is_dir()):
        relative = directory.relative_to(state_root).parts
        if _ROCKSDB_FILE_DIRS & set(relative):
            continue
        if _STATE_METADATA_DIRS & set(relative):
            # Metadata written for batches after N describes state the savepoint does not hold.
            needed += [
                path
                for path in directory.iterdir()
                if path.is_file()
                and not path.name.startswith(".")
                and not path.name.endswith(".crc")
                and _leading_batch(path.name) <= batch_id
            ]
            continue
        if not any(_STATE_FILE.match(path.name) for path in directory.iterdir()):
            continue
        wanted: set[str] | None = None
        partitions = committed_ids.get(relative[0], [])
        if len(relative) > 1 and relative[1].isdigit():
            if int(relative[1]) >= len(partitions) > 0:
                raise SavepointError(
                    f"commits/{batch_id} records state ids for {len(partitions)} partitions of operator "
                    f"{relative[0]}, but {directory} exists"
                )
            if partitions:
                wanted = set(partitions[int(relative[1])])
        needed += _store_files(directory, batch_id + 1, wanted)
    return needed


def _plan(checkpoint: Path, sink_log: Path) -> _Plan:
    """Choose N (the highest commit) and list what a savepoint at N holds."""
    commits = log_entries(checkpoint / "commits")
    if not commits:
        raise SavepointError(f"{checkpoint} has no committed batch to save")
    batch_id = max(commits)
    offsets = log_entries(checkpoint / "offsets")
    commit_ids = _contiguous_to(commits, batch_id, "commits", checkpoint)
    offset_ids = _contiguous_to(offsets, batch_id, "offsets", checkpoint)
    try:
        commit_text = commits[batch_id][0].read_text()
        offsets_entry = offsets[batch_id][0].read_bytes()
    except FileNotFoundError as exc:
        raise _Vanished(str(exc)) from exc

    files: list[tuple[str, Path]] = []
    for ids, name, entries in ((offset_ids, "offsets", offsets), (commit_ids, "commits", commits)):
        files += [(f"checkpoint/{name}/{i}", entries[i][0]) for i in ids]
    # Each source's log up to the entry batch N's offset points at (source logs count their own ids).
    for index, offset in enumerate(read_offsets(offsets_entry)[1]):
        source_dir = checkpoint / "sources" / str(index)
        for i, paths in sorted(log_entries(source_dir).items()):
            if i <= source_log_offset(offset):
                files += [(f"checkpoint/sources/{index}/{p.name}", p) for p in paths]
    for i, paths in sorted(log_entries(sink_log).items()):
        if i <= batch_id:
            files += [(f"sink/_spark_metadata/{p.name}", p) for p in paths]
    files += [
        (f"checkpoint/{p.relative_to(checkpoint)}", p)
        for p in _state_files(checkpoint, batch_id, commit_text)
    ]
    metadata = checkpoint / "metadata"
    if not metadata.is_file():
        raise SavepointError(f"{checkpoint} has no metadata file")
    files.append(("checkpoint/metadata", metadata))
    return _Plan(batch_id=batch_id, files=tuple(dict.fromkeys(files)), offsets=offsets_entry)


# --- copying -------------------------------------------------------------------------------------


def _copy_file(
    transfer: S3Transfer,
    platform: PlatformConfig,
    job: str,
    relative: str,
    local: Path,
    stored: dict[str, int],
    task: progress.Task,
) -> tuple[SavepointFile, int]:
    """Hash one file and upload it unless the content store has it; (entry, bytes uploaded)."""
    try:
        size, sha256 = file_digest(local)
        entry = SavepointFile(path=relative, size=size, sha256=sha256)
        if stored.get(entry.sha256) == entry.size:
            task.advance(entry.size)
            return entry, 0
        transfer.upload_file(
            str(local), platform.s3.bucket, _object_key(platform, job, entry.sha256), callback=task.advance
        )
    except FileNotFoundError as exc:
        # Purged by Spark before it was hashed or while it was uploaded.
        raise _Vanished(str(local)) from exc
    return entry, entry.size


def _copy(
    client: BaseClient, platform: PlatformConfig, job: str, plan: _Plan
) -> tuple[list[SavepointFile], int]:
    """Upload the plan's files, `metadata` after all the others; (manifest entries, bytes uploaded)."""
    stored = _stored_objects(client, platform, job)
    try:
        total_bytes = sum(local.stat().st_size for _, local in plan.files)
    except FileNotFoundError as exc:
        raise _Vanished(str(exc)) from exc
    *data_files, (metadata_path, metadata_file) = plan.files
    with (
        progress.track(f"savepoint of {job}", total=total_bytes, unit=progress.BYTES) as task,
        S3Transfer(client, _TRANSFER) as transfer,
        ThreadPoolExecutor(max_workers=UPLOAD_THREADS) as pool,
    ):
        task.status(f"batch {plan.batch_id}, {len(plan.files)} files")
        copied = list(
            pool.map(
                lambda item: _copy_file(transfer, platform, job, item[0], item[1], stored, task), data_files
            )
        )
        copied.append(_copy_file(transfer, platform, job, metadata_path, metadata_file, stored, task))
    return [entry for entry, _ in copied], sum(uploaded for _, uploaded in copied)


def _verify(client: BaseClient, platform: PlatformConfig, job: str, entries: list[SavepointFile]) -> None:
    """Every file the manifest will list is in the content store with its size."""
    stored = _stored_objects(client, platform, job)
    missing = [e.path for e in entries if stored.get(e.sha256) != e.size]
    if missing:
        raise SavepointError(
            f"savepoint of {job!r} is incomplete: {len(missing)} objects missing or of the wrong size "
            f"in s3://{platform.s3.bucket}/{_job_prefix(platform, job)}/objects/, e.g. {missing[:3]}"
        )


# --- manifest ------------------------------------------------------------------------------------


def _code_version() -> str:
    """The git commit of the platform code, or "unknown" outside a git checkout."""
    try:
        result = subprocess.run(
            ["git", "-C", str(_REPO_ROOT), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return result.stdout.strip() if result.returncode == 0 and result.stdout.strip() else "unknown"


def read_manifest(
    platform: PlatformConfig, savepoint: SavepointRecord, *, s3: BaseClient | None = None
) -> dict[str, Any]:
    """The manifest of a catalogued savepoint."""
    client = platform_client(platform, s3, SavepointError)
    with s3_errors(platform, f"reading {savepoint.manifest_key}", SavepointError):
        body = client.get_object(Bucket=platform.s3.bucket, Key=savepoint.manifest_key)["Body"].read()
    manifest: dict[str, Any] = json.loads(body)
    return manifest


def take_savepoint(
    platform: PlatformConfig,
    ledger: Ledger,
    spec: JobSpec,
    *,
    s3: BaseClient | None = None,
    bootstrap_of: str | None = None,
) -> SavepointRecord:
    """Copy the running (or stopped) job's checkpoint at its last committed batch into S3.

    `bootstrap_of` names the backfill run whose checkpoint this is (`ops.backfill.bootstrap`); the
    manifest keeps it, so a rewind refuses to restore it over a sink that has output. Never stops
    the job. Returns the ledger record, written only after the manifest is stored; on
    any failure nothing is catalogued and a later attempt starts afresh (objects already copied
    are reused).
    """
    job, paths = spec.name, JobPaths.of(platform, spec)
    checkpoint, sink_log = paths.checkpoint, paths.sink_log
    if not checkpoint.is_dir():
        raise SavepointError(f"job {job!r} has no checkpoint at {checkpoint}")
    client = platform_client(platform, s3, SavepointError)
    with s3_errors(platform, f"checking bucket {platform.s3.bucket!r}", SavepointError):
        client.head_bucket(Bucket=platform.s3.bucket)

    for attempt in range(1, COPY_ATTEMPTS + 1):
        try:
            plan = _plan(checkpoint, sink_log)
            with s3_errors(platform, f"copying the savepoint of {job!r}", SavepointError):
                entries, uploaded_bytes = _copy(client, platform, job, plan)
            break
        except _Vanished as exc:
            if attempt == COPY_ATTEMPTS:
                raise SavepointError(
                    f"checkpoint of {job!r} kept changing under the copy ({exc} was purged); try again"
                ) from exc
    with s3_errors(platform, f"verifying the savepoint of {job!r}", SavepointError):
        _verify(client, platform, job, entries)

    created_at = datetime.now(UTC)
    savepoint_id = f"{created_at:%Y%m%dT%H%M%S%fZ}-b{plan.batch_id}-{uuid.uuid4().hex[:6]}"
    batch_metadata, source_offsets = read_offsets(plan.offsets)
    watermark_ms = batch_metadata.get("batchWatermarkMs")
    manifest = {
        "format": MANIFEST_FORMAT,
        "job": job,
        "savepoint_id": savepoint_id,
        "created_at": created_at.isoformat(),
        "code_version": _code_version(),
        "config_version": spec.config_version,
        "spark_version": package_version("pyspark"),
        "batch_id": plan.batch_id,
        "watermark_ms": watermark_ms,
        "source_offsets": source_offsets,
        "files": [entry.__dict__ for entry in entries],
    }
    if bootstrap_of is not None:
        manifest["bootstrap_of"] = bootstrap_of
    manifest_key = _manifest_key(platform, job, savepoint_id)
    with s3_errors(platform, f"writing {manifest_key}", SavepointError):
        client.put_object(
            Bucket=platform.s3.bucket,
            Key=manifest_key,
            Body=json.dumps(manifest, indent=1).encode(),
            ContentType="application/json",
        )
    record = SavepointRecord(
        id=savepoint_id,
        job=job,
        batch_id=plan.batch_id,
        created_at=created_at,
        manifest_key=manifest_key,
        total_bytes=sum(entry.size for entry in entries),
        uploaded_bytes=uploaded_bytes,
        status=STATUS_COMPLETE,
        config_version=spec.config_version,
    )
    ledger.add_savepoint(record)
    return record


# --- retention -----------------------------------------------------------------------------------


def apply_retention(
    platform: PlatformConfig,
    ledger: Ledger,
    job: str,
    keep_count: int,
    max_age: timedelta,
    *,
    s3: BaseClient | None = None,
    orphan_grace: timedelta = timedelta(hours=1),
) -> list[str]:
    """Delete the job's savepoints beyond `keep_count` or older than `max_age`; the ids deleted.

    The newest complete savepoint is always kept. Manifests go first, so a savepoint half deleted
    by a crash never looks valid; then the ledger rows; then content objects no remaining manifest
    references. Objects younger than `orphan_grace` are spared, since a savepoint being taken right
    now may have uploaded them without having written its manifest yet. Needs no Spark.
    """
    if keep_count < 1:
        raise SavepointError(f"keep_count must be at least 1, got {keep_count}")
    now = datetime.now(UTC)
    savepoints = ledger.savepoints(job)
    newest_complete = next((sp.id for sp in savepoints if sp.status == STATUS_COMPLETE), None)
    doomed = [
        sp
        for index, sp in enumerate(savepoints)
        if sp.id != newest_complete and (index >= keep_count or now - sp.created_at > max_age)
    ]
    if not doomed:
        return []
    client = platform_client(platform, s3, SavepointError)
    bucket = platform.s3.bucket
    for savepoint in doomed:
        with s3_errors(platform, f"deleting {savepoint.manifest_key}", SavepointError):
            client.delete_object(Bucket=bucket, Key=savepoint.manifest_key)
        ledger.delete_savepoint_row(savepoint.id)

    job_prefix = _job_prefix(platform, job)
    with s3_errors(platform, f"collecting unreferenced objects of {job!r}", SavepointError):
        keys = list(list_objects(client, bucket, f"{job_prefix}/"))
        referenced: set[str] = set()
        for item in keys:
            if item["Key"].endswith(f"/{MANIFEST_NAME}"):
                manifest = json.loads(client.get_object(Bucket=bucket, Key=item["Key"])["Body"].read())
                referenced.update(entry["sha256"] for entry in manifest["files"])
        objects_prefix = f"{job_prefix}/objects/"
        unreferenced = [
            item["Key"]
            for item in keys
            if item["Key"].startswith(objects_prefix)
            and item["Key"][len(objects_prefix) :] not in referenced
            and now - item["LastModified"] >= orphan_grace
        ]
        with ThreadPoolExecutor(max_workers=UPLOAD_THREADS) as pool:
            list(pool.map(lambda key: client.delete_object(Bucket=bucket, Key=key), unreferenced))
    return [savepoint.id for savepoint in doomed]


# --- restoring -----------------------------------------------------------------------------------


def fetch_savepoint(
    platform: PlatformConfig, savepoint: SavepointRecord, destination: Path, *, s3: BaseClient | None = None
) -> dict[str, Any]:
    """Download a savepoint's files under `destination` (`checkpoint/...`, `sink/...`); its manifest.

    Every file is checked against the manifest's sha256, so a damaged object is never restored.
    """
    client = platform_client(platform, s3, SavepointError)
    manifest = read_manifest(platform, savepoint, s3=client)
    files: list[dict[str, Any]] = manifest["files"]
    with (
        progress.track(
            f"fetching savepoint {savepoint.id}",
            total=sum(entry["size"] for entry in files),
            unit=progress.BYTES,
        ) as task,
        S3Transfer(client, _TRANSFER) as transfer,
        ThreadPoolExecutor(max_workers=UPLOAD_THREADS) as pool,
    ):

        def fetch(entry: dict[str, Any]) -> None:
            key = _object_key(platform, savepoint.job, entry["sha256"])
            target = destination / entry["path"]
            target.parent.mkdir(parents=True, exist_ok=True)
            with s3_errors(platform, f"reading {key}", SavepointError):
                transfer.download_file(platform.s3.bucket, key, str(target), callback=task.advance)
            if file_digest(target)[1] != entry["sha256"]:
                target.unlink()
                raise SavepointError(
                    f"savepoint {savepoint.id}: object for {entry['path']} does not match its checksum"
                )

        list(pool.map(fetch, files))
    return manifest
