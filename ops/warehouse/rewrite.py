"""The write of write-audit-publish: one closed sink partition, rewritten as target-size files.

A streaming file sink leaves many small files per partition, some of which no batch committed (a
killed batch's leftovers). Compaction reads exactly the files the sink log lists as committed for
the partition, never a directory listing, and writes them as `ceil(bytes / target)` files into a
staging directory of its own: nothing a reader sees changes until the publish step points the
warehouse partition at it.

The write is the only pass over the data: the rows read are counted by an observed metric of the
write itself and the rows written come from the staged files' Parquet footers, so no extra Spark
job counts either (each was a full pass, a third of the write's time on a 1M-row partition). The
audit reads the staged files with the schema the write wrote, so no Spark job infers it from
their footers again.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from ops.driver.checkpoint import sink_files
from ops.warehouse.sinklog import SINK_LOG


@dataclass(frozen=True)
class Rewrite:
    """What a rewrite read and wrote."""

    input_files: int
    input_bytes: int
    # Rows read from the committed files, and rows in the staged files: equal unless the write
    # lost or duplicated some (the audit's row-count check compares the staged rows with the first).
    input_rows: int
    rows: int
    output_files: int
    output_bytes: int
    staging: Path
    # The columns of the staged files, as Spark reads them back (every field nullable).
    schema: StructType


def partition_dir(sink: Path, partition: Mapping[str, object]) -> Path:
    """The sink directory of a partition (`route=purchases/event_date=2026-11-24/event_hour=10`)."""
    return sink.joinpath(*(f"{column}={value}" for column, value in partition.items()))


def committed_files(sink: Path, partition: Mapping[str, object]) -> list[Path]:
    """The data files of a partition that the sink log lists as committed, sorted."""
    directory = partition_dir(sink, partition)
    return sorted(path for path in sink_files(sink / SINK_LOG) if path.parent == directory)


def read_partition(spark: SparkSession, sink: Path, files: list[Path]) -> DataFrame:
    """The rows of exactly `files`, with the partition columns their directories name."""
    return spark.read.option("basePath", str(sink)).parquet(*(str(path) for path in files))


def rewrite_partition(
    spark: SparkSession,
    sink: Path,
    partition: Mapping[str, object],
    staging: Path,
    target_bytes: int,
    published: Path | None = None,
) -> Rewrite:
    """Write the partition's committed rows into `staging` as target-size Parquet files, with the
    rows of the `published` version directory when given (late files in a partition whose raw
    files expired: they add to the rows that version holds, the only copy left of them).

    The partition columns are dropped from the files (the table's partition location carries
    them, as in the sink). Raises FileNotFoundError when the sink log lists no file for it.
    """
    files = committed_files(sink, partition)
    if not files:
        raise FileNotFoundError(
            f"the sink log of {sink} lists no committed file in {partition_dir(sink, partition)}"
        )
    rows = read_partition(spark, sink, files).drop(*partition)
    kept = sorted(published.glob("*.parquet")) if published is not None else []
    if kept:
        rows = rows.unionByName(spark.read.schema(rows.schema).parquet(*(str(path) for path in kept)))
    input_bytes = sum(path.stat().st_size for path in [*files, *kept])
    read = Observation("compaction_input")
    rows = rows.observe(read, F.count(F.lit(1)).alias("rows"))
    count = max(1, math.ceil(input_bytes / target_bytes))
    rows.repartition(count).write.mode("overwrite").parquet(str(staging))
    written = sorted(staging.glob("*.parquet"))
    return Rewrite(
        input_files=len(files) + len(kept),
        input_bytes=input_bytes,
        input_rows=int(read.get["rows"]),
        rows=sum(pq.ParquetFile(path).metadata.num_rows for path in written),
        output_files=len(written),
        output_bytes=sum(path.stat().st_size for path in written),
        staging=staging,
        schema=StructType.fromJson(_nullable(rows.schema.jsonValue())),
    )


def read_staged(spark: SparkSession, rewrite: Rewrite) -> DataFrame:
    """The staged rows, read with the schema the write wrote rather than one inferred from the
    files' footers (a Spark job of its own)."""
    return spark.read.schema(rewrite.schema).parquet(str(rewrite.staging))


def _nullable(schema_json: Any) -> Any:
    """A schema's JSON with every field, element and value nullable: Spark writes Parquet so and
    reads it back so, whatever the written DataFrame declared."""
    if isinstance(schema_json, dict):
        flags = {"nullable", "containsNull", "valueContainsNull"}
        return {key: True if key in flags else _nullable(value) for key, value in schema_json.items()}
    if isinstance(schema_json, list):
        return [_nullable(item) for item in schema_json]
    return schema_json
