"""A backfill run's directory: the plan the control side writes, the progress the Spark app keeps.

A backfill (`ops.backfill`, docs/architecture.md §6, Kappa+) runs a job's own streaming query over
archived input. The archive's partitions are arrival hours; the plan groups them into feed
batches, one micro-batch each: as many consecutive hours as fit the run's byte budget, every
source of the job in lockstep over the same hours, and an hour larger than the budget split into
slices of its files (`feed_batches`). The control side plans the batches, downloads and checks the
partitions; the Spark application (`jobs.backfill`, submitted like any bounded Spark work) feeds
the batches to the query one at a time. Both sides share only this directory, so the application
needs no S3 client:

    <root>/plan.json                 the job, the range, each partition's files by input, the batches
    <root>/spec/<job>.yaml           the job file the run computes with (installed or a candidate)
    <root>/staged/<input>/<NNNNN>/   partition NNNNN of an input, downloaded and checked
    <root>/fetched/<NNNNN>           written once every input's files of partition NNNNN are staged
    <root>/input/<source path>/      a bootstrap's landing directory: one feed batch at a time
    <root>/feed/batch=<NNNNN>/input=<input>/
                                     feed batch NNNNN released to the query's file source: hard
                                     links to its staged files, every input's in one directory rename
    <root>/checkpoints/<job>/        the query's checkpoint (its state carries across partitions)
    <root>/lake/<sink path>/         the query's Parquet sink: the staged output
    <root>/progress.json             every completed feed batch: its hours, query batches, rows, seconds
    <root>/running.json              the feed batch under way and the first query batch it may use
    <root>/complete.json             written once every partition is done
    <root>/published.json            the publish into the warehouse table: each target partition's
                                     version, published or blocked (`ops.warehouse.publish`)
    <root>/diff.json                 a candidate's run instead: its output against the table's

A completed feed batch is recorded after its query batches commit, so a killed run resumes from
the first one not recorded (`BackfillRun.done`); Spark re-runs a batch whose offsets were logged
but not committed with exactly those offsets.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from ops.atomic import write_atomically
from ops.driver.event_windows import Coverage
from ops.spec.platform import PlatformConfig, StorageConfig

PLAN_FORMAT = 3
# The budget a job's memory gives a feed batch when the platform sets none: a quarter of the
# memory its tasks run in (the driver's in local mode, an executor's on a cluster). The batch's
# JSON lines are parsed, shuffled to the state operator and handed to the Python workers as
# Arrow: several times their size in flight at once.
MEMORY_PER_BATCH_BYTE = 4
_MEMORY_UNITS = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


# The least heap a backfill runs in, whatever its budget: Spark's memory manager refuses to start
# in less than 450 MiB.
MIN_BATCH_HEAP_BYTES = 512 << 20


def memory_bytes(setting: str) -> int:
    """A JVM memory setting (`512m`, `1g`) in bytes."""
    return int(setting[:-1]) * _MEMORY_UNITS[setting[-1].lower()]


def batch_heap(budget: int, memory: str) -> str:
    """The heap (a JVM setting, in MiB) of a backfill whose feed batches read `budget` bytes, in a
    job whose tasks have `memory`: MEMORY_PER_BATCH_BYTE times the budget, no less than
    MIN_BATCH_HEAP_BYTES and no more than `memory`. The default budget's heap is `memory` itself."""
    heap = min(max(budget * MEMORY_PER_BATCH_BYTE, MIN_BATCH_HEAP_BYTES), memory_bytes(memory))
    return f"{heap >> 20}m"


@dataclass(frozen=True)
class PlannedPartition:
    """One arrival hour of the range: each input's archived files (none for an idle input)."""

    index: int
    hour: datetime
    files: dict[str, list[str]]
    bytes: int

    @property
    def label(self) -> str:
        return f"{self.hour:%Y-%m-%d %H}:00"

    def as_json(self) -> dict[str, Any]:
        return {"index": self.index, "hour": self.hour.isoformat(), "files": self.files, "bytes": self.bytes}

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> PlannedPartition:
        return cls(
            index=int(document["index"]),
            hour=datetime.fromisoformat(document["hour"]),
            files={name: list(files) for name, files in document["files"].items()},
            bytes=int(document["bytes"]),
        )


@dataclass(frozen=True)
class Piece:
    """What a feed batch reads of one partition: all its files, or slice `part` of `parts`."""

    partition: int
    files: dict[str, list[str]]
    bytes: int
    part: int = 1
    parts: int = 1

    @property
    def ends_partition(self) -> bool:
        return self.part == self.parts

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> Piece:
        return cls(
            partition=int(document["partition"]),
            files={name: list(files) for name, files in document["files"].items()},
            bytes=int(document["bytes"]),
            part=int(document["part"]),
            parts=int(document["parts"]),
        )


@dataclass(frozen=True)
class FeedBatch:
    """One micro-batch of the backfill's query: consecutive whole hours, or one slice of an hour."""

    index: int
    pieces: tuple[Piece, ...]

    @property
    def bytes(self) -> int:
        return sum(piece.bytes for piece in self.pieces)

    @property
    def completes(self) -> list[int]:
        """The partitions whose last files this batch reads: done once it commits."""
        return [piece.partition for piece in self.pieces if piece.ends_partition]

    def describe(self, partitions: Sequence[PlannedPartition]) -> str:
        """Its arrival hours: `06:00`, `06:00 .. 08:00 (3 hours)` or `06:00 slice 2/3`."""
        first, last = self.pieces[0], self.pieces[-1]
        label = partitions[first.partition].label
        if first.parts > 1:
            return f"{label} slice {first.part}/{first.parts}"
        if first.partition == last.partition:
            return label
        return f"{label} .. {partitions[last.partition].label} ({len(self.pieces)} hours)"

    def as_json(self) -> dict[str, Any]:
        return {"index": self.index, "pieces": [asdict(piece) for piece in self.pieces]}

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> FeedBatch:
        return cls(int(document["index"]), tuple(Piece.from_json(piece) for piece in document["pieces"]))


def _slices(sized: dict[str, list[tuple[str, int]]], parts: int) -> list[dict[str, list[tuple[str, int]]]]:
    """Each input's files (in arrival order) cut into `parts` consecutive runs of about the same
    bytes: slice k holds the files that start in the k-th `1/parts` of their input's bytes, so every
    input moves through the hour in step."""
    slices: list[dict[str, list[tuple[str, int]]]] = [{name: [] for name in sized} for _ in range(parts)]
    for name, files in sized.items():
        total = sum(size for _, size in files) or 1
        offset = 0
        for file_name, size in files:
            slices[min(parts - 1, offset * parts // total)][name].append((file_name, size))
            offset += size
    return slices


def _split(partition: PlannedPartition, sizes: dict[str, list[int]], budget: int) -> list[Piece]:
    """`partition` in the fewest slices of at most `budget` bytes each that its files allow: a file
    is never split, so a slice holds at least one file of an input, and an hour can be cut into as
    many slices as its input with the most files has files."""
    sized = {name: list(zip(files, sizes[name], strict=True)) for name, files in partition.files.items()}
    most = max(1, max((len(files) for files in sized.values()), default=1))
    parts = min(most, math.ceil(partition.bytes / budget))
    while True:
        slices = [piece for piece in _slices(sized, parts) if any(piece.values())]
        largest = max(sum(size for files in piece.values() for _, size in files) for piece in slices)
        if largest <= budget or parts == most:
            break
        parts += 1
    return [
        Piece(
            partition.index,
            {name: [file_name for file_name, _ in files] for name, files in piece.items()},
            sum(size for files in piece.values() for _, size in files),
            part,
            len(slices),
        )
        for part, piece in enumerate(slices, start=1)
    ]


def feed_batches(
    partitions: Sequence[PlannedPartition], sizes: dict[int, dict[str, list[int]]], budget: int
) -> tuple[FeedBatch, ...]:
    """The micro-batches of a range under a byte budget: consecutive whole hours while they fit
    (every input in lockstep over the same hours), an hour over the budget alone, in slices.
    `sizes` holds each partition's file sizes by input, in the order of its files."""
    groups: list[list[Piece]] = []
    room = 0
    for partition in partitions:
        if partition.bytes > budget:
            groups += [[piece] for piece in _split(partition, sizes[partition.index], budget)]
            room = 0
            continue
        if not groups or partition.bytes > room:
            groups.append([])
            room = budget
        groups[-1].append(Piece(partition.index, partition.files, partition.bytes))
        room -= partition.bytes
    return tuple(FeedBatch(index, tuple(pieces)) for index, pieces in enumerate(groups))


@dataclass(frozen=True)
class BackfillPlan:
    """What a backfill computes: `job` over the arrival hours [start, end), partition by partition."""

    run_id: str
    job: str
    config_version: str
    candidate: bool
    start: datetime
    end: datetime
    partitions: tuple[PlannedPartition, ...]
    # The source path (landing directory under the landing root) of each input of the job.
    sources: dict[str, str]
    throttle_seconds: float = 0.0
    bootstrap: bool = False
    # A candidate's run: the warehouse table its side table is compared with (`diff.json`).
    compare_with: str | None = None
    # The event windows the range recomputes whole and those it covers only in part; only
    # partitions of whole windows are published. None for a job without a warehouse table.
    coverage: Coverage | None = None
    # The micro-batches the partitions are fed in (`feed_batches`) and the budget they were cut by.
    batches: tuple[FeedBatch, ...] = ()
    max_batch_bytes: int = 0

    def as_json(self) -> dict[str, Any]:
        return {
            "format": PLAN_FORMAT,
            "run_id": self.run_id,
            "job": self.job,
            "config_version": self.config_version,
            "candidate": self.candidate,
            "start": self.start.isoformat(),
            "end": self.end.isoformat(),
            "sources": self.sources,
            "throttle_seconds": self.throttle_seconds,
            "bootstrap": self.bootstrap,
            "compare_with": self.compare_with,
            "coverage": None if self.coverage is None else self.coverage.as_json(),
            "partitions": [partition.as_json() for partition in self.partitions],
            "max_batch_bytes": self.max_batch_bytes,
            "batches": [batch.as_json() for batch in self.batches],
        }

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> BackfillPlan:
        return cls(
            run_id=document["run_id"],
            job=document["job"],
            config_version=document["config_version"],
            candidate=bool(document["candidate"]),
            start=datetime.fromisoformat(document["start"]),
            end=datetime.fromisoformat(document["end"]),
            sources=dict(document["sources"]),
            throttle_seconds=float(document["throttle_seconds"]),
            bootstrap=bool(document["bootstrap"]),
            compare_with=document["compare_with"],
            coverage=None if document["coverage"] is None else Coverage.from_json(document["coverage"]),
            partitions=tuple(PlannedPartition.from_json(p) for p in document["partitions"]),
            max_batch_bytes=int(document["max_batch_bytes"]),
            batches=tuple(FeedBatch.from_json(batch) for batch in document["batches"]),
        )


@dataclass(frozen=True)
class BatchDone:
    """A feed batch whose query batches committed: the partitions it completed, what it read and
    wrote, and how long it took."""

    index: int
    partitions: list[int]
    first_batch: int
    last_batch: int
    input_rows: int
    output_rows: int
    seconds: float


@dataclass(frozen=True)
class BackfillRun:
    """The directory of one backfill run (the module docstring lists its layout)."""

    root: Path

    @property
    def plan_file(self) -> Path:
        return self.root / "plan.json"

    @property
    def progress_file(self) -> Path:
        return self.root / "progress.json"

    @property
    def running_file(self) -> Path:
        return self.root / "running.json"

    @property
    def diff_file(self) -> Path:
        return self.root / "diff.json"

    @property
    def published_file(self) -> Path:
        return self.root / "published.json"

    @property
    def complete_file(self) -> Path:
        return self.root / "complete.json"

    def spec_file(self, job: str) -> Path:
        return self.root / "spec" / f"{job}.yaml"

    def staged(self, input_name: str, index: int) -> Path:
        return self.root / "staged" / input_name / f"{index:05d}"

    def staged_files(self, batch: FeedBatch, input_name: str) -> list[Path]:
        """Where `batch`'s files of input `input_name` are staged, in the order it reads them."""
        return [
            self.staged(input_name, piece.partition) / file_name
            for piece in batch.pieces
            for file_name in piece.files.get(input_name, [])
        ]

    def fetched_marker(self, index: int) -> Path:
        return self.root / "fetched" / f"{index:05d}"

    def storage(self) -> StorageConfig:
        """The storage roots the backfill's query runs under: its own input, checkpoint and sink."""
        return StorageConfig(
            runtime_root=self.root / "runtime",
            landing_root=self.root / "input",
            lake_root=self.root / "lake",
            checkpoint_root=self.root / "checkpoints",
        )

    def platform(self, platform: PlatformConfig) -> PlatformConfig:
        """`platform` with the run's storage roots: the job's own plan then reads and writes here."""
        return platform.model_copy(update={"storage": self.storage()})

    def read_plan(self) -> BackfillPlan:
        return BackfillPlan.from_json(json.loads(self.plan_file.read_text()))

    def write_plan(self, plan: BackfillPlan) -> None:
        write_atomically(self.plan_file, json.dumps(plan.as_json(), indent=1))

    def done(self) -> dict[int, BatchDone]:
        """The completed feed batches by index (none before the first)."""
        if not self.progress_file.is_file():
            return {}
        records = json.loads(self.progress_file.read_text())["done"]
        return {int(record["index"]): BatchDone(**record) for record in records}

    def partitions_done(self) -> set[int]:
        """The partitions every file of which a completed feed batch read."""
        return {partition for record in self.done().values() for partition in record.partitions}

    def record_done(self, record: BatchDone) -> None:
        """Add a completed feed batch, in one rename (a kill leaves the old record or the new)."""
        done = {**self.done(), record.index: record}
        document = {"done": [asdict(done[index]) for index in sorted(done)]}
        write_atomically(self.progress_file, json.dumps(document, indent=1))
        self.running_file.unlink(missing_ok=True)

    def record_running(self, index: int, first_batch: int) -> None:
        write_atomically(self.running_file, json.dumps({"index": index, "first_batch": first_batch}))

    def running(self) -> tuple[int, int] | None:
        """(feed batch index, first query batch) of the batch under way when the run stopped, if any."""
        if not self.running_file.is_file():
            return None
        document = json.loads(self.running_file.read_text())
        return int(document["index"]), int(document["first_batch"])

    @property
    def feed_root(self) -> Path:
        """What the gated query's file source reads (`jobs.archive_source`): the released batches."""
        return self.root / "feed"

    def released(self, index: int) -> Path:
        """Feed batch `index` as the query's source sees it once released (`batch=` and `input=` are
        partition columns of the source)."""
        return self.feed_root / f"batch={index:05d}"

    def release(self, batch: FeedBatch, inputs: Sequence[str]) -> None:
        """Show `batch`'s staged files of every input to the query's source, all at once.

        The files are linked into a directory outside the source's path, which one rename then
        moves in: a listing of the source sees all of the batch or none of it, so every input
        moves in the same micro-batch. A batch a killed attempt released stays as it is.
        """

        def link(directory: Path, input_name: str) -> None:
            for path in self.staged_files(batch, input_name):
                # Two partitions of a batch may stage files of the same name: the partition's
                # directory (its index) keeps them apart.
                os.link(path, directory / f"{path.parent.name}-{path.name}")

        self._release(batch.index, inputs, link)

    def release_closing(self, inputs: Sequence[str]) -> None:
        """Release the position after the last feed batch: no file of its own, so an empty one,
        whose micro-batch reads no row and runs the stateful operators under the watermark the
        last batch left (the no-data batch a streaming job runs once its input stops)."""
        self._release(len(self.read_plan().batches), inputs, lambda _directory, _name: None)

    def _release(self, index: int, inputs: Sequence[str], fill: Callable[[Path, str], None]) -> None:
        target = self.released(index)
        if target.is_dir():
            return
        preparing = self.root / "releasing" / target.name
        shutil.rmtree(preparing, ignore_errors=True)
        for name in inputs:
            directory = preparing / f"input={name}"
            directory.mkdir(parents=True)
            fill(directory, name)
        if not any(path.is_file() for path in preparing.rglob("*")):
            # The source runs a micro-batch only for a new file: a position without one gets an
            # empty file, which reads no row.
            (preparing / f"input={inputs[0]}" / "empty.json").touch()
        self.feed_root.mkdir(exist_ok=True)
        preparing.rename(target)

    def withdraw(self, index: int) -> None:
        """Delete released batch `index`'s files once it committed (the source never reads a file
        twice, and its listing stays short). Its directories stay while the query runs: a listing
        skips a file that vanished under it, but fails on a directory that did (`prune_feed`)."""
        for path in self.released(index).glob("input=*/*"):
            path.unlink(missing_ok=True)

    def prune_feed(self) -> None:
        """Remove the released batches' directories that hold no file any more; only while no
        query reads the feed."""
        for released in self.feed_root.glob("batch=*"):
            if not any(path.is_file() for path in released.rglob("*")):
                shutil.rmtree(released)

    def is_complete(self) -> bool:
        return self.complete_file.is_file()
