"""A throwaway platform with a warehouse: its metastore is a fresh database on the worker's
PostgreSQL server, and Spark work on the table runs in a process of its own, as in production.

A Hive-catalog SparkSession cannot share a JVM with the tests' plain local session (the catalog
is fixed when the JVM's context starts), so the table's Spark work runs in another process:
`python -m tests.support.warehouse --serve`, one per worker, started on first use (a Hive-enabled
process's start is half a minute of CPU), runs every query, compaction and backfill publish of
the worker's tests. Each request names its test's conf dir and carries the test's environment; a
query runs in a reader session on that platform's metastore, started again when the platform
changes, and a compaction or a publish runs the entry point's own `main` in a Spark context of its
own (the reader's is stopped first). Before each query the tables are refreshed, so the reader sees
what other processes published since its last one. Where the process itself is the subject (a
compaction killed midway, spark-submit from a DAG, `warden backfill`'s own processes), the tests
start the entry point as a process of its own.
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
APPLICATIONS = ("ops.warehouse.compaction", "ops.warehouse.publish")
# The worker's warehouse process, once a test has used it; `warehouse_server` stops it.
_PROCESS: list[WarehouseProcess] = []


def jdbc_url(sqlalchemy_url: str) -> str:
    url = sa.make_url(sqlalchemy_url)
    return f"jdbc:postgresql://{url.host}:{url.port}/{url.database}"


@pytest.fixture(scope="session")
def warehouse_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Where the worker's warehouse process logs; the process itself is started by the first
    request and stopped after the worker's last test."""
    log = tmp_path_factory.mktemp("warehouse-process") / "warehouse-process.log"
    yield log
    while _PROCESS:
        _PROCESS.pop().close()


@pytest.fixture
def warehouse_platform(
    platform_conf: PlatformConfig, postgres_database: str, warehouse_server: Path
) -> Iterator[PlatformConfig]:
    """The throwaway platform with `warehouse:` pointing at a fresh metastore database; the
    worker's warehouse process lets go of it before the database is dropped."""
    path = platform_conf.conf_dir / "platform.yaml"
    document = yaml.safe_load(path.read_text())
    document["warehouse"] = {
        "root": str(platform_conf.runtime_root / "warehouse"),
        "metastore_jdbc_url": jdbc_url(postgres_database),
        "metastore_user": sa.make_url(postgres_database).username,
    }
    path.write_text(yaml.safe_dump(document))
    if not _PROCESS:
        _PROCESS.append(WarehouseProcess(warehouse_server))
    yield load_platform(platform_conf.conf_dir)
    _PROCESS[0].release(platform_conf)


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
    """`ops.warehouse.compaction --job JOB ...` in the test's warehouse process; asserts it exited 0.
    Its log (and Spark's) is the result's stderr."""
    result = warehouse_process().run_application(platform, "ops.warehouse.compaction", ["--job", job, *args])
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
    """`python -m tests.support.warehouse --serve`: a request a JSON line on its stdin (with the
    platform's conf dir and the test's environment), its answer a line on its stdout."""

    def __init__(self, log: Path) -> None:
        self.log = log
        with self.log.open("w") as output:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.support.warehouse", "--serve"],
                cwd=REPO_ROOT,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=output,
                text=True,
            )

    def query(self, platform: PlatformConfig, sql: str) -> list[dict[str, Any]]:
        prefix, answer = self._ask(platform, {"sql": sql})
        if prefix == ERROR_PREFIX:
            raise AssertionError(f"{sql}: {answer}")
        rows: list[dict[str, Any]] = answer
        return rows

    def run_application(
        self, platform: PlatformConfig, module: str, argv: list[str]
    ) -> subprocess.CompletedProcess[str]:
        """`module.main(argv)` (one of `APPLICATIONS`) in this process; its exit status, and its
        output as the stderr."""
        prefix, answer = self._ask(platform, {"application": module, "argv": argv})
        if prefix == ERROR_PREFIX:
            raise AssertionError(f"{module}: {answer}")
        return subprocess.CompletedProcess([module, *argv], answer["returncode"], "", answer["output"])

    def release(self, platform: PlatformConfig) -> None:
        """The platform's test is over: its reader session, if it is the one open, is stopped."""
        self._ask(platform, {"release": True})

    def _ask(self, platform: PlatformConfig, request: dict[str, Any]) -> tuple[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        request = {**request, "conf_dir": str(platform.conf_dir), "env": dict(os.environ)}
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        for prefix in (RESULT_PREFIX, ERROR_PREFIX, EXITED_PREFIX):
            if line.startswith(prefix):
                return prefix, json.loads(line.removeprefix(prefix))
        raise AssertionError(
            f"the warehouse process ended before answering {request.keys()}:\n{self.log.read_text()[-6000:]}"
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


def warehouse_process() -> WarehouseProcess:
    """The worker's warehouse process (a test using it has the `warehouse_platform` fixture)."""
    assert _PROCESS, "the warehouse process is for tests on `warehouse_platform`"
    return _PROCESS[0]


def query_table(platform: PlatformConfig, sql: str) -> list[dict[str, Any]]:
    """The rows of a SQL query, run by the worker's warehouse process on the platform's metastore."""
    return warehouse_process().query(platform, sql)


def reader_conf(platform: PlatformConfig) -> dict[str, str]:
    """The Spark confs of a reader on the platform's metastore."""
    from ops.warehouse.metastore import metastore_conf

    return {**metastore_conf(platform), **platform.spark.network_conf()}


def reader_session(platform: PlatformConfig) -> SparkSession:
    """A local[1] session on the platform's metastore, UTC."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
    for key, value in reader_conf(platform).items():
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


def serve() -> None:
    """Answer the requests read from stdin until it closes: `{"sql": ...}`,
    `{"application": module, "argv": [...]}` or `{"release": true}`, each with the `conf_dir` of
    its platform and the `env` of its test."""
    # Answers go to the stdout the test reads; fd 1 then points at the log, so nothing else printed
    # (Spark's or a compaction's output) can be taken for an answer.
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    spark: SparkSession | None = None
    spark_conf: dict[str, str] = {}
    for line in sys.stdin:
        request = json.loads(line)
        # As if started by the request's test: its environment, its platform.
        os.environ.clear()
        os.environ.update(request["env"])
        platform = load_platform(Path(request["conf_dir"]))
        # Another platform's reader, a released one's, or one an application would share its JVM
        # context with (it builds its own session, with its job's confs, as in a process of its own).
        if spark is not None and ("sql" not in request or reader_conf(platform) != spark_conf):
            spark.stop()
            spark = None
        if "application" in request:
            answer = answer_application(request["application"], request["argv"])
        elif "sql" in request:
            if spark is None:
                spark, spark_conf = reader_session(platform), reader_conf(platform)
            answer = answer_query(spark, request["sql"])
        else:
            answer = RESULT_PREFIX + "null"
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
    if args.serve:
        serve()
        return 0
    spark = reader_session(load_platform())
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
