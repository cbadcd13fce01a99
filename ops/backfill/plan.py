"""Plan a backfill over the archive and stage its partitions for the Spark application.

A range is a span of arrival hours [start, end). Every hour of it must be sealed in the archive
(a partition still open would be read half) and within the archive's retention; an hour where
one source of the job has files and another none is an hour that source was idle, as it was live.
A job with a warehouse table publishes only the event-time partitions the range recomputes whole
(`ops.backfill.coverage`): a range that covers a partition only in part is refused before anything
runs, naming the partition and the arrival hours that would make it whole, unless the request
widens the range to them (`whole_partitions`); a bootstrap, whose range ends where the live job takes over,
runs and leaves such partitions unpublished. The plan names each partition's files by input and
is identified by a digest of the job file, the range and the manifests: planning the same range
again over the same archive finds the same run directory, which is how a killed backfill resumes,
while a late file re-sealed into an hour, or a changed job file, makes a new run.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from botocore.client import BaseClient

from ops import archive, progress
from ops.atomic import write_atomically
from ops.backfill.coverage import archive_feeds, assess, widen
from ops.driver.backfill import (
    MEMORY_PER_BATCH_BYTE,
    BackfillPlan,
    BackfillRun,
    PlannedPartition,
    feed_batches,
    memory_bytes,
)
from ops.exceptions import BackfillError, ConfigError
from ops.s3 import file_digest, platform_client
from ops.spec.job import JobSpec, find_job, job_file, load_job
from ops.spec.platform import PlatformConfig


@dataclass(frozen=True)
class BackfillRequest:
    """What an operator asked for (`warden backfill`, the `warden_backfill` form)."""

    job: str
    end: datetime
    start: datetime | None = None
    candidate: Path | None = None
    throttle_seconds: float = 0.0
    bootstrap: bool = False
    # Widen the range to the arrival hours that make every partition it writes whole.
    whole_partitions: bool = False
    # The bytes one micro-batch reads; None: the platform's `backfill.max_batch_bytes`.
    max_batch_bytes: int | None = None


def whole_hour(moment: datetime, what: str) -> datetime:
    """`moment` in UTC if it is a whole hour; BackfillError naming `what` otherwise."""
    moment = moment.astimezone(UTC) if moment.tzinfo else moment.replace(tzinfo=UTC)
    if moment != moment.replace(minute=0, second=0, microsecond=0):
        raise BackfillError(
            f"{what} {moment.isoformat()} is not a whole hour: archive partitions are arrival hours"
        )
    return moment


def backfill_root(platform: PlatformConfig) -> Path:
    """Where backfill runs keep their directories."""
    return platform.runtime_root / "backfill"


def batch_budget(platform: PlatformConfig, spec: JobSpec, request: BackfillRequest) -> int:
    """The bytes one micro-batch of the backfill reads: the request's, the platform's, or a quarter
    of the memory the job's tasks run in (the driver in local mode, an executor on a cluster)."""
    if request.max_batch_bytes is not None:
        return request.max_batch_bytes
    if platform.backfill.max_batch_bytes is not None:
        return platform.backfill.max_batch_bytes
    return memory_bytes(spec.operations.resources.task_memory(platform.spark)) // MEMORY_PER_BATCH_BYTE


def _spec_text(platform: PlatformConfig, request: BackfillRequest) -> tuple[JobSpec, bytes]:
    """The spec the run computes with and the bytes of its file: the installed job, or a candidate."""
    installed = find_job(request.job, platform.conf_dir)
    if request.candidate is None:
        return installed, job_file(request.job, platform.conf_dir).read_bytes()
    raw = request.candidate.read_bytes()
    scratch = backfill_root(platform) / ".candidates" / hashlib.sha256(raw).hexdigest()[:12]
    as_installed = scratch / f"{request.job}.yaml"
    as_installed.parent.mkdir(parents=True, exist_ok=True)
    as_installed.write_bytes(raw)
    try:
        candidate = load_job(as_installed)
    except ConfigError as exc:
        raise BackfillError(
            f"candidate {request.candidate} is not a valid spec for {request.job!r}: {exc.problem}"
        ) from exc
    if candidate.pipeline.inputs.keys() != installed.pipeline.inputs.keys():
        raise BackfillError(
            f"candidate {request.candidate} reads inputs {sorted(candidate.pipeline.inputs)}, the job "
            f"{sorted(installed.pipeline.inputs)}: a candidate is compared over the same archive"
        )
    return candidate, raw


def plan_backfill(
    platform: PlatformConfig, request: BackfillRequest, now: datetime, client: BaseClient | None = None
) -> tuple[BackfillRun, BackfillPlan, bytes]:
    """Plan `request` against the archive (reads only): the run directory, the plan and the job
    file it computes with. BackfillError when the range cannot be run.

    Without a start (a bootstrap), the range starts at the oldest archived hour of the job's inputs.
    """
    client = platform_client(platform, client, BackfillError)
    spec, spec_bytes = _spec_text(platform, request)
    installed = find_job(request.job, platform.conf_dir)
    if request.candidate is not None and request.bootstrap:
        raise BackfillError(
            "--bootstrap takes the installed job's state; a --spec candidate is only compared"
        )
    sources = {name: source.path for name, source in spec.pipeline.inputs.items()}
    archived = {name: archive.partitions(platform, path, client) for name, path in sources.items()}
    end = whole_hour(request.end, "--to")
    oldest = min((p.hour for found in archived.values() for p in found), default=None)
    if request.start is not None:
        start = whole_hour(request.start, "--from")
    elif oldest is not None:
        start = oldest
    else:
        raise BackfillError(
            f"the archive holds no input of {request.job!r} (sources {sorted(sources.values())})"
        )
    if start >= end:
        raise BackfillError(f"empty range: --from {start.isoformat()} is not before --to {end.isoformat()}")
    coverage = None
    if spec.operations.compaction is not None:
        feeds = archive_feeds(platform, spec, client)
        window_hours = spec.pipeline.event_partition_hours
        if request.whole_partitions:
            start, end = widen(feeds, start, end, window_hours)
        coverage = assess(feeds, start, end, window_hours)
        if coverage.partial:
            coverage = replace(coverage, widened=widen(feeds, start, end, window_hours))
    # The archive seals an hour `seal_after_minutes` after it ends.
    sealed_until = (now - timedelta(minutes=platform.archive.seal_after_minutes)).replace(
        minute=0, second=0, microsecond=0
    )
    if end > sealed_until:
        raise BackfillError(
            f"arrival hours from {max(start, sealed_until).isoformat()} are not sealed in the archive yet "
            f"(an hour is sealed archive.seal_after_minutes = {platform.archive.seal_after_minutes} after it "
            f"ends); backfill up to {sealed_until.isoformat()} at most"
        )
    horizon = now - timedelta(days=platform.archive.retention_days)
    if start < horizon.replace(minute=0, second=0, microsecond=0):
        raise BackfillError(
            f"arrival hours before {horizon:%Y-%m-%dT%H}:00 are past the archive's retention "
            f"(archive.retention_days = {platform.archive.retention_days}); the oldest archived hour of "
            f"{request.job!r} is {oldest.isoformat() if oldest else 'none'}"
        )
    hours = sorted({p.hour for found in archived.values() for p in found if start <= p.hour < end})
    if not hours:
        raise BackfillError(
            f"the archive holds no input of {request.job!r} between {start.isoformat()} and {end.isoformat()}"
        )
    # The budget decides which events are late (a batch's watermark moves at its end), so a run
    # under another budget is another run.
    budget = batch_budget(platform, spec, request)
    digest = hashlib.sha256(spec_bytes)
    digest.update(json.dumps([start.isoformat(), end.isoformat(), request.bootstrap, budget]).encode())
    partitions = []
    sizes: dict[int, dict[str, list[int]]] = {}
    for index, hour in enumerate(hours):
        files: dict[str, list[str]] = {}
        sizes[index] = {}
        for name, path in sources.items():
            entries = archive.read_manifest(platform, archive.Partition(path, hour), client) or []
            files[name] = [entry.name for entry in entries]
            sizes[index][name] = [entry.size for entry in entries]
            digest.update(json.dumps([name, hour.isoformat(), [e.__dict__ for e in entries]]).encode())
        partitions.append(PlannedPartition(index, hour, files, sum(map(sum, sizes[index].values()))))
    kind = "candidate" if request.candidate is not None else "job"
    run_id = f"{request.job}-{start:%Y%m%dT%H}-{end:%Y%m%dT%H}-{kind}-{digest.hexdigest()[:10]}"
    plan = BackfillPlan(
        run_id=run_id,
        job=request.job,
        config_version=spec.config_version,
        candidate=request.candidate is not None,
        start=start,
        end=end,
        partitions=tuple(partitions),
        sources=sources,
        throttle_seconds=request.throttle_seconds,
        bootstrap=request.bootstrap,
        compare_with=table_name(platform, installed) if request.candidate is not None else None,
        coverage=coverage,
        batches=feed_batches(partitions, sizes, budget),
        max_batch_bytes=budget,
    )
    return BackfillRun(backfill_root(platform) / run_id), plan, spec_bytes


def table_name(platform: PlatformConfig, spec: JobSpec) -> str:
    """The warehouse table a backfill of `spec` publishes into (and a candidate is diffed with);
    BackfillError when the job has none."""
    if spec.operations.compaction is None:
        raise BackfillError(
            f"job {spec.name!r} has no warehouse table (its file sets no operations.compaction): there is "
            "nothing to publish into or to diff a candidate with"
        )
    return f"{platform.warehouse.database}.{spec.name}"


def describe(plan: BackfillPlan, run: BackfillRun) -> list[str]:
    """The dry-run report: the micro-batches, in the order they would be fed, their partitions, and
    where output goes."""
    done = run.done()
    lines = [
        f"backfill {plan.job} ({'candidate ' if plan.candidate else ''}config {plan.config_version}) "
        f"over arrival hours {plan.start:%Y-%m-%dT%H}:00 .. {plan.end:%Y-%m-%dT%H}:00: "
        f"{len(plan.partitions)} partitions in {len(plan.batches)} micro-batches of at most "
        f"{plan.max_batch_bytes:,} bytes, oldest first",
        f"  run directory {run.root}" + (f" ({len(done)} micro-batches done: resumes)" if done else ""),
    ]
    if plan.coverage is not None:
        lines += ["warehouse partitions (by event time):", *plan.coverage.lines()]
    for batch in plan.batches:
        state = "done" if batch.index in done else "to run"
        lines.append(
            f"  batch {batch.index + 1:>4}  {batch.describe(plan.partitions)}  {batch.bytes:,} bytes  {state}"
        )
        for piece in batch.pieces:
            files = ", ".join(f"{name} {len(names)} files" for name, names in piece.files.items())
            lines.append(f"    {plan.partitions[piece.partition].label}  {files}")
    return lines


def refuse_partial(plan: BackfillPlan) -> None:
    """BackfillError when the plan would publish partitions it recomputes only in part (a bootstrap
    runs, and leaves them unpublished); it names them, the hours missing, and the whole range."""
    coverage = plan.coverage
    if coverage is None or not coverage.partial or plan.bootstrap:
        return
    assert coverage.widened is not None
    start, end = coverage.widened
    raise BackfillError(
        "\n".join(
            [
                f"backfill of {plan.job} over {plan.start:%Y-%m-%dT%H}:00 .. {plan.end:%Y-%m-%dT%H}:00 would "
                f"replace {len(coverage.partial)} warehouse partitions it recomputes only in part "
                "(their other rows come from arrival hours outside the range):",
                *[line for line in coverage.lines() if "REFUSED" in line],
                f"the smallest range that recomputes them whole is --from {start:%Y-%m-%dT%H}:00 --to "
                f"{end:%Y-%m-%dT%H}:00; pass --whole-partitions to widen the range to it",
            ]
        )
    )


def prepare_run(run: BackfillRun, plan: BackfillPlan, spec_bytes: bytes) -> bool:
    """Create (or keep, to resume) the run directory; whether an unfinished run is resumed.
    BackfillError, with nothing created, for a plan `refuse_partial` refuses.

    A finished run of the same plan is started afresh: a rerun recomputes the range and must give
    the same rows.
    """
    refuse_partial(plan)
    if run.is_complete():
        shutil.rmtree(run.root)
    resumed = run.plan_file.is_file()
    if not resumed:
        shutil.rmtree(run.root, ignore_errors=True)
        run.root.mkdir(parents=True)
        write_atomically(run.spec_file(plan.job), spec_bytes)
        run.write_plan(plan)
    return resumed


def fetch_partitions(
    platform: PlatformConfig, run: BackfillRun, plan: BackfillPlan, client: BaseClient | None = None
) -> int:
    """Download every partition not yet done or fetched into the run's staging, each file checked
    against its manifest's size and sha256; the bytes downloaded."""
    client = platform_client(platform, client, BackfillError)
    done = run.partitions_done()
    todo = [p for p in plan.partitions if p.index not in done and not run.fetched_marker(p.index).is_file()]
    fetched = 0
    with progress.track(
        f"fetching {len(todo)} archive partitions of {plan.job}",
        total=sum(p.bytes for p in todo),
        unit=progress.BYTES,
    ) as task:
        for partition in todo:
            for name, names in partition.files.items():
                if not names:
                    continue
                source = archive.Partition(plan.sources[name], partition.hour)
                target = run.staged(name, partition.index)
                shutil.rmtree(target, ignore_errors=True)
                entries = archive.fetch(platform, source, target, client)
                if sorted(entry.name for entry in entries) != sorted(names):
                    raise BackfillError(
                        f"archive partition {source} changed since the backfill was planned; plan again"
                    )
                for entry in entries:
                    if file_digest(target / entry.name) != (entry.size, entry.sha256):
                        raise BackfillError(f"{source}: {entry.name} does not match its manifest's sha256")
                    fetched += entry.size
                    task.advance(entry.size)
            write_atomically(run.fetched_marker(partition.index), partition.label)
    return fetched
