"""The fleet watch (`ops.control.fleet`) over real processes: Spark-free stand-in drivers
(`tests.support.stub_driver`, named through `DRIVER_MODULE_ENV` as the fleet benchmark names it)
and a real SQLite ledger. A sweep names the jobs that need a pass and no others; the passes it asks
for launch the fleet, relaunch a driver killed with SIGKILL and carry out a request, and a steady
job still gets its periodic pass."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from ops.control.fleet import FleetWatch
from ops.control.launcher import DRIVER_MODULE_ENV
from ops.control.supervisor import Supervisor, stop_all_jobs
from ops.ledger.store import Ledger
from ops.spec.platform import CONF_DIR_ENV, DEFAULT_CONF_DIR, PlatformConfig, load_platform
from ops.states import Lifecycle
from tests.support.drivers import wait_for
from tests.support.platform import write_conf
from tests.support.ports import free_test_port

AUTOSTARTED = ("alpha", "beta")
NEW = "gamma"
PASS_EVERY_SECONDS = 60.0
# A stand-in starts in well under a second; a busy machine gets the rest.
TIMEOUT = 60.0


class Clock:
    """The watch's monotonic clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def stand_in_spec(name: str) -> dict[str, object]:
    """The router's spec under `name`: relaunched at once, no savepoints (no S3 here)."""
    spec = yaml.safe_load((DEFAULT_CONF_DIR / "jobs" / "router.yaml").read_text())
    spec["name"] = name
    operations = spec["operations"]
    operations["metrics_port"] = free_test_port()
    operations["restart"] = {**operations["restart"], "initial_backoff_seconds": 0}
    operations["savepoints"] = {**operations["savepoints"], "interval_minutes": None}
    operations.pop("preview", None)
    return spec


@pytest.fixture
def fleet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[PlatformConfig]:
    """Three stand-in jobs, two of them autostarted; every driver stopped at the end."""
    conf_dir = tmp_path / "conf"
    names = (*AUTOSTARTED, NEW)
    write_conf(conf_dir, tmp_path / "runtime", jobs={name: stand_in_spec(name) for name in names})
    settings = yaml.safe_load((conf_dir / "platform.yaml").read_text())
    settings["autostart_jobs"] = list(AUTOSTARTED)
    (conf_dir / "platform.yaml").write_text(yaml.safe_dump(settings))
    monkeypatch.setenv(CONF_DIR_ENV, str(conf_dir))
    monkeypatch.setenv(DRIVER_MODULE_ENV, "tests.support.stub_driver")
    platform = load_platform(conf_dir)
    yield platform
    stop_all_jobs(platform)


def sweep_and_pass(supervisor: Supervisor, watch: FleetWatch) -> dict[str, str | None]:
    """One sweep, and a pass for every job it names, as the fleet DAG's task runs them."""
    due = watch.sweep()
    for job in due:
        supervisor.reconcile(job.job)
        watch.passed(job.job)
    return {job.job: job.reason for job in due}


def running(ledger: Ledger, jobs: tuple[str, ...]) -> bool:
    records = {record.name: record.state for record in ledger.jobs()}
    return all(records.get(job) == Lifecycle.RUNNING.name for job in jobs)


def passed_until(supervisor: Supervisor, watch: FleetWatch, jobs: tuple[str, ...]) -> bool:
    """A sweep with its passes, then whether `jobs` all run."""
    sweep_and_pass(supervisor, watch)
    return running(supervisor.ledger, jobs)


def test_the_fleet_watch_passes_only_the_jobs_that_need_one(fleet: PlatformConfig) -> None:
    supervisor = Supervisor.for_platform(fleet)
    ledger = supervisor.ledger
    clock = Clock()
    watch = FleetWatch(supervisor, PASS_EVERY_SECONDS, clock=clock)

    # The first sweep: the autostarted jobs, not the new one nobody started.
    assert set(sweep_and_pass(supervisor, watch)) == set(AUTOSTARTED)
    wait_for(lambda: passed_until(supervisor, watch, AUTOSTARTED), TIMEOUT, "both autostarted jobs to run")
    # Steady: a sweep names nobody, until the periodic passes are due.
    assert watch.sweep() == []
    clock.now += PASS_EVERY_SECONDS
    # Spread over the sweeps: three jobs, a sweep a second, a pass a minute each make one a sweep.
    first, second = sweep_and_pass(supervisor, watch), sweep_and_pass(supervisor, watch)
    assert len(first) == len(second) == 1 and {**first, **second} == dict.fromkeys(AUTOSTARTED)
    assert watch.sweep() == []

    # A driver killed with SIGKILL: named with the reason at the next sweep, and relaunched.
    killed = ledger.current_run("alpha")
    assert killed is not None and killed.pid is not None
    os.kill(killed.pid, signal.SIGKILL)
    # This process launched it: reaped here, it is surely gone before the sweep.
    os.waitpid(killed.pid, 0)
    seen = {job.job: job.reason for job in watch.sweep()}
    assert set(seen) == {"alpha"} and seen["alpha"] is not None, seen

    def relaunched() -> bool:
        sweep_and_pass(supervisor, watch)
        run = ledger.current_run("alpha")
        return run is not None and run.run_id != killed.run_id and running(ledger, ("alpha",))

    wait_for(relaunched, TIMEOUT, "alpha's relaunch")
    assert watch.sweep() == []

    # A request is seen at the next sweep, though the job is otherwise steady.
    before = ledger.current_run("beta")
    assert before is not None
    supervisor.request("beta", "restart", "fleet test")
    assert "beta" in {job.job for job in watch.sweep()}

    def restarted() -> bool:
        sweep_and_pass(supervisor, watch)
        run = ledger.current_run("beta")
        return run is not None and run.run_id != before.run_id and running(ledger, ("beta",))

    wait_for(restarted, TIMEOUT, "beta's restart")

    # The new job joins the fleet once someone starts it.
    supervisor.request(NEW, "resume", "fleet test")
    wait_for(lambda: passed_until(supervisor, watch, (NEW,)), TIMEOUT, "the new job to run once resumed")
