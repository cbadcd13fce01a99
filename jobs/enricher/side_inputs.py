"""The enricher's side inputs: the lookup table and the mapping, read anew by every micro-batch.

Why not `spark.read.parquet(reference_dir)` as the static side of the stream-static join: Spark
4.3 lists a file relation's files once, when the DataFrame is created, and every micro-batch of
the query reuses that listing. Checked on these machines (see `tests/jobs/test_enricher.py`
`test_a_static_parquet_side_is_listed_once`): after the reference files were replaced, the next
batch failed with `FAILED_READ_FILE.FILE_NOT_EXIST` on the old file names; new files would never be
seen. The plan of a streaming query is fixed when it starts, so nothing built from a DataFrame
at planning time (a view, a re-read path, a mapping turned into column expressions) changes later.

What does run again in every micro-batch is the physical execution: each batch plans and runs
its tasks afresh, including the `read()` of a scan's partitions. (A Python data source's
`reader()` and `partitions()` run once, when the query is analysed: also checked.) So both side
inputs are Python data sources with ONE partition whose `read()` decides, when the batch runs,
what the batch sees:

* `streamwarden_reference`: the newest complete version of the table (`ops.driver.reference_tables`),
  its rows with the version's name; one version per batch because one task reads it.
* `streamwarden_mapping`: one row (`mapping_version`, `mapping_json`, `mapping_problem`) from the
  mapping file as it is now. A valid file is also saved as the last valid mapping (in the job's
  runtime directory); an invalid one is reported (`mapping_problem`, a log line on stderr and a
  status file) and the last valid mapping is used instead, so a bad edit never stops the job.

The query stays ONE query with ONE Parquet file sink (the checkpoint and sink log savepoints
anchor on). The price: the table is read by one Python task per batch (a lookup table is meant to
be small, broadcast-sized), and a batch that starts while a version is being published uses the
previous one.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from jobs.enricher.mapping import mapping_version, parse_mapping
from jobs.parsing import SPARK_TYPES
from ops.atomic import write_atomically
from ops.driver.reference_tables import current_version, version_name
from ops.spec.pipelines import ReferenceTable

REFERENCE_VERSION = "reference_version"
MAPPING_VERSION = "mapping_version"
MAPPING_JSON = "mapping_json"
MAPPING_PROBLEM = "mapping_problem"
LAST_VALID_MAPPING = "mapping-last-valid.json"
MAPPING_STATUS = "mapping-status.json"


class ReferenceSource(DataSource):
    """Options: `path` (the table's root), `key`, `columns` (JSON list of the columns to read)."""

    @classmethod
    def name(cls) -> str:
        return "streamwarden_reference"

    def reader(self, schema: Any) -> DataSourceReader:
        return ReferenceReader(self.options)


class ReferenceReader(DataSourceReader):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.root = Path(options["path"])
        self.key = options["key"]
        self.columns: list[str] = json.loads(options["columns"])

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(0)]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        import pyarrow.parquet as pq

        version_dir = current_version(self.root)
        if version_dir is None:
            return
        version = version_name(version_dir)
        seen: set[Any] = set()
        # Keys are meant to be unique; of duplicates the first (file name, row order) wins.
        for row in pq.read_table(version_dir, columns=self.columns).to_pylist():
            if row[self.key] is None or row[self.key] in seen:
                continue
            seen.add(row[self.key])
            yield (*(row[column] for column in self.columns), version)


class MappingSource(DataSource):
    """Options: `path` (the mapping file), `state_dir` (where the last valid mapping is kept)."""

    @classmethod
    def name(cls) -> str:
        return "streamwarden_mapping"

    def schema(self) -> str:
        return f"{MAPPING_VERSION} string, {MAPPING_JSON} string, {MAPPING_PROBLEM} string"

    def reader(self, schema: Any) -> DataSourceReader:
        return MappingReader(self.options)


def read_mapping(path: Path, state_dir: Path) -> tuple[str | None, str | None, str | None]:
    """(version, canonical JSON, problem) of the mapping a batch uses: the file, or the last valid one.

    A valid file becomes the last valid mapping; an invalid or unreadable one yields the last
    valid mapping with the problem (None, None, problem when there never was a valid one). Either
    way the outcome is written to `mapping-status.json` in `state_dir`.
    """
    last_valid_path = state_dir / LAST_VALID_MAPPING
    problem: str | None = None
    try:
        canonical = parse_mapping(path.read_text()).canonical_json()
    except (OSError, ValueError) as exc:
        problem = f"{path}: {exc}"
        try:
            canonical = json.loads(last_valid_path.read_text())["mapping_json"]
        except FileNotFoundError:
            canonical = None
    version = mapping_version(canonical) if canonical is not None else None
    if problem is None and canonical is not None:
        try:
            saved = json.loads(last_valid_path.read_text())["mapping_json"]
        except FileNotFoundError:
            saved = None
        if saved != canonical:
            write_atomically(
                last_valid_path, json.dumps({"mapping_version": version, "mapping_json": canonical})
            )
    status = {"checked_at": time.time(), "file": str(path), "mapping_version": version, "problem": problem}
    write_atomically(state_dir / MAPPING_STATUS, json.dumps(status))
    if problem is not None:
        # The worker's stderr is the driver log in local mode, the executor log on a cluster.
        print(json.dumps({"event": "invalid mapping, keeping the last valid one", **status}), file=sys.stderr)
    return version, canonical, problem


class MappingReader(DataSourceReader):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.path = Path(options["path"])
        self.state_dir = Path(options["state_dir"])

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(0)]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        yield read_mapping(self.path, self.state_dir)


def reference_frame(spark: SparkSession, root: Path, table: ReferenceTable) -> DataFrame:
    """The reference table as every batch sees it when it runs: the key, the fields, `reference_version`."""
    spark.dataSource.register(ReferenceSource)
    columns = [f.name for f in table.fields]
    schema = ", ".join(f"`{f.name}` {SPARK_TYPES[f.type].simpleString()}" for f in table.fields)
    return (
        spark.read.format(ReferenceSource.name())
        .schema(f"{schema}, {REFERENCE_VERSION} string")
        .option("path", str(root))
        .option("key", table.key)
        .option("columns", json.dumps(columns))
        .load()
    )


def mapping_frame(spark: SparkSession, path: Path, state_dir: Path) -> DataFrame:
    """One row: the mapping every batch uses when it runs (see `read_mapping`)."""
    spark.dataSource.register(MappingSource)
    return (
        spark.read.format(MappingSource.name())
        .option("path", str(path))
        .option("state_dir", str(state_dir))
        .load()
    )
