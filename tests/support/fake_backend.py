"""A stateful fake launch backend: drivers that are rows in a table, not processes.

`FakeBackend` implements `ops.launcher.LaunchBackend`, so the real `Supervisor` runs its whole loop
against it with the real ledger and alert outbox, in milliseconds and without Spark. A fake driver
does only what the test tells it to, and tells the supervisor about it the way a real one does:

- its heartbeat file (`ops.telemetry`, same path and format as the driver's listener writes):
  `commit(job)` commits the next batch, `idle(job)` reports an idle trigger;
- its liveness (`is_alive`): `crash(job)` makes the driver vanish (kill -9, OOM), optionally after
  a "terminated" heartbeat with the query's error (e.g. a ConfigError at start).

Failure knobs arm the next launches: `crash_next()` (the driver dies right after launch),
`hang_next()` (it stays alive but never heartbeats) and `fail_launch_next()` (`launch` raises
`LaunchError`). The counters `launches`, `stops` and `kills` count the supervisor's calls,
including those that found the driver already gone. Heartbeat times come from the test's clock.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import pytest

from ops.control.launcher import LaunchedDriver
from ops.driver.takeover import StandbyStatus, read_grant, write_standby_status
from ops.driver.telemetry import (
    RECENT_BATCHES,
    BatchSample,
    Heartbeat,
    HeartbeatEvent,
    write_heartbeat,
)
from ops.exceptions import LaunchError
from ops.ledger.records import RunRecord
from ops.spec.job import JobSpec
from ops.spec.paths import JobPaths
from ops.spec.platform import PlatformConfig, load_platform
from tests.support.clock import FakeClock
from tests.support.platform import job_paths

# Far above any pid the kernel hands out here, so a fake pid never names a real process.
FIRST_FAKE_PID = 4_000_001
# What each committed fake batch reports: well inside any trigger interval, input and processing
# rates equal, so a committing fake driver is healthy rather than falling behind.
BATCH_ROWS = 10
BATCH_DURATION_MS = 100


@dataclass
class FakeDriver:
    """One launched fake driver: the row the backend keeps for it."""

    job: str
    run_id: str
    pid: int
    launched_at: datetime
    alive: bool = True
    hangs: bool = False
    # How it ended: "crashed", "stopped gracefully", "killed", ...; None while it runs.
    ended: str | None = None
    last_batch_id: int | None = None
    recent: tuple[BatchSample, ...] = field(default_factory=tuple)
    # The scale it was launched at (`JobSpec.with_scale`), as a real driver gets it on its command line.
    cores: int | None = None
    max_files_per_trigger: int | None = None


class FakeBackend:
    """A `LaunchBackend` whose drivers are `FakeDriver` rows, with failure knobs and call counters."""

    name = "fake"

    def __init__(self, platform: PlatformConfig, clock: Callable[[], datetime]) -> None:
        self.platform = platform
        self.clock = clock
        self.drivers: dict[str, FakeDriver] = {}
        self.launches = 0
        self.stops = 0
        self.kills = 0
        self._pids = itertools.count(FIRST_FAKE_PID)
        self._crashes_armed = 0
        self._hangs_armed = 0
        self._launch_failures_armed = 0
        # Per job, the newest batch any of its drivers committed: a relaunched driver goes on from
        # the checkpoint, so its batch ids continue where the last run's stopped.
        self._committed: dict[str, int] = {}
        # Run ids launched as warm standbys: not the job's driver until a grant names them.
        self.standby_ids: set[str] = set()

    # failure knobs ------------------------------------------------------------------------------

    def crash_next(self, count: int = 1) -> None:
        """The next `count` launched drivers die right after launch, before any heartbeat."""
        self._crashes_armed += count

    def hang_next(self, count: int = 1) -> None:
        """The next `count` launched drivers stay alive but never write a heartbeat."""
        self._hangs_armed += count

    def fail_launch_next(self, count: int = 1) -> None:
        """The next `count` launches raise `LaunchError` (no driver is started)."""
        self._launch_failures_armed += count

    # LaunchBackend ------------------------------------------------------------------------------

    def launch(self, spec: JobSpec, run_id: str) -> LaunchedDriver:
        return self._launch(self.platform, spec, run_id)

    def launch_standby(self, spec: JobSpec, run_id: str) -> LaunchedDriver:
        """A warm standby: a row like any driver (the knobs apply) that the test's `commit`,
        `crash` and `hang` leave alone until the supervisor's grant names it, as a real standby
        waits for its grant. One armed to hang never gets ready (no free cores for its executors)."""
        self.standby_ids.add(run_id)
        launched = self._launch(self.platform, spec, run_id)
        if self.drivers[run_id].alive and not self.drivers[run_id].hangs:
            # Warmed up at once: a real standby says so in its status file when it is.
            write_standby_status(
                JobPaths.of(self.platform, spec).runtime,
                StandbyStatus(run_id, "ready", self.clock().timestamp(), ""),
            )
        return launched

    def confirm_gone(self, run: RunRecord, timeout: float) -> bool:
        return not self.is_alive(run)

    def started_by(self, run: RunRecord, pid: int) -> bool:
        return self.is_alive(run) and pid == run.pid

    def launch_replay_only(self, spec: JobSpec, run_id: str, conf_dir: Path) -> LaunchedDriver:
        """An upgrade's dry-run driver under the scratch platform in `conf_dir`: a row like any
        driver (the knobs apply, `crash` ends it); its verdict is the scratch checkpoint's commit."""
        return self._launch(load_platform(conf_dir), spec, run_id)

    def _launch(self, platform: PlatformConfig, spec: JobSpec, run_id: str) -> LaunchedDriver:
        self.launches += 1
        if self._launch_failures_armed:
            self._launch_failures_armed -= 1
            raise LaunchError(
                f"cannot start driver for job {spec.name!r}: [Errno 28] No space left on device"
            )
        runtime_dir = JobPaths.of(platform, spec).runtime
        runtime_dir.mkdir(parents=True, exist_ok=True)
        log_path = runtime_dir / f"driver-{run_id}.log"
        log_path.write_text(f"fake driver of {spec.name} for run {run_id}\n")
        driver = FakeDriver(
            job=spec.name,
            run_id=run_id,
            pid=next(self._pids),
            launched_at=self.clock(),
            cores=spec.operations.resources.cores,
            max_files_per_trigger=spec.operations.trigger.max_files_per_trigger,
        )
        if self._crashes_armed:
            self._crashes_armed -= 1
            driver.alive, driver.ended = False, "crashed right after launch"
        elif self._hangs_armed:
            self._hangs_armed -= 1
            driver.hangs = True
        self.drivers[run_id] = driver
        return LaunchedDriver(pid=driver.pid, app_id=f"fake-{driver.pid}", log_path=log_path)

    def is_alive(self, run: RunRecord) -> bool:
        driver = self.drivers.get(run.run_id)
        return driver is not None and driver.alive

    def stop(self, run: RunRecord, timeout: float) -> str:
        self.stops += 1
        driver = self.drivers.get(run.run_id)
        if driver is None or not driver.alive:
            return "already exited"
        driver.alive = False
        if driver.hangs:
            # A hung query never finishes its batch, so SIGTERM does not end it: the real backend
            # kills it once the timeout has run out.
            driver.ended = f"killed after {timeout:g}s stop timeout"
            return driver.ended
        # A driver stopped on purpose lets its batch commit and reports the query's end.
        self._beat(driver, "terminated")
        driver.ended = "stopped gracefully"
        return driver.ended

    def kill(self, run: RunRecord) -> None:
        self.kills += 1
        driver = self.drivers.get(run.run_id)
        if driver is not None and driver.alive:
            driver.alive, driver.ended = False, "killed"

    # what a test makes a running driver do --------------------------------------------------------

    def driver(self, job: str) -> FakeDriver:
        """The job's newest fake driver, alive or not (a standby once it is granted)."""
        grant = read_grant(job_paths(self.platform, job).runtime)
        granted = grant.standby_run_id if grant else None
        drivers = [
            driver
            for driver in self.drivers.values()
            if driver.job == job and (driver.run_id not in self.standby_ids or driver.run_id == granted)
        ]
        assert drivers, f"no fake driver of {job!r} was launched"
        return drivers[-1]

    def commit(
        self,
        job: str,
        batches: int = 1,
        *,
        rows: int = BATCH_ROWS,
        duration_ms: int = BATCH_DURATION_MS,
        input_rate: float | None = None,
        backlog_files: int | None = None,
    ) -> int:
        """The job's running driver commits `batches` batches, one heartbeat each; the last batch id.
        Each reads `rows` (arriving at `input_rate` rows/s; default `rows`) in `duration_ms` and
        leaves `backlog_files` unread: the load the autoscaler sizes the job for."""
        driver = self._running(job)
        for _ in range(batches):
            batch_id = self._committed.get(job, -1) + 1
            self._committed[job] = driver.last_batch_id = batch_id
            sample = BatchSample(
                batch_id=batch_id,
                num_input_rows=rows,
                input_rows_per_second=float(rows) if input_rate is None else input_rate,
                processed_rows_per_second=rows * 1000 / duration_ms,
                duration_ms=duration_ms,
                backlog_files=backlog_files,
            )
            driver.recent = (*driver.recent, sample)[-RECENT_BATCHES:]
            self._beat(driver, "progress")
        assert driver.last_batch_id is not None
        return driver.last_batch_id

    def idle(self, job: str) -> None:
        """The job's running driver reports a trigger that found no new input."""
        self._beat(self._running(job), "idle")

    def hang(self, job: str) -> None:
        """The job's running driver stops heartbeating from now on (it stays alive)."""
        self._running(job).hangs = True

    def crash(self, job: str, error_class: str | None = None, error_message: str = "") -> None:
        """The job's running driver dies now; with `error_class`, its query first reports that it
        terminated with that error (as the listener does before the driver exits)."""
        driver = self.driver(job)
        assert driver.alive, f"the newest driver of {job!r} is already gone ({driver.ended})"
        if error_class is not None:
            self._beat(driver, "terminated", error_class=error_class, error_message=error_message)
        driver.alive, driver.ended = False, "crashed"

    def _running(self, job: str) -> FakeDriver:
        driver = self.driver(job)
        assert driver.alive, f"the newest driver of {job!r} is gone ({driver.ended})"
        assert not driver.hangs, f"the newest driver of {job!r} hangs: it writes no heartbeat"
        return driver

    def _beat(self, driver: FakeDriver, event: HeartbeatEvent, **errors: str) -> None:
        heartbeat = Heartbeat(
            job=driver.job,
            run_id=driver.run_id,
            pid=driver.pid,
            event=event,
            at=self.clock().timestamp(),
            batch_id=driver.last_batch_id,
            recent=driver.recent,
            **errors,
        )
        write_heartbeat(self.heartbeat_file(driver.job), heartbeat)

    def heartbeat_file(self, job: str) -> Path:
        """Where the job's drivers write their heartbeat (the supervisor reads it there)."""
        return job_paths(self.platform, job).heartbeat


@pytest.fixture
def fake_backend(platform_conf: PlatformConfig, fake_clock: FakeClock) -> FakeBackend:
    """A fake launch backend for the throwaway platform, its heartbeats on `fake_clock`."""
    return FakeBackend(platform_conf, fake_clock)
