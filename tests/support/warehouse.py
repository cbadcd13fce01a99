"""A throwaway platform with a warehouse: its metastore is a fresh database on the worker's
PostgreSQL server, and Spark work on the table runs in its own processes, as in production.

A Hive-catalog SparkSession cannot share a JVM with the tests' plain local session (the catalog
is fixed when the JVM's context starts), so the table's Spark work runs in a process of its own:
`python -m tests.support.warehouse --serve`, started once per test platform, runs every query,
compaction and backfill publish of the test (a Hive-enabled process's start is half a minute of
CPU). A compaction or a publish runs the entry point's own `main` there, in a Spark context of its
own (the reader's is stopped first, and started again for the next query in the same JVM); before
each query the tables are refreshed, so the reader sees what other processes published since its
last one. Where the process itself is the subject (a compaction killed midway, spark-submit from a
DAG, `warden backfill`'s own processes), the tests start the entry point as a process of its own.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import sqlalchemy as sa
import yaml

from ops.spec.platform import CONF_DIR_ENV, PlatformConfig, load_platform

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

REPO_ROOT = Path(__file__).resolve().parents[2]
# A cold Spark start with the metastore and GX takes a minute or two with the 2 cores shared.
SPARK_PROCESS_TIMEOUT = 900
# A line of `--until` and `--serve` output: one query's rows; served, a query's error or an
# application's exit status and output.
RESULT_PREFIX = "result "
ERROR_PREFIX = "error "
EXITED_PREFIX = "exited "
# The applications the warehouse process runs by their `main`: the compaction and the backfill's
# publish, each building its own Hive-enabled session as in a process of its own.
APPLICATIONS = ("jobs.compaction.main", "jobs.compaction.backfill")
# The warehouse processes the running test started, by conf dir; `warehouse_platform` stops its own.
_PROCESSES: dict[Path, WarehouseProcess] = {}


def jdbc_url(sqlalchemy_url: str) -> str:
    url = sa.make_url(sqlalchemy_url)
    return f"jdbc:postgresql://{url.host}:{url.port}/{url.database}"


@pytest.fixture
def warehouse_platform(platform_conf: PlatformConfig, postgres_database: str) -> Iterator[PlatformConfig]:
    """The throwaway platform with `warehouse:` pointing at a fresh metastore database; the
    warehouse process its test started is stopped before the database is dropped."""
    path = platform_conf.conf_dir / "platform.yaml"
    document = yaml.safe_load(path.read_text())
    document["warehouse"] = {
        "root": str(platform_conf.runtime_root / "warehouse"),
        "metastore_jdbc_url": jdbc_url(postgres_database),
        "metastore_user": sa.make_url(postgres_database).username,
    }
    path.write_text(yaml.safe_dump(document))
    yield load_platform(platform_conf.conf_dir)
    process = _PROCESSES.pop(platform_conf.conf_dir, None)
    if process is not None:
        process.close()


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
    """`jobs.compaction.main --job JOB ...` in the test's warehouse process; asserts it exited 0.
    Its log (and Spark's) is the result's stderr."""
    result = warehouse_process(platform).run_application("jobs.compaction.main", ["--job", job, *args])
    assert result.returncode == 0, result.stderr[-6000:]
    return result


def driver_available_now(platform: PlatformConfig, job: str) -> None:
    """The job's driver process over the landing files present (`--available-now`), until it has
    read them. Where the process is not the subject, `tests.support.spark.run_available_now` runs
    the same query in the test's session."""
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


class WarehouseProcess:
    """`python -m tests.support.warehouse --serve` on one platform: a request a JSON line on its
    stdin, its answer a line on its stdout; its own log in the platform's runtime root."""

    def __init__(self, platform: PlatformConfig) -> None:
        self.log = platform.runtime_root / "warehouse-process.log"
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
        prefix, answer = self._ask({"sql": sql})
        if prefix == ERROR_PREFIX:
            raise AssertionError(f"{sql}: {answer}")
        rows: list[dict[str, Any]] = answer
        return rows

    def run_application(self, module: str, argv: list[str]) -> subprocess.CompletedProcess[str]:
        """`module.main(argv)` (one of `APPLICATIONS`) in this process; its exit status, and its
        output as the stderr."""
        prefix, answer = self._ask({"application": module, "argv": argv})
        if prefix == ERROR_PREFIX:
            raise AssertionError(f"{module}: {answer}")
        return subprocess.CompletedProcess([module, *argv], answer["returncode"], "", answer["output"])

    def _ask(self, request: dict[str, Any]) -> tuple[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        for prefix in (RESULT_PREFIX, ERROR_PREFIX, EXITED_PREFIX):
            if line.startswith(prefix):
                return prefix, json.loads(line.removeprefix(prefix))
        raise AssertionError(
            f"the warehouse process ended before answering {request}:\n{self.log.read_text()[-6000:]}"
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


def warehouse_process(platform: PlatformConfig) -> WarehouseProcess:
    """The test's warehouse process for `platform`, started on first use."""
    process = _PROCESSES.get(platform.conf_dir)
    if process is None:
        process = _PROCESSES[platform.conf_dir] = WarehouseProcess(platform)
    return process


def query_table(platform: PlatformConfig, sql: str) -> list[dict[str, Any]]:
    """The rows of a SQL query, run by the test's warehouse process on the shared metastore."""
    return warehouse_process(platform).query(sql)


def reader_session(platform: PlatformConfig) -> SparkSession:
    """A local[1] session on the platform's metastore, UTC."""
    from pyspark.sql import SparkSession

    from ops.warehouse.metastore import metastore_conf

    builder = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
    for key, value in {**metastore_conf(platform), **platform.spark.network_conf()}.items():
        builder = builder.config(key, value)
    return builder.config("spark.sql.session.timeZone", "UTC").getOrCreate()


def answer_query(spark: SparkSession, sql: str) -> str:
    """The answer line to a query: its rows, or its error."""
    try:
        # Other processes publish between queries: forget what this one listed before.
        for table in (
            spark.catalog.listTables("warehouse") if spark.catalog.databaseExists("warehouse") else []
        ):
            spark.catalog.refreshTable(f"warehouse.{table.name}")
        rows = [row.asDict() for row in spark.sql(sql).collect()]
    except Exception as error:  # noqa: BLE001 - the test gets the query's error as its failure
        return ERROR_PREFIX + json.dumps(str(error)[:6000])
    return RESULT_PREFIX + json.dumps(rows, default=str)


def answer_application(module: str, argv: list[str]) -> str:
    """The answer line to an application: its `main`'s exit status and everything written to this
    process's stdout and stderr meanwhile (its log, Spark's)."""
    if module not in APPLICATIONS:
        return ERROR_PREFIX + json.dumps(f"{module} is not one of {APPLICATIONS}")
    application_main = importlib.import_module(module).main

    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile("w+") as captured:
        os.dup2(captured.fileno(), 1)
        os.dup2(captured.fileno(), 2)
        try:
            returncode = application_main(argv)
        except Exception:  # noqa: BLE001 - the test sees the traceback, as from a process of its own
            traceback.print_exc()
            returncode = 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved, 1)
            os.dup2(saved, 2)
            os.close(saved)
        captured.seek(0)
        output = captured.read()
    return EXITED_PREFIX + json.dumps({"returncode": returncode, "output": output})


def serve(platform: PlatformConfig) -> None:
    """Answer the requests read from stdin until it closes: `{"sql": ...}`, or
    `{"application": module, "argv": [...]}`."""
    # Answers go to the stdout the test reads; fd 1 then points at the log, so nothing else printed
    # (Spark's or a compaction's output) can be taken for an answer.
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    spark: SparkSession | None = None
    for line in sys.stdin:
        request = json.loads(line)
        if "application" in request:
            # The application builds its own session, with its job's confs, as in a process of its own.
            if spark is not None:
                spark.stop()
                spark = None
            answer = answer_application(request["application"], request["argv"])
        else:
            if spark is None:
                spark = reader_session(platform)
            answer = answer_query(spark, request["sql"])
        answers.write(answer + "\n")
        answers.flush()
    if spark is not None:
        spark.stop()


def main(argv: Sequence[str] | None = None) -> int:
    """`--serve`: answer requests from stdin (see `serve`). `--until FILE SQL`: run SQL again and
    again until FILE exists (and once more), each result one JSON line."""
    import argparse

    parser = argparse.ArgumentParser()
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--serve", action="store_true")
    mode.add_argument("--until", type=Path)
    parser.add_argument("sql", nargs="?")
    args = parser.parse_args(argv)
    platform = load_platform()
    if args.serve:
        serve(platform)
        return 0
    spark = reader_session(platform)
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
