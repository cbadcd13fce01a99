"""The source a backfill's long-running query reads the archive through: one feed batch per micro-batch.

A backfill (`jobs.backfill`) runs the job's query once over the whole range. Every input of the
job is read by ONE text file source over the run's feed directory (`BackfillRun.feed_root`)
instead of a file source per landing directory: the driver releases the plan's feed batches
there one at a time (`BackfillRun.release`, after the previous one committed), each as a
directory `batch=<NNNNN>/input=<name>/` that one rename moves in. `batch` and `input` are
partition columns of the source, and each input of the job is the source's rows of its own
`input` partition, so a micro-batch is exactly one feed batch of every input.

Lockstep is exact, not timed: the source lists the feed directory once per trigger for every
input (the inputs share it), and a listing sees a released batch whole or not at all. The query
runs without no-data batches, so between two feed batches none runs; once the last has committed
the driver releases an empty file (`BackfillRun.release_closing`), whose micro-batch
reads no row and runs the stateful operators under the watermark the last batch left: the no-data
batch a streaming job runs after its input stops.

It is Spark's own text file source, as the live job's landing directories are read: the query
starts, plans and reads as the job's does, with no Python process of its own.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from ops.driver.backfill import BackfillRun

if TYPE_CHECKING:
    from jobs.runtime import RawInput
    from ops.spec.job import JobSpec
    from ops.spec.platform import PlatformConfig

# The lines, then the partition columns of the feed directory's layout.
FEED_SCHEMA = "value string, batch int, input string"
# Files older than the newest seen by more than this are skipped by a file source (its
# `maxFileAge`, 7 days by default): a resumed run's feed batches are read whatever their age.
MAX_FILE_AGE = "36500d"


def count_lines(path: Path) -> int:
    """How many rows the text file source reads from a staged file (it splits at \\n, \\r\\n and
    \\r; a last line without a terminator counts), without making the lines: the driver counts every
    batch's input, hundreds of MB at the default budget."""
    data = path.read_bytes()
    terminators = data.count(b"\n") + data.count(b"\r") - data.count(b"\r\n")
    return terminators + int(bool(data) and not data.endswith((b"\n", b"\r")))


def read_archive(run: BackfillRun) -> RawInput:
    """A `jobs.runtime.RawInput` reading the run's released feed batches instead of landing
    directories. The first feed batch must be released before the query is planned: the source
    finds its partition columns in what the feed directory holds then."""

    def read(spark: SparkSession, platform: PlatformConfig, spec: JobSpec) -> dict[str, DataFrame]:
        feed = (
            spark.readStream.format("text")
            .schema(FEED_SCHEMA)
            .option("maxFileAge", MAX_FILE_AGE)
            .load(str(run.feed_root))
        )
        return {name: feed.where(F.col("input") == name).select("value") for name in spec.pipeline.inputs}

    return read
