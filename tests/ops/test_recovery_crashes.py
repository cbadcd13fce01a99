"""kill -9 of the process running a restate or an upgrade, at each of its steps: the next reconcile
passes finish the operation (or roll it back), and the sink equals a clean run of the version that
ends up running. Real `warden` processes, real drivers launched by the supervisor, a real S3
server; the steps are read from the operation's record in the ledger.

The wrong version's output comes from the session's Spark in this process (as in
`test_restate_differential.py`), so each restate case costs only the drivers it needs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.testing import assertDataFrameEqual

from jobs.batch import batch_rows
from jobs.router.transform import read_route
from ops.control.supervisor import Supervisor, stop_all_jobs
from ops.driver.checkpoint import sink_files
from ops.driver.replay import pending_replay
from ops.ledger.records import OperationRecord, SavepointRecord
from ops.ledger.store import Ledger
from ops.recovery import rewind as rewind_module
from ops.recovery.upgrade import dry_runs_dir
from ops.savepoints.store import take_savepoint
from ops.spec.job import find_job
from ops.spec.platform import CONF_DIR_ENV, PlatformConfig, load_platform
from synthetic.generator import write_batch
from tests.ops.test_restate_differential import run_available
from tests.support.drivers import REPO_ROOT, caught_up, edit_job, edited_job_file, wait_for
from tests.support.platform import job_paths
from tests.support.s3 import S3Server, SlowLink, point_at_s3

JOB = "router"
RIGHT = "event_type = 'purchase' AND amount > 0"
WRONG = "event_type = 'purchase'"


def router_version(expression: str) -> Callable[[dict[str, Any]], None]:
    def edit(spec: dict[str, Any]) -> None:
        spec["operations"]["trigger"] = {"interval_seconds": 1, "max_files_per_trigger": 1}
        spec["operations"]["restart"]["initial_backoff_seconds"] = 1
        spec["pipeline"]["routes"][0]["filter"] = expression

    return edit


def write_input(platform: PlatformConfig, seeds: range) -> None:
    for seed in seeds:
        write_batch(platform.landing_root / "events", 60, 0.05, seed, file_name=f"events-{seed:03d}.json")


class Warden:
    """`python -m ops.cli ...` in a session of its own, its output in a log file."""

    def __init__(self, platform: PlatformConfig, *args: str) -> None:
        self.output = platform.runtime_root / f"warden-{args[0]}-{time.monotonic_ns()}.log"
        self.output.parent.mkdir(parents=True, exist_ok=True)
        with self.output.open("wb") as log_file:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "ops.cli", *args],
                cwd=REPO_ROOT,
                env={**os.environ, CONF_DIR_ENV: str(platform.conf_dir)},
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def kill_when(self, condition: Callable[[], bool], what: str, timeout: float = 300) -> None:
        """SIGKILL the command (and its process group; the drivers it launched have their own) as
        soon as `condition` holds."""
        deadline = time.monotonic() + timeout
        while not condition():
            assert self.process.poll() is None, f"warden ended before {what}:\n{self.log()}"
            assert time.monotonic() < deadline, f"timed out waiting for {what}:\n{self.log()}"
            time.sleep(0.1)
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def log(self) -> str:
        return self.output.read_text(errors="replace")[-5000:]


def open_operation(ledger: Ledger) -> OperationRecord | None:
    return ledger.operation(JOB)


def at_step(ledger: Ledger, step: str, also: Callable[[OperationRecord], bool] = lambda _: True) -> bool:
    operation = open_operation(ledger)
    return operation is not None and operation.step == step and also(operation)


def finish_by_reconciling(supervisor: Supervisor, operation_id: int, timeout: float = 400) -> OperationRecord:
    """Reconcile passes, as the supervision DAG would run them, until the operation is closed."""
    deadline = time.monotonic() + timeout
    while True:
        line = supervisor.reconcile(JOB).line()
        operation = supervisor.ledger.operation_by_id(operation_id)
        assert operation is not None
        if operation.finished_at is not None:
            return operation
        assert time.monotonic() < deadline, f"operation {operation_id} stuck at step {operation.step}: {line}"
        time.sleep(1.0)


def assert_sink_is_a_clean_run(spark: SparkSession, platform: PlatformConfig) -> None:
    spec = find_job(JOB, platform.conf_dir)
    sink = spark.read.parquet(str(platform.lake_root / spec.pipeline.sink.path))
    clean = batch_rows(spark, platform, spec, platform.landing_root)
    assert clean.count() > 0
    assertDataFrameEqual(sink.select(*clean.columns), clean)


# --- restate ---------------------------------------------------------------------------------------


@pytest.fixture
def platform(platform_with_s3: PlatformConfig) -> Iterator[PlatformConfig]:
    edit_job(platform_with_s3, JOB, router_version(RIGHT))
    yield platform_with_s3
    stop_all_jobs(load_platform(platform_with_s3.conf_dir))


# Input files 12..15 each hold a zero-amount purchase, which only the wrong version routes.
WRONG_VERSION_SEEDS = range(12, 16)
LATER_SEEDS = range(16, 18)


def wrong_version_ran(spark: SparkSession, platform: PlatformConfig, ledger: Ledger) -> SavepointRecord:
    """4 files through the right version, a savepoint, 4 files through the wrong one; the right
    version is installed again. Returns the savepoint."""
    right_spec = (platform.conf_dir / "jobs" / f"{JOB}.yaml").read_text()
    write_input(platform, range(4))
    run_available(spark, platform, JOB)
    spec = find_job(JOB, platform.conf_dir)
    savepoint = take_savepoint(platform, ledger, spec)
    edit_job(platform, JOB, router_version(WRONG))
    write_input(platform, WRONG_VERSION_SEEDS)
    run_available(spark, platform, JOB)
    sink = platform.lake_root / spec.pipeline.sink.path
    wrong_rows = read_route(spark, sink, "purchases", ["amount"]).where("amount = 0").count()
    assert wrong_rows > 0, "the wrong version routed zero-amount purchases"
    (platform.conf_dir / "jobs" / f"{JOB}.yaml").write_text(right_spec)
    return savepoint


@pytest.mark.parametrize("kill_at", ["after_suspend", "mid_rewind", "mid_replay"])
def test_a_restate_killed_at_any_step_is_finished_by_the_next_reconcile_passes(
    kill_at: str,
    spark: SparkSession,
    platform: PlatformConfig,
    ledger: Ledger,
    s3_server: S3Server,
) -> None:
    savepoint = wrong_version_ran(spark, platform, ledger)
    supervisor = Supervisor.for_platform(platform)
    if kill_at == "after_suspend":
        # The job runs (the right version, caught up) when the restatement starts.
        supervisor.reconcile(JOB)
        wait_for(lambda: supervisor.reconcile(JOB).state == "RUNNING", 240, "the job to run")
    link = None
    if kill_at == "mid_rewind":
        # Every S3 request crawls, so the rewind's download of the savepoint takes seconds.
        link = SlowLink(s3_server.service.ports.s3, delay=0.5)
        point_at_s3(platform, link.endpoint_url, s3_server.bucket, platform.s3.savepoint_prefix)
    try:
        command = Warden(platform, "restate", JOB, "--savepoint", savepoint.id, "--reason", f"kill {kill_at}")
        match kill_at:
            case "after_suspend":
                command.kill_when(
                    lambda: at_step(ledger, "stop") and ledger.current_run(JOB) is None, "the driver to stop"
                )
            case "mid_rewind":
                command.kill_when(lambda: at_step(ledger, "rewind"), "the rewind")
            case "mid_replay":
                command.kill_when(
                    lambda: at_step(ledger, "replay") and ledger.current_run(JOB) is not None,
                    "the replaying driver",
                )
    finally:
        if link is not None:
            point_at_s3(platform, s3_server.endpoint_url, s3_server.bucket, platform.s3.savepoint_prefix)
            link.close()

    killed = open_operation(ledger)
    assert killed is not None, "the operation was still open when its process died"
    if kill_at == "mid_replay":
        assert killed.rewound_at is not None and pending_replay(job_paths(platform, JOB)), (
            "killed during the replay"
        )
    else:
        assert killed.rewound_at is None, "killed before the rewind was done"

    # Whoever runs the next passes (here: this test, as the supervision DAG would) finishes it.
    supervisor = Supervisor.for_platform(load_platform(platform.conf_dir))
    ended = finish_by_reconciling(supervisor, killed.id)
    assert ended.failure is None and ended.outcome is not None
    assert ended.outcome.startswith(
        f"restated {JOB} from savepoint {savepoint.id} (batch {savepoint.batch_id})"
    )
    assert ledger.decisions(JOB, action="restate")[0].outcome == ended.outcome
    assert [alert.kind for alert in ledger.alerts(JOB)].count("restated") == 1
    assert ledger.job(JOB).desired_state == "running" and ledger.current_run(JOB) is not None

    assert caught_up(platform, JOB, files=8)
    assert_sink_is_a_clean_run(spark, platform)
    # New input after the restatement goes through the right version as well.
    write_input(platform, LATER_SEEDS)
    wait_for(lambda: caught_up(platform, JOB, files=10), 120, "the new input")
    assert_sink_is_a_clean_run(spark, platform)


class Crash(Exception):
    """Stands for the process dying at that point."""


def test_a_rewind_interrupted_between_its_swaps_is_redone_without_leftover_files(
    spark: SparkSession, platform: PlatformConfig, ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    savepoint = wrong_version_ran(spark, platform, ledger)
    supervisor = Supervisor.for_platform(platform)
    supervisor.request(JOB, "suspend", "test")
    operation = supervisor.start_operation(
        JOB, "rewind", "test", {}, savepoint_id=savepoint.id, savepoint_batch=savepoint.batch_id
    )
    swap = rewind_module._swap

    def dies_after_the_sink_log(replacement: Path, live: Path, retired: Path) -> None:
        swap(replacement, live, retired)
        if retired.name == "sink-log":
            raise Crash("between the sink log swap and the deletion of the later batches' files")

    monkeypatch.setattr(rewind_module, "_swap", dies_after_the_sink_log)
    with pytest.raises(Crash):
        supervisor.reconcile(JOB)
    monkeypatch.undo()
    interrupted = ledger.operation_by_id(operation.id)
    assert interrupted is not None and interrupted.step == "rewind" and interrupted.rewound_at is None

    ended = finish_by_reconciling(supervisor, operation.id)
    first, last = savepoint.batch_id + 1, savepoint.batch_id + 4
    assert (
        ended.outcome == f"rewound to batch {savepoint.batch_id}; batches {first}..{last} queued for replay"
    )
    assert ended.rows_before is not None and ended.rows_before > 0, "the rows of the first plan"
    sink = platform.lake_root / find_job(JOB, platform.conf_dir).pipeline.sink.path
    listed = sink_files(sink / "_spark_metadata")
    assert {p for p in sink.rglob("*.parquet")} == listed, "no file of a removed batch is left"

    run_available(spark, platform, JOB)
    assert_sink_is_a_clean_run(spark, platform)


# --- upgrade ---------------------------------------------------------------------------------------


def running_router(platform: PlatformConfig, files: int) -> Supervisor:
    supervisor = Supervisor.for_platform(platform)
    write_input(platform, range(files))
    supervisor.request(JOB, "resume", "test")
    supervisor.reconcile(JOB)
    wait_for(lambda: caught_up(platform, JOB, files=files), 240, "the running version")
    return supervisor


@pytest.mark.timeout(900)
def test_an_upgrade_killed_mid_dry_run_is_deployed_by_the_next_reconcile_passes(
    spark: SparkSession, platform: PlatformConfig, ledger: Ledger, tmp_path: Path
) -> None:
    supervisor = running_router(platform, files=3)
    old_run = ledger.current_run(JOB)
    assert old_run is not None

    def keep_fewer_savepoints(spec: dict[str, Any]) -> None:
        spec["operations"]["savepoints"]["keep_count"] = 4

    new = edited_job_file(platform, JOB, keep_fewer_savepoints, tmp_path / "router-v2.yaml")
    command = Warden(platform, "upgrade", JOB, "--spec", str(new), "--reason", "kill mid dry run")
    command.kill_when(
        lambda: at_step(ledger, "dry_run", lambda op: op.dry_run_pid is not None), "the dry-run driver"
    )
    killed = open_operation(ledger)
    assert killed is not None and killed.dry_run_passed_at is None
    running = ledger.current_run(JOB)
    assert (
        running is not None and running.run_id == old_run.run_id and supervisor.backend.is_alive(running)
    ), "the running version is untouched during the dry run"

    ended = finish_by_reconciling(supervisor, killed.id)
    assert ended.failure is None and ended.dry_run_passed_at is not None
    assert ended.outcome == f"upgraded: config {old_run.config_version} -> {ended.candidate_version}"
    assert find_job(JOB, platform.conf_dir).config_version == ended.candidate_version
    current = ledger.current_run(JOB)
    assert current is not None and current.config_version == ended.candidate_version
    assert not dry_runs_dir(platform, JOB).exists(), "the dry run's scratch copy is removed"

    write_input(platform, range(3, 5))
    wait_for(lambda: caught_up(platform, JOB, files=5), 120, "the new version")
    assert_sink_is_a_clean_run(spark, platform)


# Four driver cold starts (old version, dry run, new version, old again) on shared cores.
@pytest.mark.timeout(900)
def test_an_upgrade_killed_mid_readiness_is_rolled_back_by_the_next_reconcile_passes(
    spark: SparkSession, platform: PlatformConfig, ledger: Ledger, tmp_path: Path
) -> None:
    supervisor = running_router(platform, files=3)
    old_version = find_job(JOB, platform.conf_dir).config_version

    def failing_purchases(spec: dict[str, Any]) -> None:
        # Valid to the analyzer (so the dry run passes), fails on the first row it routes.
        spec["pipeline"]["routes"][0]["filter"] = "raise_error(concat('bad version ', event_id)) IS NULL"

    new = edited_job_file(platform, JOB, failing_purchases, tmp_path / "router-v2.yaml")
    command = Warden(
        platform,
        "upgrade",
        JOB,
        "--spec",
        str(new),
        "--reason",
        "kill mid readiness",
        "--readiness-timeout",
        "180",
    )

    def new_version_launched(operation: OperationRecord) -> bool:
        run = ledger.current_run(JOB)
        return run is not None and run.config_version == operation.candidate_version

    command.kill_when(lambda: at_step(ledger, "ready", new_version_launched), "the new version's launch")
    killed = open_operation(ledger)
    assert killed is not None and killed.failure is None
    # Input the new version meets and fails on, while nobody waits for the upgrade.
    write_input(platform, range(3, 5))

    ended = finish_by_reconciling(supervisor, killed.id)
    assert ended.outcome is not None and ended.outcome.startswith(
        "rolled back: the new version did not stay up"
    )
    assert find_job(JOB, platform.conf_dir).config_version == old_version
    pages = [alert for alert in ledger.alerts(JOB) if alert.kind == "upgrade_rolled_back"]
    assert len(pages) == 1 and pages[0].severity == "critical"

    wait_for(lambda: caught_up(platform, JOB, files=5), 180, "the old version to catch up")
    assert_sink_is_a_clean_run(spark, platform)
