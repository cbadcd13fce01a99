"""A rescale interrupted by kill -9, of the process carrying it out between the stop and the
relaunch, or of the driver while it stops: the next reconcile passes finish it, and the sink is a
clean run over the same input (nothing lost, nothing written twice). Real `warden scale --wait`
processes, real drivers in local mode (`local[N]` is the cores there; the embedded cluster's runs
are in test_scaling_cluster.py)."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.testing import assertDataFrameEqual

from jobs.batch import batch_rows
from jobs.runtime import STOPPING
from ops.control.supervisor import Supervisor, stop_all_jobs
from ops.ledger.store import Ledger
from ops.spec.job import find_job
from ops.spec.platform import PlatformConfig
from synthetic.generator import FileLoad
from tests.ops.test_recovery_crashes import Warden, at_step
from tests.support.drivers import caught_up, edit_job, wait_for

pytestmark = pytest.mark.slow

JOB = "router"


def one_file_per_second(spec: dict[str, Any]) -> None:
    spec["operations"]["trigger"] = {"interval_seconds": 1, "max_files_per_trigger": 1}
    spec["operations"]["restart"]["initial_backoff_seconds"] = 1
    spec["operations"]["savepoints"]["interval_minutes"] = None


def old_driver_stopping(ledger: Ledger) -> bool:
    """The stop pass has asked the old driver to stop, and the driver has begun to (its batch
    commits, its query and JVM stop: a second or more). The warden waits for it to exit, then
    hands over to the successor in the same pass, so a kill now falls between stop and relaunch."""
    run = ledger.current_run(JOB)
    return (
        at_step(ledger, "stop")
        and run is not None
        and run.log_path is not None
        and STOPPING in Path(run.log_path).read_text(errors="replace")
    )


@pytest.mark.parametrize("kill", ["supervisor_between_stop_and_relaunch", "driver_while_it_stops"])
def test_a_rescale_killed_midway_is_finished_by_the_next_pass_and_loses_nothing(
    kill: str, spark: SparkSession, platform_conf: PlatformConfig, ledger: Ledger
) -> None:
    platform = platform_conf
    edit_job(platform, JOB, one_file_per_second)
    load = FileLoad(platform.landing_root / "events", 60)
    load.write(2)
    supervisor = Supervisor.for_platform(platform)
    try:
        supervisor.scale(JOB, 1, "start at one core")
        wait_for(lambda: supervisor.reconcile(JOB).state == "RUNNING", 240, "the router running")
        # Input for a dozen batches: the rescale stops the driver between two of them.
        load.write(12)
        # A pass records the heartbeat's batch in the ledger.
        wait_for(
            lambda: supervisor.reconcile(JOB) is not None and (ledger.job(JOB).last_batch_id or 0) >= 3,  # type: ignore[union-attr]
            120,
            "a few batches",
        )
        command = Warden(platform, "scale", JOB, "--cores", "2", "--reason", f"kill {kill}", "--wait", "300")
        if kill == "supervisor_between_stop_and_relaunch":
            command.kill_when(lambda: old_driver_stopping(ledger), "the old driver to begin its stop")
        else:
            command.kill_when(lambda: at_step(ledger, "stop"), "the stop to begin", timeout=120)
            run = ledger.current_run(JOB)
            assert run is not None and run.pid is not None
            # The driver, mid-stop, and its JVM: its session's group.
            os.killpg(run.pid, signal.SIGKILL)
        operation = ledger.operation(JOB)
        assert operation is not None and operation.kind == "scale" and operation.finished_at is None

        assert supervisor.await_scale(JOB, timeout=300), "the next passes did not finish the rescale"
        [rescale] = [op for op in ledger.operations(JOB) if op.kind == "scale"]
        assert (rescale.from_cores, rescale.to_cores, rescale.step) == (1, 2, "finish")
        assert rescale.outcome is not None and rescale.outcome.startswith("rescaled from 1 to 2 cores")
        runs = ledger.runs(JOB)
        assert runs[0].cores == 2 and runs[1].exit_reason == "stopped: rescale"
        assert sum(1 for run in runs if run.stopped_at is None) == 1

        load.write(2)
        wait_for(lambda: caught_up(platform, JOB, files=load.written), 300, "every file read")
    finally:
        stop_all_jobs(platform)
    spec = find_job(JOB, platform.conf_dir)
    sink = spark.read.parquet(str(platform.lake_root / spec.pipeline.sink.path))
    clean = batch_rows(spark, platform, spec, platform.landing_root)
    assert clean.count() > 0
    assertDataFrameEqual(sink.select(*clean.columns), clean)
