"""Warm standbys (`operations.restart.warm_standby`): launched beside a running driver, taking over
its checkpoint when it dies, fenced so that two drivers never run the job's query at once.

The policy and the loop's bookkeeping run on the fake backend (milliseconds); the take-over itself
and its fencing run real drivers launched by the real supervisor, kill -9 and SIGSTOP included,
and check the sink row for row against a clean run of the same input.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest
import yaml
from pyspark.testing import assertDataFrameEqual

import ops.ledger.store as ledger_module
from jobs.batch import batch_rows
from ops import cli
from ops.alerts import AlertCenter
from ops.control.launcher import LocalProcessBackend
from ops.control.policy import STANDBY_GONE
from ops.control.supervisor import Supervisor, stop_all_jobs
from ops.driver.takeover import (
    Grant,
    checkpoint_lock_holder,
    checkpoint_lock_taken,
    read_grant,
    read_standby_status,
    write_grant,
)
from ops.driver.telemetry import read_heartbeat
from ops.exceptions import ConfigError
from ops.ledger.records import StandbyRecord
from ops.ledger.store import Ledger
from ops.spec.job import find_job, load_job
from ops.spec.platform import PlatformConfig, load_platform
from synthetic.generator import write_batch
from tests.support.clock import FakeClock
from tests.support.drivers import caught_up, edit_job, wait_for
from tests.support.fake_backend import FakeBackend
from tests.support.platform import job_paths

JOB = "router"


def with_standby(spec: dict[str, Any]) -> None:
    """The router with a warm standby, a 1 s trigger over one file per batch, no savepoints."""
    operations = spec["operations"]
    operations["restart"]["warm_standby"] = True
    operations["trigger"] = {"interval_seconds": 1, "max_files_per_trigger": 1}
    operations["savepoints"]["interval_minutes"] = None


# --- the spec option --------------------------------------------------------------------------------


def test_warm_standby_is_off_by_default_and_only_a_boolean(platform_conf: PlatformConfig) -> None:
    assert find_job(JOB, platform_conf.conf_dir).operations.restart.warm_standby is False
    edit_job(platform_conf, JOB, lambda spec: spec["operations"]["restart"].update(warm_standby="yes"))
    with pytest.raises(ConfigError, match=r"operations\.restart\.warm_standby"):
        load_job(platform_conf.conf_dir / "jobs" / f"{JOB}.yaml")


# --- the checkpoint lock as the supervisor sees it ---------------------------------------------------


def test_the_supervisor_sees_who_holds_the_checkpoint_lock_and_cleans_only_while_it_is_free(
    tmp_path: Path,
) -> None:
    """Another process holding the lock (as a driver's JVM does, a POSIX record lock) is named,
    and the supervisor cannot take the lock for a sink cleanup meanwhile; once it is gone, it can."""
    assert checkpoint_lock_holder(tmp_path) is None
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys, time\n"
            f"fd = os.open({str(tmp_path / 'checkpoint.lock')!r}, os.O_RDWR | os.O_CREAT)\n"
            "fcntl.lockf(fd, fcntl.LOCK_EX)\nprint('locked', flush=True)\ntime.sleep(60)",
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"locked\n"
        assert checkpoint_lock_holder(tmp_path) == holder.pid
        with checkpoint_lock_taken(tmp_path) as taken:
            assert taken is False
    finally:
        holder.kill()
        holder.communicate()
    assert checkpoint_lock_holder(tmp_path) is None
    with checkpoint_lock_taken(tmp_path) as taken:
        assert taken is True


# --- the policy on the fake backend ------------------------------------------------------------------


@pytest.fixture
def fake_supervisor(
    platform_conf: PlatformConfig,
    ledger: Ledger,
    fake_backend: FakeBackend,
    fake_clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
) -> Supervisor:
    edit_job(platform_conf, JOB, with_standby)
    monkeypatch.setattr(ledger_module, "utcnow", fake_clock)
    alerts = AlertCenter(ledger, platform_conf.slack, fake_clock)
    return Supervisor(platform_conf, ledger, fake_backend, alerts, clock=fake_clock)


def actions(supervisor: Supervisor) -> list[str]:
    return [action.split(":")[0] for action in supervisor.reconcile(JOB).actions]


def test_a_standby_starts_beside_a_running_driver_and_takes_over_at_once_when_it_dies(
    fake_supervisor: Supervisor, fake_backend: FakeBackend, fake_clock: FakeClock, ledger: Ledger
) -> None:
    assert actions(fake_supervisor) == ["launch"]
    assert actions(fake_supervisor) == [], "no standby while the driver starts: they would share the cores"
    fake_backend.commit(JOB)
    assert actions(fake_supervisor) == ["launch_standby"]
    standby = ledger.current_standby(JOB)
    assert standby is not None and standby.run_id in fake_backend.standby_ids
    fake_backend.commit(JOB)
    assert actions(fake_supervisor) == [], "one standby at a time"

    active = ledger.current_run(JOB)
    fake_backend.crash(JOB)
    # The first failure takes over without the 2 s backoff a relaunch would wait.
    assert actions(fake_supervisor) == ["close_run", "alert", "take_over"]
    run = ledger.current_run(JOB)
    assert (run.run_id, run.pid, run.app_id) == (standby.run_id, standby.pid, standby.app_id)
    assert read_grant(job_paths(fake_supervisor.platform, JOB).runtime) == Grant(
        standby.run_id, active.run_id, pytest.approx(time.time(), abs=60)
    )
    promoted = ledger.standbys(JOB)[0]
    assert (promoted.replaces_run_id, promoted.exit_reason) == (
        active.run_id,
        f"promoted: took over from {active.run_id}",
    )
    assert fake_backend.launches == 2, "the take-over launched nothing"
    closed = next(r for r in ledger.runs(JOB) if r.run_id == active.run_id)
    assert closed.exit_reason.startswith("failed: "), "it counts towards the restart budget"

    fake_backend.commit(JOB)
    assert actions(fake_supervisor) == ["resolve_alert", "launch_standby"]
    assert ledger.current_standby(JOB).run_id not in (standby.run_id, active.run_id)


def test_a_second_failure_in_a_row_backs_off_before_the_standby_takes_over(
    fake_supervisor: Supervisor, fake_backend: FakeBackend, fake_clock: FakeClock, ledger: Ledger
) -> None:
    actions(fake_supervisor)
    fake_backend.commit(JOB)
    actions(fake_supervisor)
    fake_backend.crash(JOB)
    assert actions(fake_supervisor)[-1] == "take_over"
    fake_backend.commit(JOB)
    assert actions(fake_supervisor)[-1] == "launch_standby"
    fake_backend.crash(JOB)
    assert actions(fake_supervisor) == ["close_run", "alert"], "restart 2 waits its 4 s backoff"
    fake_clock.advance(4)
    assert actions(fake_supervisor) == ["take_over"]


def test_stop_retires_the_standby_with_the_driver_and_a_new_config_replaces_it(
    fake_supervisor: Supervisor, fake_backend: FakeBackend, ledger: Ledger, platform_conf: PlatformConfig
) -> None:
    actions(fake_supervisor)
    fake_backend.commit(JOB)
    actions(fake_supervisor)
    first = ledger.current_standby(JOB)

    edit_job(platform_conf, JOB, lambda spec: spec["operations"]["health"].update(stuck_grace_seconds=20))
    assert actions(fake_supervisor) == ["retire_standby"]
    assert ledger.standbys(JOB)[0].exit_reason == "stopped: config changed"
    fake_backend.commit(JOB)
    assert actions(fake_supervisor) == ["launch_standby"]
    second = ledger.current_standby(JOB)
    assert second.run_id != first.run_id

    fake_supervisor.request(JOB, "suspend", "maintenance")
    assert sorted(actions(fake_supervisor)) == ["retire_standby", "stop"]
    assert ledger.current_standby(JOB) is None and ledger.current_run(JOB) is None
    assert not fake_backend.drivers[second.run_id].alive
    assert actions(fake_supervisor) == [], "no standby for a suspended job"


def test_a_standby_that_dies_by_itself_is_replaced_after_a_backoff(
    fake_supervisor: Supervisor, fake_backend: FakeBackend, fake_clock: FakeClock, ledger: Ledger
) -> None:
    actions(fake_supervisor)
    fake_backend.commit(JOB)
    fake_backend.crash_next()
    assert actions(fake_supervisor) == ["launch_standby"]
    assert actions(fake_supervisor) == ["retire_standby"]
    assert ledger.standbys(JOB)[0].exit_reason == STANDBY_GONE
    fake_backend.commit(JOB)
    assert actions(fake_supervisor) == [], "inside the 2 s backoff"
    fake_clock.advance(2)
    fake_backend.commit(JOB)
    assert actions(fake_supervisor) == ["launch_standby"]


# --- real drivers ------------------------------------------------------------------------------------


def write_input(platform: PlatformConfig, seeds: range) -> None:
    for seed in seeds:
        write_batch(platform.landing_root / "events", 60, 0.05, seed, file_name=f"events-{seed:03d}.json")


@contextmanager
def passes_in_background(supervisor: Supervisor, every: float = 0.5) -> Iterator[None]:
    """Reconcile passes every `every` seconds in a thread, as the watch trigger would run them."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            supervisor.reconcile(JOB)
            stop.wait(every)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(60)


def standby_ready(platform: PlatformConfig, ledger: Ledger) -> StandbyRecord | None:
    standby = ledger.current_standby(JOB)
    if standby is None:
        return None
    status = read_standby_status(job_paths(platform, JOB).runtime, standby.run_id)
    return standby if status is not None and status.state == "ready" else None


def committed_by(platform: PlatformConfig, run_id: str) -> bool:
    heartbeat = read_heartbeat(job_paths(platform, JOB).heartbeat)
    return heartbeat is not None and heartbeat.run_id == run_id and heartbeat.event == "progress"


@pytest.fixture
def standby_platform(platform_conf: PlatformConfig) -> Iterator[tuple[PlatformConfig, Supervisor]]:
    """The throwaway platform with the router's standby on, and its real supervisor; every driver
    and standby it launched is stopped at the end."""
    edit_job(platform_conf, JOB, with_standby)
    platform = load_platform(platform_conf.conf_dir)
    yield platform, Supervisor.for_platform(platform)
    stop_all_jobs(load_platform(platform_conf.conf_dir))


def assert_sink_is_every_row_once(request: pytest.FixtureRequest, platform: PlatformConfig) -> None:
    """The sink, through its log and as a plain directory listing, equals one clean batch run."""
    spark = request.getfixturevalue("spark")
    spec = find_job(JOB, platform.conf_dir)
    sink_dir = platform.lake_root / spec.pipeline.sink.path
    sink = spark.read.parquet(str(sink_dir))
    clean = batch_rows(spark, platform, spec, platform.landing_root)
    assert clean.count() > 100
    assertDataFrameEqual(sink.select(*clean.columns), clean)
    # No orphan of the killed batch is left for readers that list the directory.
    listed = ds.dataset(sink_dir, format="parquet", partitioning="hive", exclude_invalid_files=True)
    assert listed.count_rows() == clean.count()


@pytest.mark.slow
def test_kill_9_with_a_standby_up_hands_over_every_row_once_and_a_new_standby_starts(
    standby_platform: tuple[PlatformConfig, Supervisor],
    request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
) -> None:
    platform, supervisor = standby_platform
    ledger, backend = supervisor.ledger, supervisor.backend
    write_input(platform, range(3))
    with passes_in_background(supervisor):
        wait_for(lambda: standby_ready(platform, ledger) is not None, 400, "a ready standby")
        standby = standby_ready(platform, ledger)
        active = ledger.current_run(JOB)
        assert cli.main(["status"]) == 0
        assert f"ready (pid {standby.pid})" in capsys.readouterr().out

        write_input(platform, range(3, 9))
        wait_for(lambda: committed_by(platform, active.run_id), 120, "a batch of the active driver")
        os.kill(active.pid, signal.SIGKILL)
        wait_for(lambda: committed_by(platform, standby.run_id), 120, "the standby's first batch")
        run = ledger.current_run(JOB)
        assert (run.run_id, run.pid) == (standby.run_id, standby.pid)
        take_over = ledger.decisions(JOB, action="take_over")[0]
        assert (
            take_over.outcome
            == f"run {standby.run_id} pid {standby.pid}: standby took over from {active.run_id}"
        )

        write_input(platform, range(9, 12))
        wait_for(lambda: caught_up(platform, JOB, 12), 240, "all 12 files committed")
        wait_for(
            lambda: (fresh := standby_ready(platform, ledger)) is not None and fresh.run_id != standby.run_id,
            400,
            "a fresh standby",
        )
        fresh = ledger.current_standby(JOB)

    supervisor.request(JOB, "suspend", "test over")
    assert sorted(a.split(":")[0] for a in supervisor.reconcile(JOB).actions) == ["retire_standby", "stop"]
    assert not backend.is_alive(run) and not backend.is_alive(fresh.as_run())
    assert_sink_is_every_row_once(request, platform)


@pytest.mark.slow
@pytest.mark.xdist_group("waiting")  # a frozen driver's grace waited out (tests/conftest.py)
def test_a_standby_never_runs_beside_a_driver_that_lives(
    platform_conf: PlatformConfig,
    standby_platform: tuple[PlatformConfig, Supervisor],
    request: pytest.FixtureRequest,
) -> None:
    """A frozen driver (alive, its heartbeat late, its JVM still committing) is not taken over
    before the stuck limit; a grant forged while it lives does not start the standby's query
    either (the checkpoint lock its JVM holds); once the supervisor has killed it, the standby
    takes over and every row is in the sink once."""
    # A grace long enough for a first batch on a loaded machine, short enough to wait out.
    edit_job(platform_conf, JOB, lambda spec: spec["operations"]["health"].update(stuck_grace_seconds=60))
    platform, supervisor = standby_platform
    ledger = supervisor.ledger
    paths = job_paths(platform, JOB)
    write_input(platform, range(3))
    with passes_in_background(supervisor):
        wait_for(lambda: standby_ready(platform, ledger) is not None, 400, "a ready standby")
    standby = standby_ready(platform, ledger)
    active = ledger.current_run(JOB)
    # Frozen while it has batches to run: its JVM goes on committing them behind its back.
    write_input(platform, range(3, 9))
    wait_for(lambda: committed_by(platform, active.run_id), 120, "a batch of the active driver")

    os.kill(active.pid, signal.SIGSTOP)
    frozen_at = time.monotonic()
    # Within the stuck limit (1 s trigger + 20 s grace) the supervisor sees a late heartbeat
    # of a live driver: no kill, no grant.
    while time.monotonic() - frozen_at < 12:
        supervisor.reconcile(JOB)
        time.sleep(0.5)
    assert ledger.decisions(JOB, action="take_over") == []
    assert read_grant(paths.runtime) is None
    assert LocalProcessBackend(platform).is_alive(active)

    # A grant that should not exist (a bug, a hand-made file) while the driver lives.
    write_grant(paths.runtime, Grant(standby.run_id, active.run_id, time.time()))
    log = Path(standby.log_path)
    wait_for(lambda: "take-over granted" in log.read_text(), 30, "the standby to see the forged grant")
    time.sleep(8)
    assert "query started" not in log.read_text(), "the standby started beside a live driver"
    assert read_heartbeat(paths.heartbeat).run_id == active.run_id

    with passes_in_background(supervisor):
        wait_for(
            lambda: (run := ledger.current_run(JOB)) is not None and run.run_id == standby.run_id,
            180,
            "the take-over recorded: the standby is the job's run",
        )
        # The frozen driver's JVM went on committing until it was killed: more input for the standby.
        write_input(platform, range(9, 12))
        wait_for(lambda: committed_by(platform, standby.run_id), 120, "the standby's first batch")
        closed = next(r for r in ledger.runs(JOB) if r.run_id == active.run_id)
        assert closed.exit_reason.startswith("failed: last heartbeat"), closed.exit_reason
        assert time.monotonic() - frozen_at > 40, "taken over only after the stuck limit"
        assert not LocalProcessBackend(platform).is_alive(active)
        wait_for(lambda: caught_up(platform, JOB, 12), 240, "all 12 files committed")
    supervisor.request(JOB, "suspend", "test over")
    supervisor.reconcile(JOB)
    assert_sink_is_every_row_once(request, platform)


def test_the_spec_option_is_read_from_yaml(tmp_path: Path) -> None:
    """`warm_standby: true` in a job file turns it on (YAML booleans only)."""
    source = yaml.safe_load((Path(__file__).parents[2] / "conf" / "jobs" / f"{JOB}.yaml").read_text())
    source["operations"]["restart"]["warm_standby"] = True
    path = tmp_path / f"{JOB}.yaml"
    path.write_text(yaml.safe_dump(source))
    assert load_job(path).operations.restart.warm_standby is True
