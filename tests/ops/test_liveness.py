"""The driver's liveness reporter against the worker's real SparkSession: a job whose tasks keep
completing moves, one whose only task blocks does not, and CPU burnt while starting is a move."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from pyspark.sql import SparkSession

from ops.driver.liveness import Liveness, read_liveness
from ops.driver.reporter import CPU_MOVE_SECONDS, LivenessReporter

INTERVAL = 0.25


@contextmanager
def spark_job(spark: SparkSession, job: Callable[[], object]) -> Iterator[threading.Thread]:
    """Run `job` on the session from a thread of its own for the block; wait for it after."""
    thread = threading.Thread(target=job, daemon=True)
    thread.start()
    try:
        yield thread
    finally:
        thread.join(timeout=120)
    assert not thread.is_alive(), "the Spark job did not end"


def newest(path: Path) -> Liveness:
    record = read_liveness(path)
    assert record is not None
    return record


def wait_until(path: Path, accept: Callable[[Liveness], bool], timeout: float = 120) -> Liveness:
    deadline = time.monotonic() + timeout
    while not accept(record := newest(path)):
        assert time.monotonic() < deadline, f"no liveness record accepted within {timeout:g}s: {record}"
        time.sleep(0.05)
    return record


def test_tasks_completing_are_moves_and_a_blocked_task_is_not(spark: SparkSession, tmp_path: Path) -> None:
    path = tmp_path / "liveness.json"
    with LivenessReporter(path, "run-1", interval=INTERVAL) as reporter:
        assert newest(path).phase == "starting" and newest(path).run_id == "run-1"
        reporter.enter("planning", spark.sparkContext)
        reporter.enter("running")
        assert newest(path).phase == "running"

        # Forty tasks of a quarter second each: every report sees more of them done.
        def many_short_tasks() -> object:
            return (
                spark.sparkContext.parallelize(range(40), 40).map(lambda x: (time.sleep(0.25), x)[1]).count()
            )

        with spark_job(spark, many_short_tasks):
            first = wait_until(path, lambda r: r.tasks_completed >= 4)
            later = wait_until(path, lambda r: r.tasks_completed >= first.tasks_completed + 8)
            assert later.moved_at > first.moved_at and later.at - later.moved_at < 5
        done = wait_until(path, lambda r: r.active_stages == 0)
        # The tasks that finish between the last report and the stage's end are not counted.
        assert done.tasks_completed >= 20

        # One task that blocks for 8 s: the stage starting is a move, then nothing completes.
        def one_blocked_task() -> object:
            return spark.sparkContext.parallelize([0], 1).map(lambda x: (time.sleep(8), x)[1]).count()

        with spark_job(spark, one_blocked_task):
            started = wait_until(path, lambda r: r.active_stages == 1)
            blocked = wait_until(path, lambda r: r.at - r.moved_at >= 4, timeout=30)
            assert blocked.active_stages == 1 and blocked.tasks_completed == started.tasks_completed
        # The stage ends: a move.
        ended = wait_until(path, lambda r: r.active_stages == 0)
        assert ended.moved_at > blocked.moved_at


def test_cpu_burnt_while_starting_is_a_move(tmp_path: Path) -> None:
    path = tmp_path / "liveness.json"
    with LivenessReporter(path, "run-1", interval=INTERVAL):
        launched = newest(path)
        # What a JVM does while it loads classes: work, in the driver's process tree. Counted in CPU
        # seconds, not wall: a loaded machine gives this process only part of a core.
        burnt = time.process_time() + 2 * CPU_MOVE_SECONDS
        while time.process_time() < burnt:
            sum(i * i for i in range(10_000))
        moved = wait_until(path, lambda r: r.moved_at > launched.moved_at, timeout=30)
    assert moved.phase == "starting" and moved.cpu_seconds > launched.cpu_seconds
