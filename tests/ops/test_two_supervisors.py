"""Supervisors in separate processes on one PostgreSQL ledger, with real driver processes (Spark-free
stand-ins, `tests.support.stub_driver`) killed under them, and the database stopped under them.

What was launched is read from three places that must agree: the launches log each stub driver
appends to as it starts, the ledger's runs, and the process table.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from ops.alerts import AlertCenter
from ops.clock import utcnow
from ops.control.launcher import LaunchedDriver, _process_start_ticks
from ops.control.supervisor import Supervisor
from ops.embedded.services import EmbeddedPostgres
from ops.exceptions import LedgerError
from ops.ledger.records import RunRecord
from ops.ledger.store import Ledger
from ops.spec.job import JobSpec
from ops.spec.platform import CONF_DIR_ENV, DEFAULT_CONF_DIR, LEDGER_URL_ENV, PlatformConfig, load_platform
from tests.support.platform import write_conf
from tests.support.ports import free_test_port
from tests.support.stub_driver import StubDriverBackend, launched

JOB = "router"
REPO_ROOT = Path(__file__).resolve().parents[2]
KILL_SECONDS = 30.0
# A relaunch takes a pass to see the death, one to launch and a Python start of the stub driver.
RELAUNCH_TIMEOUT = 30.0


def job_spec() -> dict[str, object]:
    """The router's spec, made to restart at once and for ever, with no savepoints (no S3 here)."""
    spec = yaml.safe_load((DEFAULT_CONF_DIR / "jobs" / f"{JOB}.yaml").read_text())
    operations = spec["operations"]
    operations["metrics_port"] = free_test_port()
    operations["restart"] = {**operations["restart"], "initial_backoff_seconds": 0, "budget": 100_000}
    operations["savepoints"] = {**operations["savepoints"], "interval_minutes": None}
    return spec


@pytest.fixture
def shared_platform(
    tmp_path: Path, postgres_database: str, monkeypatch: pytest.MonkeyPatch
) -> PlatformConfig:
    """A platform whose ledger is a fresh PostgreSQL database, named with a password (which the
    test server, trusting loopback, never asks for) so the tests can check it is never shown."""
    url = postgres_database.replace("://streamwarden@", "://streamwarden:pg-secret@")
    conf_dir = tmp_path / "conf"
    write_conf(conf_dir, tmp_path / "runtime", jobs={JOB: job_spec()}, ledger_url=url)
    monkeypatch.setenv(CONF_DIR_ENV, str(conf_dir))
    monkeypatch.delenv(LEDGER_URL_ENV, raising=False)
    platform = load_platform(conf_dir)
    Ledger.open(platform.resolved_ledger_url)
    return platform


@pytest.fixture
def start_supervisor(shared_platform: PlatformConfig, tmp_path: Path) -> Iterator[Callable[[float], Path]]:
    """Starts `tests.support.supervisor_process` for the job; returns the file its output goes to.
    Supervisors still running at the end are stopped, and so is every stub driver they started."""
    processes: list[subprocess.Popen[bytes]] = []

    def start(seconds: float) -> Path:
        output = tmp_path / f"supervisor-{len(processes)}.out"
        with output.open("wb") as sink:
            processes.append(
                subprocess.Popen(
                    [sys.executable, "-m", "tests.support.supervisor_process", JOB, str(seconds)],
                    env={**os.environ, CONF_DIR_ENV: str(shared_platform.conf_dir)},
                    cwd=REPO_ROOT,
                    stdout=sink,
                    stderr=subprocess.STDOUT,
                )
            )
        return output

    yield start
    for process in processes:
        process.kill()
        process.wait()
    for _, pid in launched(shared_platform, JOB):
        if _process_start_ticks(pid) is not None:
            os.killpg(pid, signal.SIGKILL)


def live_drivers(platform: PlatformConfig) -> list[int]:
    """Pids of the job's stub drivers that are alive now, by the process table."""
    return [pid for _, pid in launched(platform, JOB) if _process_start_ticks(pid) is not None]


def wait_for_recorded_driver(
    platform: PlatformConfig, ledger: Ledger, timeout: float = RELAUNCH_TIMEOUT
) -> int:
    """The pid of the job's one live driver once the ledger's open run names it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = ledger.current_run(JOB)
        alive = live_drivers(platform)
        if run is not None and alive == [run.pid]:
            return alive[0]
        time.sleep(0.05)
    raise AssertionError(f"no single recorded live driver after {timeout:g}s: ledger {run}, alive {alive}")


def wait_gone(pid: int) -> None:
    deadline = time.monotonic() + 10
    while _process_start_ticks(pid) is not None:
        assert time.monotonic() < deadline, f"driver {pid} outlived SIGKILL"
        time.sleep(0.02)


class DriverCounter(threading.Thread):
    """Samples the process table until stopped: the most stub drivers of the job alive at once."""

    def __init__(self, platform: PlatformConfig) -> None:
        super().__init__(daemon=True)
        self.platform = platform
        self.most = 0
        self.finished = threading.Event()

    def run(self) -> None:
        while not self.finished.wait(0.05):
            self.most = max(self.most, len(live_drivers(self.platform)))


@pytest.mark.slow
def test_two_supervisors_relaunch_each_killed_driver_exactly_once(
    shared_platform: PlatformConfig, start_supervisor: Callable[[float], Path]
) -> None:
    ledger = Ledger.open(shared_platform.resolved_ledger_url)
    outputs = [start_supervisor(KILL_SECONDS + 20) for _ in range(2)]
    counter = DriverCounter(shared_platform)
    counter.start()
    deaths = 0
    deadline = time.monotonic() + KILL_SECONDS
    try:
        while time.monotonic() < deadline:
            pid = wait_for_recorded_driver(shared_platform, ledger)
            os.kill(pid, signal.SIGKILL)
            wait_gone(pid)
            deaths += 1
        final_pid = wait_for_recorded_driver(shared_platform, ledger)
        time.sleep(3)  # passes after the relaunch: none may launch another
    finally:
        counter.finished.set()
        counter.join()

    starts = launched(shared_platform, JOB)
    runs = ledger.runs(JOB, limit=10_000)
    texts = [output.read_text() for output in outputs]
    assert deaths >= 5, f"only {deaths} deaths in {KILL_SECONDS:g}s"
    assert len(starts) == deaths + 1, f"{deaths} deaths, {len(starts)} launches: {starts}"
    assert counter.most == 1, f"{counter.most} drivers of {JOB} were alive at once"
    assert sorted((run.run_id, run.pid) for run in runs) == sorted(starts), "ledger and launches disagree"
    assert [run.run_id for run in runs if run.stopped_at is None] == [starts[-1][0]]
    assert starts[-1][1] == final_pid and live_drivers(shared_platform) == [final_pid]
    assert all(run.exit_reason and "gone" in run.exit_reason for run in runs if run.stopped_at), {
        run.exit_reason for run in runs
    }
    # Both supervisors took part: each launched some of the drivers, and together all of them.
    launches = [
        [line for line in text.splitlines() if line.startswith("pass:") and "launch: run " in line]
        for text in texts
    ]
    assert all(launches), [text[-2000:] for text in texts]
    assert sum(len(lines) for lines in launches) == len(starts)


def supervisor_errors(output: Path) -> list[str]:
    return [line for line in output.read_text().splitlines() if line.startswith("error: ")]


def wait_for(condition: Callable[[], bool], what: str, timeout: float = RELAUNCH_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_postgresql_stopped_under_a_running_supervisor(
    shared_platform: PlatformConfig,
    start_supervisor: Callable[[float], Path],
    postgres_server: EmbeddedPostgres,
) -> None:
    ledger = Ledger.open(shared_platform.resolved_ledger_url)
    output = start_supervisor(120)
    first = wait_for_recorded_driver(shared_platform, ledger)

    # Down while the driver runs: every pass fails, saying where; the driver keeps running.
    postgres_server.stop()
    try:
        wait_for(lambda: len(supervisor_errors(output)) >= 3, "failed passes")
        assert _process_start_ticks(first) is not None
    finally:
        postgres_server.start()
    errors = supervisor_errors(output)
    where = f"ledger at postgresql+psycopg://streamwarden:***@127.0.0.1:{postgres_server.port}/"
    assert all(where in error for error in errors), errors
    assert "Connection refused" in errors[-1] or "connection" in errors[-1].lower(), errors[-1]
    assert "pg-secret" not in output.read_text()

    # Back: passes work again (each records the job's state) and find the same driver, so
    # nothing is launched.
    back_at = utcnow()
    wait_for(lambda: ledger.job(JOB).updated_at > back_at, "a pass after the restart")  # type: ignore[union-attr]
    failed_so_far = len(supervisor_errors(output))
    assert launched(shared_platform, JOB) == [(ledger.current_run(JOB).run_id, first)]  # type: ignore[union-attr]

    # Down, and the driver dies meanwhile: nothing can be launched until the ledger is back,
    # and then exactly one driver is.
    postgres_server.stop()
    try:
        wait_for(lambda: len(supervisor_errors(output)) > failed_so_far, "a failed pass")
        os.kill(first, signal.SIGKILL)
        wait_gone(first)
        time.sleep(2)
        assert len(launched(shared_platform, JOB)) == 1, "launched while the ledger was down"
    finally:
        postgres_server.start()
    second = wait_for_recorded_driver(shared_platform, ledger)
    time.sleep(3)
    starts = launched(shared_platform, JOB)
    assert [pid for _, pid in starts] == [first, second]
    runs = ledger.runs(JOB)
    assert [(run.run_id, run.stopped_at is None) for run in runs] == [
        (starts[1][0], True),
        (starts[0][0], False),
    ]


class RecordingBackend(StubDriverBackend):
    """The stub backend, keeping the pid of every driver it launches."""

    def __init__(self, platform: PlatformConfig) -> None:
        super().__init__(platform)
        self.pids: list[int] = []

    def launch(self, spec: JobSpec, run_id: str) -> LaunchedDriver:
        driver = super().launch(spec, run_id)
        self.pids.append(driver.pid)
        return driver


class LedgerLostAtLaunch(Ledger):
    """A ledger whose server goes away between the launch decision and the run's row (a failure
    knob on the real ledger: every other call reaches the database)."""

    def start_run(self, run: RunRecord) -> None:
        raise LedgerError("ledger at postgresql+psycopg://...: server closed the connection unexpectedly")


@pytest.fixture
def backend(shared_platform: PlatformConfig) -> Iterator[RecordingBackend]:
    """A recording stub backend; whatever it launched is killed after the test."""
    backend = RecordingBackend(shared_platform)
    yield backend
    for pid in backend.pids:
        if _process_start_ticks(pid) is not None:
            os.killpg(pid, signal.SIGKILL)


def test_a_launch_the_ledger_cannot_record_leaves_no_driver_behind(
    shared_platform: PlatformConfig, backend: RecordingBackend
) -> None:
    ledger = Ledger.open(shared_platform.resolved_ledger_url)
    lost = LedgerLostAtLaunch(ledger.engine)
    summary = Supervisor(shared_platform, lost, backend, AlertCenter(lost, shared_platform.slack)).reconcile(
        JOB
    )
    assert any(action.startswith("launch: error: ledger at") for action in summary.actions), summary
    [unrecorded] = backend.pids
    assert _process_start_ticks(unrecorded) is None, "the unrecorded driver still runs"
    assert ledger.current_run(JOB) is None

    # The ledger back, the next pass launches the one driver.
    supervisor = Supervisor(shared_platform, ledger, backend, AlertCenter(ledger, shared_platform.slack))
    supervisor.reconcile(JOB)
    recorded = ledger.current_run(JOB)
    assert recorded is not None and backend.pids == [unrecorded, recorded.pid]
