"""A throwaway platform with a warehouse: its metastore is a fresh database on the worker's
PostgreSQL server, and Spark work on the table runs in its own processes, as in production.

A Hive-catalog SparkSession cannot share a JVM with the tests' plain local session (the catalog
is fixed when the JVM's context starts), so the compaction entry point and the reader
(`python -m tests.support.warehouse`) each run as a subprocess of the test. The reader a test's
queries go to starts once per platform and answers every query of the test (a Hive-enabled JVM's
start is half a minute of CPU); it refreshes the tables before each query, so it sees what other
processes published since its last one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import yaml

from ops.spec.platform import CONF_DIR_ENV, PlatformConfig, load_platform

REPO_ROOT = Path(__file__).resolve().parents[2]
# A cold Spark start with the metastore and GX takes a minute or two with the 2 cores shared.
SPARK_PROCESS_TIMEOUT = 900
# A line of `--until` and `--serve` output: one query's rows (or, served, its error).
RESULT_PREFIX = "result "
ERROR_PREFIX = "error "
# The table readers the running test started, by conf dir; `warehouse_platform` stops its platform's.
_READERS: dict[Path, TableReader] = {}


def jdbc_url(sqlalchemy_url: str) -> str:
    url = sa.make_url(sqlalchemy_url)
    return f"jdbc:postgresql://{url.host}:{url.port}/{url.database}"


@pytest.fixture
def warehouse_platform(platform_conf: PlatformConfig, postgres_database: str) -> Iterator[PlatformConfig]:
    """The throwaway platform with `warehouse:` pointing at a fresh metastore database; the table
    reader its test started is stopped before the database is dropped."""
    path = platform_conf.conf_dir / "platform.yaml"
    document = yaml.safe_load(path.read_text())
    document["warehouse"] = {
        "root": str(platform_conf.runtime_root / "warehouse"),
        "metastore_jdbc_url": jdbc_url(postgres_database),
        "metastore_user": sa.make_url(postgres_database).username,
    }
    path.write_text(yaml.safe_dump(document))
    yield load_platform(platform_conf.conf_dir)
    reader = _READERS.pop(platform_conf.conf_dir, None)
    if reader is not None:
        reader.close()


def run_module(
    platform: PlatformConfig, module: str, args: Sequence[str]
) -> subprocess.CompletedProcess[str]:
    """Run `python -m module args` against the platform; its output is kept for the assertion messages."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=REPO_ROOT,
        env={**os.environ, CONF_DIR_ENV: str(platform.conf_dir)},
        capture_output=True,
        text=True,
        timeout=SPARK_PROCESS_TIMEOUT,
        check=False,
    )


def compact_job(platform: PlatformConfig, job: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`python -m jobs.compaction.main --job JOB ...`; asserts it exited 0."""
    result = run_module(platform, "jobs.compaction.main", ["--job", job, *args])
    assert result.returncode == 0, result.stderr[-6000:]
    return result


def run_available_now(platform: PlatformConfig, job: str) -> None:
    """The job's driver over the landing files present (`--available-now`), until it has read them."""
    result = run_module(platform, "jobs.runner", ["--job", job, "--run-id", f"{job}-fill", "--available-now"])
    assert result.returncode == 0, result.stderr[-6000:]


def one_file_per_batch(spec: dict[str, Any]) -> None:
    """A job spec edit: many small batches (one landing file each), and compaction turned on."""
    spec["operations"]["trigger"] = {"interval_seconds": 1, "max_files_per_trigger": 1}
    spec["operations"].setdefault("compaction", {"closed_after_hours": 2, "target_file_mb": 64})


def append_to_sink_log(sink: Path, data_file: Path) -> Path:
    """Record `data_file` as committed by a new batch of the sink's log, as Spark's file sink
    would; returns the log entry."""
    log = sink / "_spark_metadata"
    next_batch = max(int(entry.name.split(".")[0]) for entry in log.iterdir() if entry.name[0].isdigit()) + 1
    record = {
        "path": data_file.as_uri(),
        "size": data_file.stat().st_size,
        "isDir": False,
        "modificationTime": int(time.time() * 1000),
        "blockReplication": 1,
        "blockSize": 33554432,
        "action": "add",
    }
    entry = log / str(next_batch)
    entry.write_text("v1\n" + json.dumps(record))
    return entry


class TableReader:
    """`python -m tests.support.warehouse --serve` on one platform: a query a line on its stdin,
    its rows (or error) a line on its stdout; its log in the platform's runtime root."""

    def __init__(self, platform: PlatformConfig) -> None:
        self.log = platform.runtime_root / "table-reader.log"
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("w") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.support.warehouse", "--serve"],
                cwd=REPO_ROOT,
                env={**os.environ, CONF_DIR_ENV: str(platform.conf_dir)},
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )

    def query(self, sql: str) -> list[dict[str, Any]]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(sql) + "\n")
        self.process.stdin.flush()
        for line in self.process.stdout:
            if line.startswith(RESULT_PREFIX):
                rows: list[dict[str, Any]] = json.loads(line.removeprefix(RESULT_PREFIX))
                return rows
            if line.startswith(ERROR_PREFIX):
                raise AssertionError(f"{sql}: {json.loads(line.removeprefix(ERROR_PREFIX))}")
        raise AssertionError(
            f"the table reader ended before answering {sql}:\n{self.log.read_text()[-6000:]}"
        )

    def close(self) -> None:
        """End its input; it stops its session and exits."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.close()
        try:
            self.process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process.stdout.close()


def query_table(platform: PlatformConfig, sql: str) -> list[dict[str, Any]]:
    """The rows of a SQL query, run by the test's reader process on the shared metastore."""
    reader = _READERS.get(platform.conf_dir)
    if reader is None:
        reader = _READERS[platform.conf_dir] = TableReader(platform)
    return reader.query(sql)


def main(argv: Sequence[str] | None = None) -> int:
    """`--serve`: answer the queries read from stdin (one JSON string a line) until it closes, each
    result one JSON line. `--until FILE SQL`: run SQL again and again until FILE exists (and once
    more), each result one JSON line."""
    import argparse

    from pyspark.sql import SparkSession

    from ops.warehouse.metastore import metastore_conf

    parser = argparse.ArgumentParser()
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--serve", action="store_true")
    mode.add_argument("--until", type=Path)
    parser.add_argument("sql", nargs="?")
    args = parser.parse_args(argv)
    platform = load_platform()
    builder = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
    for key, value in {**metastore_conf(platform), **platform.spark.network_conf()}.items():
        builder = builder.config(key, value)
    spark = builder.config("spark.sql.session.timeZone", "UTC").getOrCreate()
    if args.serve:
        for line in sys.stdin:
            sql = json.loads(line)
            try:
                # Other processes publish between queries: forget what this one listed before.
                for table in (
                    spark.catalog.listTables("warehouse") if spark.catalog.databaseExists("warehouse") else []
                ):
                    spark.catalog.refreshTable(f"warehouse.{table.name}")
                rows = [row.asDict() for row in spark.sql(sql).collect()]
            except Exception as error:  # noqa: BLE001 - the test gets the query's error as its failure
                print(ERROR_PREFIX + json.dumps(str(error)[:6000]), flush=True)
            else:
                print(RESULT_PREFIX + json.dumps(rows, default=str), flush=True)
    else:
        while True:
            stop = args.until.exists()
            rows = [row.asDict() for row in spark.sql(args.sql).collect()]
            print(RESULT_PREFIX + json.dumps(rows, default=str), flush=True)
            if stop:
                break
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
