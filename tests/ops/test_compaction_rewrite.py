"""The compaction rewrite on a real Spark file sink: exactly the committed files, target-size output."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from ops.warehouse.rewrite import committed_files, partition_dir, rewrite_partition

PARTITION = {"route": "a", "event_hour": 10}


def small_files_sink(spark: SparkSession, tmp_path: Path) -> Path:
    """A streaming file sink written one input file per batch: many small files per partition."""
    landing = tmp_path / "landing"
    landing.mkdir()
    for batch in range(6):
        rows = [{"id": f"{batch}-{n}", "route": "ab"[n % 2], "event_hour": 10} for n in range(50)]
        (landing / f"{batch}.json").write_text("".join(json.dumps(row) + "\n" for row in rows))
    sink = tmp_path / "sink"
    query = (
        spark.readStream.schema("id string, route string, event_hour int")
        .option("maxFilesPerTrigger", 1)
        .json(str(landing))
        .writeStream.format("parquet")
        .partitionBy("route", "event_hour")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start(str(sink))
    )
    query.awaitTermination(300)
    return sink


def test_only_committed_files_are_rewritten_into_target_size_files(
    spark: SparkSession, tmp_path: Path
) -> None:
    sink = small_files_sink(spark, tmp_path)
    files = committed_files(sink, PARTITION)
    assert len(files) == 6
    # A killed batch's leftover: in the directory, in no commit.
    stray = partition_dir(sink, PARTITION) / "part-99999-stray.c000.snappy.parquet"
    shutil.copy(files[0], stray)
    assert committed_files(sink, PARTITION) == files

    rewrite = rewrite_partition(spark, sink, PARTITION, tmp_path / "staging", target_bytes=1 << 30)
    assert (rewrite.input_files, rewrite.rows, rewrite.output_files) == (6, 150, 1)
    table = pq.read_table(tmp_path / "staging")
    assert table.column_names == ["id"]  # the partition columns live in the location
    assert sorted(table.column("id").to_pylist()) == sorted(
        f"{b}-{n}" for b in range(6) for n in range(0, 50, 2)
    )

    # A target smaller than the input splits it into ceil(bytes / target) files.
    split = rewrite_partition(
        spark, sink, PARTITION, tmp_path / "split", target_bytes=rewrite.input_bytes // 3 + 1
    )
    assert (split.output_files, split.rows) == (3, 150)
