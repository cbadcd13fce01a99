"""A backfill's two applications in the test's own processes, where their processes are not the
subject.

`warden backfill` runs the backfill application (`jobs.backfill`) and then its publish
(`ops.warehouse.publish`) as processes of their own (`ops.backfill.run`): two JVM starts per
backfill, the publish's a Hive-enabled one. Under `backfill_in_session` the same code runs in the
worker's SparkSession (the application's `run_batches`, under its job's query confs) and in the
test's warehouse process (the publish's `main`, which needs the Hive catalog), and everything
else of `ops.backfill.run` (planning, staging, checking the output, the CLI's lines) is unchanged.
`ops.backfill.run`'s processes keep their own test (`tests/README.md` lists it).
"""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

from jobs.backfill import backfill_spec, run_batches
from ops.backfill import run as backfill_run
from ops.backfill.submit import PUBLISH_MODULE, submit_arguments
from ops.driver.backfill import BackfillPlan, BackfillRun, BatchDone
from ops.driver.session import query_conf
from ops.exceptions import BackfillError
from ops.spec.platform import PlatformConfig
from tests.support.spark import session_confs
from tests.support.warehouse import warehouse_process

# How much of a failed publish's output the error shows.
OUTPUT_TAIL_CHARS = 6000


@pytest.fixture
def backfill_in_session(spark: SparkSession, monkeypatch: pytest.MonkeyPatch) -> None:
    """`ops.backfill.run`'s application and publish run in the test's processes for this test
    (`run_in_test_processes`)."""
    run_in_test_processes(spark, monkeypatch)


def run_in_test_processes(spark: SparkSession, monkeypatch: pytest.MonkeyPatch) -> None:
    """From now until the test ends, `ops.backfill.run`'s application runs in `spark` and its publish
    in the warehouse process: call them through the module (`backfill_run.publish_output`), as
    `warden backfill` does."""

    def run_application(platform: PlatformConfig, run: BackfillRun, plan: BackfillPlan) -> list[BatchDone]:
        with session_confs(spark, query_conf(platform, backfill_spec(run, plan))):
            return run_batches(spark, platform, run)

    monkeypatch.setattr(backfill_run, "run_application", run_application)
    monkeypatch.setattr(backfill_run, "publish_output", publish_in_warehouse_process)


def publish_in_warehouse_process(platform: PlatformConfig, run: BackfillRun, plan: BackfillPlan) -> None:
    """The publish application's `main` in the test's warehouse process; BackfillError when it
    exits non-zero, as `ops.backfill.run.publish_output` raises."""
    result = warehouse_process().run_application(platform, PUBLISH_MODULE, submit_arguments(run))
    if result.returncode != 0:
        tail = result.stderr[-OUTPUT_TAIL_CHARS:]
        raise BackfillError(f"publishing backfill {plan.run_id} exited {result.returncode}:\n{tail}")
