"""One local SparkSession per test session (per xdist worker: Spark takes seconds to start).

A failed test must not break the session for the tests after it. pytest-timeout interrupts a test
inside whatever py4j call it waits in (a stream's `awaitTermination`, say): the JVM still owes
that call's answer on the connection, so every later call on it would read the answer meant for
the call before and the rest of the session fails with nonsense. py4j cleans up after a
KeyboardInterrupt only, so `pytest_runtest_makereport` does it for every failed test that used the
session: it drops the connection and stops the streaming queries the test left running.

Stateful tests set their job's state-store confs on the shared session (`jobs.runtime.state_conf`);
after every test that used the session they are unset again, so a test's result never depends on
which tests the worker ran before it (xdist hands tests out in its own order).

`run_available_now` runs a job's real streaming query (`jobs.runner.plan_job`) in this session:
what a driver started with `--available-now` writes (sink, sink log, checkpoint), without a JVM
start of its own. Tests whose subject is the driver process start one (`tests.support.drivers`).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Generator, Iterator
from contextlib import contextmanager

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from jobs.runner import plan_job
from jobs.runtime import with_trigger
from ops.driver.session import query_conf, state_conf
from ops.spec.job import JobSpec
from ops.spec.platform import PlatformConfig

# How long a test waits for an available-now query to end: minutes of work on a loaded machine.
AVAILABLE_NOW_TIMEOUT = 900


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """local[2], no UI, UTC session time zone, few shuffle partitions."""
    # Python workers must run this venv's interpreter, not the system one (docs/architecture.md §7).
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2]")
        .appName("streamwarden-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
    # py4j logs at INFO from a finalizer at interpreter exit, after pytest closed the streams.
    logging.getLogger("py4j").setLevel(logging.WARNING)


@contextmanager
def session_confs(spark: SparkSession, confs: dict[str, str]) -> Iterator[None]:
    """Set `confs` on the shared session for the block; after it, every conf the block changed
    (these, and any the code run in it set) is back as it was."""
    before = spark.conf.getAll
    for key, value in confs.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        after = spark.conf.getAll
        for key in after.keys() - before.keys():
            spark.conf.unset(key)
        for key, value in before.items():
            if after.get(key) != value:
                spark.conf.set(key, value)


def run_available_now(spark: SparkSession, platform: PlatformConfig, spec: JobSpec) -> StreamingQuery:
    """Run the job's real query over the input present now, to its end, with the job's query confs
    (`jobs.runtime.query_conf`); asserts it ended without error. The state confs stay set until
    the test ends (its state may be read next); the others are unset again."""
    for key, value in state_conf(spec).items():
        spark.conf.set(key, value)
    with session_confs(spark, query_conf(platform, spec)):
        query = with_trigger(plan_job(platform, spec), spec, available_now=True)(spark).start()
        try:
            ended = query.awaitTermination(AVAILABLE_NOW_TIMEOUT)
        finally:
            query.stop()
    assert ended, f"{spec.name}: the available-now query did not end within {AVAILABLE_NOW_TIMEOUT} s"
    assert query.exception() is None, query.exception()
    return query


# Confs tests set for their own queries, back to Spark's defaults after each test.
PER_TEST_CONFS = (
    "spark.sql.streaming.stateStore.providerClass",
    "spark.sql.streaming.stateStore.checkpointFormatVersion",
)


def recover_session(session: SparkSession) -> None:
    """Give the session a fresh py4j connection and stop every streaming query still running."""
    gateway_client = session.sparkContext._gateway._gateway_client
    connection = gateway_client.get_thread_connection()
    if connection is not None:
        # The next call opens a new connection; the JVM drops the answer it still owes this one.
        connection.close(reset=True)
    for query in session.streams.active:
        query.stop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """After a failed test that used the session, recover it before the fixtures' teardown runs."""
    report = yield
    session = getattr(item, "funcargs", {}).get("spark")
    if report.when == "call" and report.failed and isinstance(session, SparkSession):
        recover_session(session)
    return report


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Unset the per-test confs after every test that used the session."""
    session = getattr(item, "funcargs", {}).get("spark")
    if isinstance(session, SparkSession):
        for key in PER_TEST_CONFS:
            session.conf.unset(key)
