"""A throwaway platform with a warehouse: its metastore is a fresh database on the worker's
PostgreSQL server, and Spark work on the table runs in its own processes, as in production.

A Hive-catalog SparkSession cannot share a JVM with the tests' plain local session (the catalog
is fixed when the JVM's context starts), so the compaction entry point and the reader
(`python -m tests.support.warehouse`) each run as a subprocess of the test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import yaml

from ops.spec.platform import CONF_DIR_ENV, PlatformConfig, load_platform

REPO_ROOT = Path(__file__).resolve().parents[2]
# A cold Spark start with the metastore and GX takes a minute or two with the 2 cores shared.
SPARK_PROCESS_TIMEOUT = 900
# A line of `--until` output: one query's rows.
RESULT_PREFIX = "result "


def jdbc_url(sqlalchemy_url: str) -> str:
    url = sa.make_url(sqlalchemy_url)
    return f"jdbc:postgresql://{url.host}:{url.port}/{url.database}"


@pytest.fixture
def warehouse_platform(platform_conf: PlatformConfig, postgres_database: str) -> PlatformConfig:
    """The throwaway platform with `warehouse:` pointing at a fresh metastore database."""
    path = platform_conf.conf_dir / "platform.yaml"
    document = yaml.safe_load(path.read_text())
    document["warehouse"] = {
        "root": str(platform_conf.runtime_root / "warehouse"),
        "metastore_jdbc_url": jdbc_url(postgres_database),
        "metastore_user": sa.make_url(postgres_database).username,
    }
    path.write_text(yaml.safe_dump(document))
    return load_platform(platform_conf.conf_dir)


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


def query_table(platform: PlatformConfig, sql: str) -> list[dict[str, Any]]:
    """The rows of a SQL query, run by a Spark process of its own on the shared metastore."""
    result = run_module(platform, "tests.support.warehouse", [sql])
    assert result.returncode == 0, result.stderr[-6000:]
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


def main(argv: Sequence[str] | None = None) -> int:
    """Print the rows of one SQL query on the warehouse, one JSON object a line; with `--until
    FILE`, run it again and again until FILE exists (and once more), each result one JSON line."""
    import argparse

    from pyspark.sql import SparkSession

    from ops.warehouse.metastore import metastore_conf

    parser = argparse.ArgumentParser()
    parser.add_argument("--until", type=Path)
    parser.add_argument("sql")
    args = parser.parse_args(argv)
    platform = load_platform()
    builder = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
    for key, value in {**metastore_conf(platform), **platform.spark.network_conf()}.items():
        builder = builder.config(key, value)
    spark = builder.config("spark.sql.session.timeZone", "UTC").getOrCreate()
    if args.until is None:
        for row in spark.sql(args.sql).collect():
            print(json.dumps(row.asDict(), default=str))
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
