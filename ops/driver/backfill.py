"""A backfill run's directory: the plan the control side writes, the progress the Spark app keeps.

A backfill (`ops.backfill`, docs/architecture.md §6, Kappa+) runs a job's own streaming query over
archived input, one archive partition (an arrival hour, every source of the job at once) per
micro-batch. The control side plans the partitions, downloads and checks them; the Spark
application (`jobs.backfill`, submitted like any bounded Spark work) feeds them to the query one at
a time. Both sides share only this directory, so the application needs no S3 client:

    <root>/plan.json                 the job, the range and each partition's files by input
    <root>/spec/<job>.yaml           the job file the run computes with (installed or a candidate)
    <root>/staged/<input>/<NNNNN>/   partition NNNNN of an input, downloaded and checked
    <root>/fetched/<NNNNN>           written once every input's files of partition NNNNN are staged
    <root>/input/<source path>/      the query's landing directory: one partition at a time
    <root>/checkpoints/<job>/        the query's checkpoint (its state carries across partitions)
    <root>/lake/<sink path>/         the query's Parquet sink: the staged output
    <root>/progress.json             every completed partition: batches, rows, seconds
    <root>/running.json              the partition under way and the first batch it may use
    <root>/gate.json                 the partitions the driver released to the query's sources
    <root>/complete.json             written once every partition is done
    <root>/published.json            the publish into the warehouse table: each target partition's
                                     version, published or blocked (`ops.warehouse.publish`)
    <root>/diff.json                 a candidate's run instead: its output against the table's

A completed partition is recorded after its batches commit, so a killed run resumes from the
first partition not recorded (`BackfillRun.done`); Spark re-runs a batch whose offsets were logged
but not committed with exactly those offsets.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from ops.atomic import write_atomically
from ops.driver.event_windows import Coverage
from ops.spec.platform import PlatformConfig, StorageConfig

PLAN_FORMAT = 2


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
        )


@dataclass(frozen=True)
class PartitionDone:
    """A partition whose batches committed: what it read and wrote, and how long it took."""

    index: int
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
    def gate_file(self) -> Path:
        return self.root / "gate.json"

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

    def done(self) -> dict[int, PartitionDone]:
        """The completed partitions by index (none before the first)."""
        if not self.progress_file.is_file():
            return {}
        records = json.loads(self.progress_file.read_text())["done"]
        return {int(record["index"]): PartitionDone(**record) for record in records}

    def record_done(self, record: PartitionDone) -> None:
        """Add a completed partition, in one rename (a kill leaves the old record or the new)."""
        done = {**self.done(), record.index: record}
        document = {"done": [asdict(done[index]) for index in sorted(done)]}
        write_atomically(self.progress_file, json.dumps(document, indent=1))
        self.running_file.unlink(missing_ok=True)

    def record_running(self, index: int, first_batch: int) -> None:
        write_atomically(self.running_file, json.dumps({"index": index, "first_batch": first_batch}))

    def running(self) -> tuple[int, int] | None:
        """(partition index, first batch) of the partition under way when the run stopped, if any."""
        if not self.running_file.is_file():
            return None
        document = json.loads(self.running_file.read_text())
        return int(document["index"]), int(document["first_batch"])

    def set_gate(self, released: int, *, closed: bool = False) -> None:
        """Release the plan's positions before `released` to the query's sources
        (`jobs.archive_source`); `closed`: no more will be."""
        write_atomically(self.gate_file, json.dumps({"released": released, "closed": closed}))

    def read_gate(self) -> tuple[int, bool]:
        """(positions released, closed); nothing released before the driver first sets it."""
        try:
            document = json.loads(self.gate_file.read_text())
        except FileNotFoundError:
            return 0, False
        return int(document["released"]), bool(document["closed"])

    def is_complete(self) -> bool:
        return self.complete_file.is_file()
