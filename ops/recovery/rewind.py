"""Rewind a stopped job to a savepoint, and leave its later batches queued for an exact replay.

Rewinding job J to savepoint S (anchored on batch N) when J's checkpoint has run up to batch M:

1. Check and plan, touching nothing (`preflight`, the one check of the request and of the
   reconcile loop, run before any driver is stopped): the batches N+1..M to recompute, the sink
   files those batches wrote (and their rows), the input files the replay must read again. Refuse
   when the savepoint cannot be restored or the replay would not reproduce the original batches
   (every cause is in `ops.recovery.refusals`); a refusal is a ledger row and a message.
2. With the job stopped, under the job's lock: keep the original `offsets/N+1..M` in the job's
   replay queue (`<runtime>/jobs/<job>/replay/`), switch the sink log back to the savepoint's (so
   readers stop seeing the later batches), delete the files those batches wrote, and swap in a
   checkpoint rebuilt from the savepoint (its state, offsets, commits and sink log) plus the live
   file-source logs (which record what each original batch read). The script UDF versions the
   later batches ran are forgotten, so the replay runs the ones installed then.
3. The driver replays the queue before it starts its normal trigger (`jobs.runtime`): offsets
   entry by entry, one trigger-once query per batch, so batch boundaries, watermarks and
   late-data decisions are those of the original run while the current code computes them.

Spark alone would get this wrong in three ways (docs/architecture.md §7): deleting only offsets
and commits makes the file sink skip the replayed batches; stale state files above N+1 win on
load with checkpoint format v1; and replaying all the remaining input as one catch-up batch
changes the watermark. Each step is safe to run again after a crash: the queue is written before
the swap, a half-done swap is undone (and a half-done deletion of the later batches' files
finished) before the next rewind plans, and a second rewind to the same savepoint rebuilds the
same checkpoint from the same files.

`warden rewind` is a recovery operation (`rewind`) of a stopped job, carried out as steps of the
supervisor's loop (`ops.control.policy`); `restate` is one of a running job, whose driver the loop
stops only once the check has passed. `rewind_job` is the rewind for a caller that holds no lock,
and what a dry run uses.

One module of about 680 lines on purpose: the check, the plan, the queue and the swap are one
protocol whose crash safety depends on their order, read top to bottom; the refusals it can meet
are in `ops.recovery.refusals`, the restatement and upgrade requests in their own modules.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from botocore.client import BaseClient

from ops import archive
from ops.atomic import write_atomically
from ops.driver.checkpoint import (
    log_entries,
    query_id,
    read_offsets,
    sink_files,
    source_files,
    source_log_offset,
    write_log_entry,
)
from ops.driver.udf_versions import forget_after
from ops.exceptions import ArchiveError, OperationInProgressError, RewindError, SavepointError
from ops.ledger.locks import job_lock, table_lock
from ops.ledger.records import OperationRecord, SavepointRecord
from ops.ledger.store import Ledger
from ops.recovery.loop import ControlLoop, LoopServices
from ops.recovery.refusals import Cause, Refusal, RewindRefused, record_refusal, refusal_text
from ops.savepoints.store import STATUS_COMPLETE, STATUS_SUPERSEDED, fetch_savepoint
from ops.spec.job import find_job
from ops.spec.paths import JobPaths
from ops.spec.platform import PlatformConfig
from ops.warehouse.sinklog import EXPIRED_MARKER

# Beside the staging area's download: the savepoint it holds, written once every file is verified.
FETCHED_MARKER = "fetched.json"


@dataclass(frozen=True)
class RewindPlan:
    """What a rewind to `savepoint` removes and what the replay recomputes."""

    job: str
    savepoint: SavepointRecord
    last_batch: int
    replay_offsets: dict[int, bytes] = field(repr=False)
    sink_files: tuple[Path, ...]
    sink_rows: int
    input_files: tuple[Path, ...]
    input_bytes: int
    # Input files of the batches to replay that the landing zone no longer holds but the archive
    # does: put back before the replay (`execute_rewind`).
    from_archive: tuple[tuple[Path, archive.Partition, archive.ArchivedFile], ...] = ()

    @property
    def batch_id(self) -> int:
        """N: the savepoint's batch, the last one kept as it is."""
        return self.savepoint.batch_id

    @property
    def replay_batches(self) -> range:
        return range(self.batch_id + 1, self.last_batch + 1)

    def outcome(self) -> str:
        """The line a finished rewind leaves in the ledger."""
        return rewind_outcome(self.batch_id, self.last_batch)

    def describe(self) -> str:
        """The dry-run report: what would be removed, recomputed and read again."""
        batches = self.replay_batches
        span = f"batches {batches.start}..{batches.stop - 1}" if batches else "no batches"
        return "\n".join(
            [
                f"rewind {self.job} to savepoint {self.savepoint.id} (batch {self.batch_id}, "
                f"taken {self.savepoint.created_at:%Y-%m-%d %H:%M:%S} UTC)",
                f"  recompute  {span} ({len(batches)}), one batch at a time with their original offsets",
                f"  remove     {len(self.sink_files)} sink files holding {self.sink_rows:,} rows",
                f"  replay     {len(self.input_files)} input files, {self.input_bytes:,} bytes"
                + (f" ({len(self.from_archive)} restored from the archive)" if self.from_archive else ""),
            ]
        )


def rewind_outcome(batch_id: int, last_batch: int) -> str:
    """The ledger line of a rewind to batch `batch_id` of a checkpoint that had run to `last_batch`."""
    batches = range(batch_id + 1, last_batch + 1)
    queued = (
        f"batches {batches.start}..{batches.stop - 1} queued for replay" if batches else "nothing to replay"
    )
    return f"rewound to batch {batch_id}; {queued}"


def parse_moment(text: str) -> datetime:
    """An ISO 8601 time as given by an operator; UTC when it names no zone."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError as exc:
        raise ValueError(f"not an ISO 8601 time: {text!r}") from exc
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def choose_savepoint(
    ledger: Ledger, job: str, *, savepoint_id: str | None = None, before: datetime | None = None
) -> SavepointRecord:
    """The savepoint named by id, or the newest complete one taken before `before`.

    RewindRefused when there is none to rewind to: an unknown id, another job's savepoint, a
    superseded one, or a time before the oldest complete savepoint.
    """
    catalogue = ledger.savepoints(job)
    savepoints = [sp for sp in catalogue if sp.status == STATUS_COMPLETE]
    if savepoint_id is not None:
        named = next((sp for sp in catalogue if sp.id == savepoint_id), None)
        if named is None:
            other = ledger.savepoint(savepoint_id)
            if other is not None:
                raise RewindRefused(
                    [
                        Refusal(
                            Cause.OTHER_JOB,
                            f"savepoint {savepoint_id!r} is a savepoint of job {other.job!r}, not of {job!r}",
                        )
                    ]
                )
            raise RewindRefused(
                [
                    Refusal(
                        Cause.NO_SAVEPOINT,
                        f"job {job!r} has no savepoint {savepoint_id!r} (see `warden savepoints {job}`)",
                    )
                ]
            )
        if named.status != STATUS_COMPLETE:
            raise RewindRefused(
                [
                    Refusal(
                        Cause.SUPERSEDED,
                        f"savepoint {savepoint_id!r} is {named.status}: a rewind went back before it, "
                        "and the output it lists is gone",
                    )
                ]
            )
        return named
    if before is None:
        raise RewindError("name a savepoint id or a time to rewind to")
    match = next((sp for sp in savepoints if sp.created_at < before), None)
    if match is None:
        oldest = (
            f"the oldest complete one was taken {savepoints[-1].created_at:%Y-%m-%d %H:%M:%S} UTC"
            if savepoints
            else "it has no complete savepoint at all"
        )
        raise RewindRefused(
            [
                Refusal(
                    Cause.NO_SAVEPOINT,
                    f"job {job!r} has no savepoint taken before {before.isoformat()}: {oldest}",
                )
            ]
        )
    return match


def _queued_offsets(paths: JobPaths, after: int) -> dict[int, bytes]:
    """Every original offsets entry above `after`: the live checkpoint's and those still queued."""
    live = log_entries(paths.offsets)
    queued = log_entries(paths.replay)
    offsets = {i: paths[0].read_bytes() for i, paths in queued.items() if i > after}
    offsets.update({i: paths[0].read_bytes() for i, paths in live.items() if i > after})
    return offsets


def plan_rewind(
    platform: PlatformConfig,
    job: str,
    savepoint: SavepointRecord,
    *,
    saved_source_offsets: list[Any],
    saved_sink_files: set[Path],
) -> RewindPlan:
    """Work out a rewind to `savepoint` without changing anything; refuse if it cannot be exact.

    `saved_source_offsets` and `saved_sink_files` describe the savepoint: its sources' offsets at
    batch N (from the manifest) and the sink files its sink log lists. RewindRefused names every
    reason found: the savepoint's output is not in the job's sink, the offsets of a batch to
    replay are gone (purged, or the whole checkpoint is gone while the sink log has later
    batches), input files those batches read are no longer in the landing zone, or the savepoint
    lists sink files the bounded sink log has expired since (`ops.warehouse.sinklog`).
    """
    spec = find_job(job, platform.conf_dir)
    paths = JobPaths.of(platform, spec)
    n = savepoint.batch_id
    refusals: list[Refusal] = []
    elsewhere = sorted(path for path in saved_sink_files if not path.is_relative_to(paths.sink))
    if elsewhere:
        refusals.append(
            Refusal(
                Cause.INCOMPATIBLE_SPEC,
                f"savepoint {savepoint.id} lists output outside the job's sink {paths.sink}, e.g. "
                f"{elsewhere[0]}: the sink has moved since, and a new sink is a new job",
            )
        )
    expired = sorted(
        path for path in saved_sink_files if not path.is_file() and (path.parent / EXPIRED_MARKER).is_file()
    )
    if expired:
        horizon = spec.operations.compaction
        refusals.append(
            Refusal(
                Cause.SINK_EXPIRED,
                f"savepoint {savepoint.id} (batch {n}) lists {len(expired)} sink files that have expired "
                "since: their partitions were published to the warehouse and passed the sink's rewind "
                "horizon (operations.compaction.sink_retention_hours = "
                f"{horizon.sink_retention_hours if horizon else None}), e.g. {expired[0]}; "
                "rewind to a savepoint taken after their expiry",
            )
        )
    offsets = _queued_offsets(paths, n)
    # The sink log names the batches that wrote output, even when their offsets are gone.
    sink_batches = [batch for batch in log_entries(paths.sink_log) if batch > n]
    last = max([*offsets, *sink_batches], default=n)
    missing = sorted(set(range(n + 1, last + 1)) - set(offsets))
    if missing:
        where = (
            f"the checkpoint {paths.checkpoint} is gone"
            if not paths.offsets.is_dir()
            else "Spark keeps the last spark.sql.streaming.minBatchesToRetain"
        )
        refusals.append(
            Refusal(
                Cause.OFFSETS_PURGED,
                f"cannot replay {job!r} from batch {n}: the offsets of batches {missing[0]}..{missing[-1]} "
                f"are no longer retained ({where}); rewind to a newer savepoint",
            )
        )
    inputs: list[Path] = []
    if last in offsets:
        _, last_offsets = read_offsets(offsets[last])
        for index, offset in enumerate(last_offsets):
            saved = saved_source_offsets[index] if index < len(saved_source_offsets) else None
            source_log = paths.sources / str(index)
            inputs += source_files(source_log, source_log_offset(saved), source_log_offset(offset))
    from_archive, gone = _archived_inputs(platform, [path for path in inputs if not path.is_file()])
    if gone:
        refusals.append(
            Refusal(
                Cause.INPUT_GONE,
                f"cannot replay {job!r} from batch {n}: {len(gone)} input files of the batches to replay "
                f"are no longer retained in the landing zone nor in the archive (archive.retention_days "
                f"= {platform.archive.retention_days}), e.g. {gone[0]}",
            )
        )
    if refusals:
        raise RewindRefused(refusals)
    later_files = sorted(path for path in sink_files(paths.sink_log) - saved_sink_files if path.is_file())
    return RewindPlan(
        job=job,
        savepoint=savepoint,
        last_batch=last,
        replay_offsets=offsets,
        sink_files=tuple(later_files),
        sink_rows=sum(pq.ParquetFile(path).metadata.num_rows for path in later_files),
        input_files=tuple(inputs),
        input_bytes=sum(path.stat().st_size for path in inputs if path.is_file())
        + sum(entry.size for _, _, entry in from_archive),
        from_archive=tuple(from_archive),
    )


def _archived_inputs(
    platform: PlatformConfig, gone: list[Path]
) -> tuple[list[tuple[Path, archive.Partition, archive.ArchivedFile]], list[Path]]:
    """Of the input files gone from the landing zone, those the archive holds (with where) and
    those it does not hold either. The rewind horizon is the archive's retention."""
    if not gone:
        return [], []
    by_source: dict[str, list[Path]] = {}
    for path in gone:
        if path.is_relative_to(platform.landing_root):
            by_source.setdefault(str(path.parent.relative_to(platform.landing_root)), []).append(path)
    found: list[tuple[Path, archive.Partition, archive.ArchivedFile]] = []
    try:
        for source, paths in by_source.items():
            located = archive.locate(platform, source, [path.name for path in paths])
            found += [(path, *located[path.name]) for path in paths if path.name in located]
    except ArchiveError:
        # An archive that cannot be read holds nothing for this rewind: the files stay gone.
        return [], gone
    restored = {path for path, _, _ in found}
    return found, [path for path in gone if path not in restored]


def _staging_dir(platform: PlatformConfig, job: str) -> Path:
    """A rewind's scratch area beside the checkpoints, removed when the rewind completes."""
    return platform.checkpoint_root / f".rewind-{job}"


def prepare_rewind(
    platform: PlatformConfig,
    ledger: Ledger,
    job: str,
    *,
    savepoint_id: str | None = None,
    before: datetime | None = None,
    s3: BaseClient | None = None,
) -> RewindPlan:
    """Choose the savepoint, download it to the staging area (once) and plan the rewind.

    Nothing live changes. `execute_rewind` carries the plan out; `discard_rewind` drops the
    download (after a dry run or a refusal). RewindRefused when the rewind cannot be exact.
    """
    savepoint = choose_savepoint(ledger, job, savepoint_id=savepoint_id, before=before)
    _recover_interrupted(platform, job)
    manifest = _fetch_once(platform, savepoint, s3)
    if manifest.get("job") != job:
        raise RewindRefused(
            [
                Refusal(
                    Cause.INCOMPATIBLE_SPEC,
                    f"savepoint {savepoint.id}'s manifest is of job {manifest.get('job')!r}, not {job!r}",
                )
            ]
        )
    bootstrap_of = manifest.get("bootstrap_of")
    if bootstrap_of is not None:
        live_output = sorted(sink_files(JobPaths.of(platform, find_job(job, platform.conf_dir)).sink_log))
        if live_output:
            raise RewindRefused(
                [
                    Refusal(
                        Cause.SINK_HAS_OUTPUT,
                        f"savepoint {savepoint.id} bootstraps {job!r} from backfill {bootstrap_of}, but "
                        f"the job's sink already holds {len(live_output)} committed files (e.g. "
                        f"{live_output[0]}), which restoring it would remove: a bootstrap savepoint is for "
                        "a new job or one whose sink is empty (publish history with `warden backfill`)",
                    )
                ]
            )
    staging = _staging_dir(platform, job)
    return plan_rewind(
        platform,
        job,
        savepoint,
        saved_source_offsets=list(manifest["source_offsets"]),
        saved_sink_files=sink_files(staging / "sink" / "_spark_metadata"),
    )


def _fetch_once(
    platform: PlatformConfig, savepoint: SavepointRecord, s3: BaseClient | None
) -> dict[str, Any]:
    """The savepoint's files in the staging area and its manifest, downloaded and verified once.

    The check before an operation stops the job downloads it; the rewind after the stop finds the
    verified copy (named in `FETCHED_MARKER`, written last) and does not download it again. A
    savepoint that cannot be read is a refusal (RewindRefused).
    """
    staging = _staging_dir(platform, savepoint.job)
    marker = staging / FETCHED_MARKER
    if marker.is_file():
        fetched = json.loads(marker.read_text())
        if fetched["savepoint"] == savepoint.id:
            manifest: dict[str, Any] = fetched["manifest"]
            return manifest
    discard_rewind(platform, savepoint.job)
    try:
        manifest = fetch_savepoint(platform, savepoint, staging, s3=s3)
    except (SavepointError, ValueError, KeyError) as exc:
        discard_rewind(platform, savepoint.job)
        raise RewindRefused(
            [Refusal(Cause.SAVEPOINT_UNREADABLE, f"savepoint {savepoint.id} cannot be restored: {exc}")]
        ) from exc
    write_atomically(marker, json.dumps({"savepoint": savepoint.id, "manifest": manifest}))
    return manifest


def _recover_interrupted(platform: PlatformConfig, job: str) -> None:
    """Undo the half of a swap an interrupted rewind left, finish its deletions, drop its staging.

    A rewind that died between moving a live directory aside and moving its replacement in left
    the live one only under `retired/`; it goes back, so the new rewind plans from it. One that
    died after swapping the sink log left some of the later batches' files behind, listed by the
    retired log only: they go now, since the new plan, made from the swapped log, cannot see them.
    A staging area without `retired/` holds only a verified download, kept for the next rewind.
    """
    retired = _staging_dir(platform, job) / "retired"
    if not retired.exists():
        return
    paths = JobPaths.of(platform, find_job(job, platform.conf_dir))
    for moved, live in ((retired / "checkpoint", paths.checkpoint), (retired / "sink-log", paths.sink_log)):
        if moved.exists() and not live.exists():
            moved.rename(live)
    if (retired / "sink-log").is_dir() and paths.sink_log.is_dir():
        for path in sink_files(retired / "sink-log") - sink_files(paths.sink_log):
            path.unlink(missing_ok=True)
    discard_rewind(platform, job)


def discard_rewind(platform: PlatformConfig, job: str) -> None:
    """Remove a prepared rewind's download."""
    shutil.rmtree(_staging_dir(platform, job), ignore_errors=True)


def execute_rewind(platform: PlatformConfig, plan: RewindPlan) -> None:
    """Carry out a prepared rewind. The job must be stopped and its lock held by the caller."""
    job = plan.job
    staging = _staging_dir(platform, job)
    job_paths = JobPaths.of(platform, find_job(job, platform.conf_dir))
    checkpoint, sink_log = job_paths.checkpoint, job_paths.sink_log
    retired = staging / "retired"
    retired.mkdir(parents=True, exist_ok=True)

    # 0. Input the landing zone no longer holds, back from the archive (each file is checked).
    for path, partition, entry in plan.from_archive:
        if not path.is_file():
            archive.restore(platform, partition, entry, path)

    # 1. The replay queue first: from here on every step can be redone from the savepoint.
    queue = job_paths.replay
    for batch_id, content in plan.replay_offsets.items():
        write_log_entry(queue / str(batch_id), content)
    for batch_id, paths in log_entries(queue).items():
        if batch_id not in plan.replay_offsets:
            paths[0].unlink()

    # 2. The savepoint's sink log replaces the live one, so readers stop seeing the later
    #    batches; then the files those batches wrote go.
    _swap(staging / "sink" / "_spark_metadata", sink_log, retired / "sink-log")
    for path in plan.sink_files:
        path.unlink(missing_ok=True)

    # 3. The checkpoint: the savepoint's, plus the live source logs that record what each
    #    original batch read (the replay reads the same files).
    rebuilt = staging / "checkpoint"
    for live_entry in _files(checkpoint / "sources"):
        target = rebuilt / live_entry.relative_to(checkpoint)
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(live_entry, target)
    # The batches to recompute run the script UDF versions installed when they run again.
    query = query_id(checkpoint)
    if query is not None:
        forget_after(job_paths.udf_versions, query, plan.batch_id)
    _swap(rebuilt, checkpoint, retired / "checkpoint")
    discard_rewind(platform, job)


def _files(directory: Path) -> Iterator[Path]:
    if directory.is_dir():
        yield from (p for p in directory.rglob("*") if p.is_file() and not p.name.startswith("."))


def _swap(replacement: Path, live: Path, retired: Path) -> None:
    """Move `live` aside to `retired` and `replacement` into its place."""
    shutil.rmtree(retired, ignore_errors=True)
    if live.exists():
        live.rename(retired)
    live.parent.mkdir(parents=True, exist_ok=True)
    if replacement.exists():
        replacement.rename(live)
    else:
        live.mkdir()


def complete_rewind(platform: PlatformConfig, ledger: Ledger, plan: RewindPlan) -> None:
    """Carry out a prepared rewind and mark the savepoints taken after its own as superseded
    (they list sink files the rewind deleted). The job must be stopped and its operation lock
    held; the table lock is taken here, so that no compaction or backfill publish is reading the
    sink while the rewind removes files from it (it waits for one that is)."""
    with table_lock(platform, plan.job, "rewind"):
        execute_rewind(platform, plan)
    newer = [sp.id for sp in ledger.savepoints(plan.job) if sp.created_at > plan.savepoint.created_at]
    ledger.set_savepoint_status(newer, STATUS_SUPERSEDED)


@dataclass(frozen=True)
class Preflight:
    """What the check before a rewind or restate found: every refusal, or the plan to carry out."""

    job: str
    kind: str
    refusals: tuple[Refusal, ...]
    plan: RewindPlan | None

    def text(self) -> str:
        return refusal_text(self.kind, self.job, self.refusals)


def preflight(
    supervisor: LoopServices,
    job: str,
    kind: str,
    *,
    savepoint_id: str | None = None,
    before: datetime | None = None,
    operation: OperationRecord | None = None,
    s3: BaseClient | None = None,
) -> Preflight:
    """Every refusal a rewind or restate (`kind`) of `job` would meet, found before anything stops.

    The one check of both paths: the request (`rewind`, `restate`, their dry runs, the Airflow
    form) runs it before recording the operation, and the reconcile loop runs it again, for the
    recorded `operation`, in the pass that would stop the driver and in the pass that rewinds, so
    what changed since the request (input removed, a driver started) is refused with the driver
    untouched. The caller holds the job's lock. Reads only, but for the savepoint's download into
    the staging area, verified, kept for the rewind that follows (the pass after the stop finds it
    there) and dropped on a refusal. Another open
    operation, or a running driver for a rewind, is refused without looking further.
    """
    platform, ledger = supervisor.platform, supervisor.ledger
    open_operation = ledger.operation(job)
    if open_operation is not None and (operation is None or open_operation.id != operation.id):
        busy = OperationInProgressError(
            job, open_operation.kind, open_operation.step, open_operation.requested_at
        )
        return Preflight(job, kind, (Refusal(Cause.OPERATION_OPEN, str(busy)),), None)
    if kind == "rewind":
        run = ledger.current_run(job)
        if run is not None and supervisor.backend.is_alive(run):
            running = Refusal(
                Cause.JOB_RUNNING,
                f"job {job!r} is running (run {run.run_id}); suspend it first (warden stop {job}), "
                "or restate it",
            )
            return Preflight(job, kind, (running,), None)
    try:
        plan = prepare_rewind(platform, ledger, job, savepoint_id=savepoint_id, before=before, s3=s3)
    except RewindRefused as refused:
        discard_rewind(platform, job)
        return Preflight(job, kind, refused.refusals, None)
    return Preflight(job, kind, (), plan)


def rewind_job(
    supervisor: ControlLoop,
    job: str,
    *,
    reason: str,
    savepoint_id: str | None = None,
    before: datetime | None = None,
    dry_run: bool = False,
    kind: str = "rewind",
    s3: BaseClient | None = None,
) -> RewindPlan:
    """Rewind a stopped job to a savepoint under its lock, now; a dry run only reports the plan.

    Runs `preflight` first: a refusal raises RewindError naming every cause, with nothing touched,
    and (unless a dry run, which records nothing) leaves a `refused` decision row. A dry run of a
    restate (`kind`) may look at a running job (its plan is as of now: the job keeps adding
    batches). The rewind is a decision row in the ledger, written before acting, with the plan as
    its inputs. Savepoints taken after the chosen one are marked superseded: they list sink files
    the rewind deleted. The replay happens when the job is next started. Operators use `rewind`,
    which the reconcile loop carries out and finishes even if the caller dies.
    """
    platform, ledger = supervisor.platform, supervisor.ledger
    find_job(job, platform.conf_dir)  # an unknown job or invalid file: a ConfigError
    with job_lock(platform, job, "rewind"):
        checked = preflight(supervisor, job, kind, savepoint_id=savepoint_id, before=before, s3=s3)
        if checked.plan is None:
            if dry_run:
                raise RewindError(checked.text())
            asked = {"savepoint": savepoint_id, "before": before.isoformat() if before else None}
            raise RewindError(record_refusal(ledger, job, kind, reason, checked.refusals, asked))
        plan = checked.plan
        if dry_run:
            discard_rewind(platform, job)
            return plan
        decision = ledger.record_decision(job, "rewind", reason, plan_inputs(plan))
        try:
            complete_rewind(platform, ledger, plan)
        except Exception as exc:
            ledger.set_outcome(decision, f"failed: {exc}")
            raise
        ledger.set_outcome(decision, plan.outcome())
        return plan


def plan_inputs(plan: RewindPlan) -> dict[str, Any]:
    """A rewind plan as decision inputs."""
    return {
        "savepoint": plan.savepoint.id,
        "batch_id": plan.batch_id,
        "last_batch": plan.last_batch,
        "sink_files_removed": len(plan.sink_files),
        "sink_rows_removed": plan.sink_rows,
        "input_files": len(plan.input_files),
        "input_bytes": plan.input_bytes,
    }


def request_operation(
    supervisor: ControlLoop,
    job: str,
    kind: str,
    *,
    reason: str,
    savepoint_id: str | None = None,
    before: datetime | None = None,
) -> tuple[OperationRecord, RewindPlan]:
    """Check a rewind or restate (`preflight`) and record it for the reconcile loop; the operation
    and the plan as of the request.

    A refusal is a `refused` decision row and a RewindError naming every cause; nothing is
    recorded as an operation and the job is left exactly as it was.
    """
    find_job(job, supervisor.platform.conf_dir)  # an unknown job or invalid file: a ConfigError
    asked = {"savepoint": savepoint_id, "before": before.isoformat() if before else None}
    with job_lock(supervisor.platform, job, f"{kind} check"):
        checked = preflight(supervisor, job, kind, savepoint_id=savepoint_id, before=before)
        # The passes that carry the operation out may run on another machine (an Airflow worker)
        # and check it again there: the request keeps no download.
        discard_rewind(supervisor.platform, job)
    if checked.plan is None:
        raise RewindError(record_refusal(supervisor.ledger, job, kind, reason, checked.refusals, asked))
    plan = checked.plan
    try:
        operation = supervisor.start_operation(
            job,
            kind,
            reason,
            plan_inputs(plan),
            savepoint_id=plan.savepoint.id,
            savepoint_batch=plan.savepoint.batch_id,
        )
    except OperationInProgressError as busy:
        # Another request was recorded between the check and this one.
        refusal = Refusal(Cause.OPERATION_OPEN, str(busy))
        raise RewindError(record_refusal(supervisor.ledger, job, kind, reason, [refusal], asked)) from busy
    return operation, plan


def rewind(
    supervisor: ControlLoop,
    job: str,
    *,
    reason: str,
    savepoint_id: str | None = None,
    before: datetime | None = None,
    progress: Callable[[str], None] | None = None,
) -> RewindPlan:
    """Ask the reconcile loop to rewind a stopped job, and run its passes until it has.

    The request is checked first (`preflight`: the job is stopped, the savepoint exists and can be
    read, its replay can be exact), then recorded as a `rewind` operation; the passes this call
    runs, or any pass after it if this process dies, check it again and carry it out. Returns the
    plan as of the request; RewindError when the rewind was refused.
    """
    operation, plan = request_operation(
        supervisor, job, "rewind", reason=reason, savepoint_id=savepoint_id, before=before
    )
    ended = supervisor.await_operation(operation.id, progress=progress)
    if ended.failure is not None:
        raise RewindError(ended.failure)
    return plan
