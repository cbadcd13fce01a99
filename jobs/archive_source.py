"""The gated streaming source a backfill's long-running query reads: one feed batch per micro-batch.

A backfill (`jobs.backfill`) runs the job's query once over the whole range. Each input of the job
is read by this source (a PySpark Python streaming data source, `DataSourceStreamReader`) instead
of a file source over a landing directory: its offset is a position in the plan's feed batches
(`BackfillPlan.batches`: the ones before it are read), and a micro-batch reads the input's staged
files of exactly one feed batch (its arrival hours, or its slice of one). The driver releases the
feed batches through the run's gate (`BackfillRun.gate_file`) one at a time, after the previous
one committed.

Lockstep is exact, not timed: `latestOffset` never answers "no new data" while the gate may still
move. It waits until the gate releases the next position and then returns exactly one position
more, so every input of the query, asked one after the other in the same trigger, moves by the
same one feed batch whatever the moment the driver opens the gate. Only once the gate is closed
(the range is done) does it return its start, and the query goes idle.

The position after the last feed batch (`len(plan.batches)`) is an empty one: its micro-batch
reads no rows and runs the stateful operators under the watermark the last one left, which is the
no-data batch a streaming job runs after its input stops (the query itself runs without no-data
batches, so between feed batches none runs, as in the live job that has the next hour's input
already there).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit
from pyspark.sql.types import StructType

from ops.driver.backfill import BackfillRun

if TYPE_CHECKING:
    # Types only: Spark's Python workers import this module to read, and need none of these.
    from jobs.runtime import RawInput
    from ops.spec.job import JobSpec
    from ops.spec.platform import PlatformConfig

SOURCE_NAME = "streamwarden_archive"
RAW_SCHEMA = "value string"
# How often a waiting `latestOffset` reads the gate: the driver opens it within milliseconds of
# the previous commit, so this bounds the gap between two batches.
GATE_POLL_SECONDS = 0.005
# Lines per Arrow batch a read task hands to Spark: a large staged file goes in pieces, not whole.
LINES_PER_ARROW_BATCH = 65_536


def staged_lines(path: Path) -> list[bytes]:
    """A staged file's lines as the text file source splits them (at \\n, \\r\\n and \\r; a last
    line without a terminator counts)."""
    return path.read_bytes().splitlines()


def count_lines(path: Path) -> int:
    """How many rows the source reads from a staged file: `staged_lines`'s count, without making
    the lines (the driver counts every batch's input, hundreds of MB at the default budget)."""
    data = path.read_bytes()
    terminators = data.count(b"\n") + data.count(b"\r") - data.count(b"\r\n")
    return terminators + int(bool(data) and not data.endswith((b"\n", b"\r")))


def lines_batch(lines: list[bytes]) -> pa.RecordBatch:
    """Lines as a one-column (`value`) Arrow batch; bytes that are not UTF-8 become U+FFFD."""
    try:
        values = pa.array(lines, pa.binary()).cast(pa.string())
    except pa.ArrowInvalid:
        values = pa.array([line.decode("utf-8", "replace") for line in lines], pa.string())
    return pa.RecordBatch.from_arrays([values], names=["value"])


class StagedFiles(InputPartition):
    """Staged archive files that one Spark task reads."""

    def __init__(self, paths: list[str]) -> None:
        super().__init__(paths)
        self.paths = paths


def spread(paths: list[Path], tasks: int) -> list[list[Path]]:
    """`paths` in at most `tasks` groups of about the same size (the largest placed first).

    A task per file cost a Python worker round trip per file: a partition of six 4 MB files read
    in six tasks took 1.5-2 s longer than in two (local[2], load 18-20).
    """
    groups: list[list[Path]] = [[] for _ in range(min(tasks, len(paths)))]
    sizes = [0] * len(groups)
    for path in sorted(paths, key=lambda p: p.stat().st_size, reverse=True):
        smallest = sizes.index(min(sizes))
        groups[smallest].append(path)
        sizes[smallest] += path.stat().st_size
    return [sorted(group) for group in groups]


class ArchiveSource(DataSource):
    """`spark.readStream.format("streamwarden_archive").option("run_dir", D).option("input", N)`:
    input N of the backfill run in directory D, feed batch by feed batch, as raw lines."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return RAW_SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return ArchiveStreamReader(
            BackfillRun(Path(self.options["run_dir"])),
            self.options["input"],
            int(self.options.get("tasks", 1)),
        )


class ArchiveStreamReader(DataSourceStreamReader):
    """Offsets `{"input": N, "next": P}`: positions before P (the plan's feed batches, then the
    empty one) are read."""

    def __init__(self, run: BackfillRun, input_name: str, tasks: int = 1) -> None:
        self.run = run
        self.input_name = input_name
        self.tasks = tasks
        # Each feed batch's staged files of this input.
        self.batch_files = [run.staged_files(batch, input_name) for batch in run.read_plan().batches]
        # The process that started this reader's worker: when it is gone (the application was
        # killed), a reader waiting on the gate stops instead of polling for ever.
        self.parent = os.getppid()

    def initialOffset(self) -> dict[str, Any]:
        return {"input": self.input_name, "next": 0}

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        position = int(start["next"])
        while True:
            released, closed = self.run.read_gate()
            if released > position:
                return {"input": self.input_name, "next": position + 1}
            if closed:
                return start
            if os.getppid() != self.parent:
                raise RuntimeError(f"the backfill application that gated input {self.input_name!r} is gone")
            time.sleep(GATE_POLL_SECONDS)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        # An empty file has no line to read: a feed batch of empty files (an hour with no events)
        # runs no read task at all.
        paths = [
            path
            for position in range(int(start["next"]), int(end["next"]))
            if position < len(self.batch_files)
            for path in self.batch_files[position]
            if path.stat().st_size > 0
        ]
        return [StagedFiles([str(path) for path in group]) for group in spread(paths, self.tasks)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, StagedFiles)
        for path in partition.paths:
            lines = staged_lines(Path(path))
            for first in range(0, len(lines), LINES_PER_ARROW_BATCH):
                yield lines_batch(lines[first : first + LINES_PER_ARROW_BATCH])


def register(spark: SparkSession) -> None:
    """Make the source known to the session (`spark.readStream.format(SOURCE_NAME)`)."""
    spark.dataSource.register(ArchiveSource)


def read_archive(run: BackfillRun) -> RawInput:
    """A `jobs.runtime.RawInput` reading the run's staged feed batches instead of landing directories."""

    def read(spark: SparkSession, platform: PlatformConfig, spec: JobSpec) -> dict[str, DataFrame]:
        return {
            name: spark.readStream.format(SOURCE_NAME)
            .option("run_dir", str(run.root))
            .option("input", name)
            .load()
            for name in spec.pipeline.inputs
        }

    return read
