"""Starting and stopping streaming drivers.

A launch submits a driver and returns at once; the driver outlives whoever launched it (an Airflow
task, the CLI). `LaunchBackend` is the interface the supervisor uses; `LocalProcessBackend` runs
each driver as a detached `python -m jobs.runner` process in Spark local mode. A backend for a
Spark standalone cluster or YARN implements the same methods.

Each driver runs at the scale of the spec it is given (`JobSpec.with_scale`): its cores and
batch-size limit are passed on its command line, since the job file it loads has the written ones.

A backend also starts a job's warm standby (`launch_standby`): the same driver with `--standby`,
which brings its JVM and SparkSession up and waits for a take-over grant (`ops.driver.takeover`).
Before the supervisor grants one, `confirm_gone` must say the active driver is gone: its pid with
its start ticks, and every process of its group (its JVM), which can outlive it for a moment.

Besides a job's own driver, a backend starts the driver of an upgrade's dry run: the candidate
spec against a scratch platform (its own conf dir, storage and runtime), replaying the batches
queued there and exiting (`--replay-only`). It is started, watched and killed like any driver.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import psutil

from ops.exceptions import LaunchError
from ops.ledger.records import RunRecord
from ops.spec.job import JobSpec
from ops.spec.paths import JobPaths
from ops.spec.platform import CONF_DIR_ENV, PlatformConfig, load_platform

# A zombie has exited and only waits for its parent to reap it: it counts as gone.
_GONE = frozenset({psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD})
_CLOCK_TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class LaunchedDriver:
    """What a backend knows of a driver right after launching it."""

    pid: int
    app_id: str
    log_path: Path


class LaunchBackend(Protocol):
    name: str

    def launch(self, spec: JobSpec, run_id: str) -> LaunchedDriver:
        """Start the driver of `spec` for run `run_id` and return without waiting for it."""
        ...

    def launch_standby(self, spec: JobSpec, run_id: str) -> LaunchedDriver:
        """Start a warm standby of `spec` for run `run_id`: Spark up, query planned, waiting for
        its take-over grant; return without waiting for it."""
        ...

    def launch_replay_only(self, spec: JobSpec, run_id: str, conf_dir: Path) -> LaunchedDriver:
        """Start a driver of `spec` under the (scratch) platform in `conf_dir` that replays the
        batches queued there and exits; return without waiting for it."""
        ...

    def confirm_gone(self, run: RunRecord, timeout: float) -> bool:
        """Whether the run's driver and everything it started are gone, waiting up to `timeout`
        seconds for them to exit (it never kills). The fence before a take-over grant."""
        ...

    def started_by(self, run: RunRecord, pid: int) -> bool:
        """Whether process `pid` is the run's driver or one it started (its JVM)."""
        ...

    def is_alive(self, run: RunRecord) -> bool:
        """Whether the run's driver process still exists (read-only)."""
        ...

    def stop(self, run: RunRecord, timeout: float) -> str:
        """Ask the driver to finish its batch and exit; kill it after `timeout`. Returns how it ended."""
        ...

    def kill(self, run: RunRecord) -> None:
        """Kill the driver and everything it started, at once."""
        ...


def _process_start_ticks(pid: int) -> str | None:
    """When `pid` started, in clock ticks since boot, or None if no such live process.

    Zombies count as gone. The ticks (not psutil's epoch seconds) are what app ids and pid files
    record: the kernel's boot time, which `create_time()` adds, moves when the wall clock is
    stepped, and a live driver must keep its identity. Earlier versions recorded the same ticks.
    """
    try:
        # Boot time read on both sides of create_time(): a clock step in between is retried
        # rather than recorded as a different start.
        while True:
            booted_at = psutil.boot_time()
            process = psutil.Process(pid)
            if process.status() in _GONE:
                return None
            started_at = process.create_time()
            if psutil.boot_time() == booted_at:
                return str(round((started_at - booted_at) * _CLOCK_TICKS_PER_SECOND))
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


# How a driver's command line names its job; `driver_job` reads it back.
DRIVER_JOB_FLAG = "--job"
# A module run in place of `jobs.runner` by every driver this machine's backends start, whoever
# starts them (an Airflow task, the CLI): the control plane's benchmark (benchmarks/fleet.py) names
# a Spark-free stand-in here, so hundreds of jobs cost the control plane what they would and the
# drivers almost nothing. Unset in every real use.
DRIVER_MODULE_ENV = "STREAMWARDEN_DRIVER_MODULE"


def driver_job(command: Sequence[str]) -> str | None:
    """The job a process's command line names the way a driver's does, or None: how `warden
    validate` tells a job's own driver from a stranger holding its metrics port."""
    arguments = list(command)
    if DRIVER_JOB_FLAG not in arguments[:-1]:
        return None
    return arguments[arguments.index(DRIVER_JOB_FLAG) + 1]


def scale_args(spec: JobSpec) -> list[str]:
    """The driver arguments of the scale `spec` is at (`ops.control.scaling`): the driver loads the
    job file, which says nothing of the scale the ledger gave the job."""
    resources, trigger = spec.operations.resources, spec.operations.trigger
    args = [] if resources.cores is None else ["--cores", str(resources.cores)]
    if trigger.max_files_per_trigger is not None:
        args += ["--max-files-per-trigger", str(trigger.max_files_per_trigger)]
    return args


def _reap(pid: int) -> None:
    # A driver launched from this process (dag.test(), the CLI, tests) is our child: reap it so it
    # does not linger as a zombie. A driver launched by another process is not ours to wait for.
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


class LocalProcessBackend:
    """Drivers as detached local processes (`local[N]` Spark), one process group each."""

    name = "local"
    # What each driver process runs (`python -m`) unless `DRIVER_MODULE_ENV` names another; tests
    # put a Spark-free stand-in here.
    driver_module = "jobs.runner"

    def __init__(self, platform: PlatformConfig) -> None:
        self.platform = platform

    def launch(self, spec: JobSpec, run_id: str) -> LaunchedDriver:
        return self._spawn(self.platform, spec, run_id, [])

    def launch_standby(self, spec: JobSpec, run_id: str) -> LaunchedDriver:
        return self._spawn(self.platform, spec, run_id, ["--standby"])

    def launch_replay_only(self, spec: JobSpec, run_id: str, conf_dir: Path) -> LaunchedDriver:
        return self._spawn(load_platform(conf_dir), spec, run_id, ["--replay-only"])

    def _spawn(
        self, platform: PlatformConfig, spec: JobSpec, run_id: str, extra_args: list[str]
    ) -> LaunchedDriver:
        runtime_dir = JobPaths.of(platform, spec).runtime
        runtime_dir.mkdir(parents=True, exist_ok=True)
        log_path = runtime_dir / f"driver-{run_id}.log"
        env = {
            **os.environ,
            CONF_DIR_ENV: str(platform.conf_dir),
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
        }
        # The driver refuses to start if its job file no longer has this version, so the version
        # recorded for the run is always the one the driver loaded.
        argv = [
            sys.executable,
            "-m",
            os.environ.get(DRIVER_MODULE_ENV, self.driver_module),
            DRIVER_JOB_FLAG,
            spec.name,
            "--run-id",
            run_id,
            "--config-version",
            spec.config_version,
            *scale_args(spec),
            *extra_args,
        ]
        log_path.touch()
        try:
            # posix_spawn, not Popen: the driver is detached on purpose and nobody here waits on
            # it, so there is no handle to keep. setsid gives it a session of its own: it
            # survives the task that launched it, and its JVM and Python workers form one group.
            pid = os.posix_spawn(
                sys.executable,
                argv,
                env,
                file_actions=[
                    (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                    (os.POSIX_SPAWN_OPEN, 1, str(log_path), os.O_WRONLY | os.O_APPEND, 0),
                    (os.POSIX_SPAWN_DUP2, 1, 2),
                ],
                setsid=True,
            )
        except OSError as exc:
            raise LaunchError(f"cannot start driver for job {spec.name!r}: {exc}") from exc
        return LaunchedDriver(pid=pid, app_id=f"local-{pid}-{_process_start_ticks(pid)}", log_path=log_path)

    def is_alive(self, run: RunRecord) -> bool:
        if run.pid is None:
            return False
        _reap(run.pid)
        # Compare start times so a recycled pid is never mistaken for our driver. A driver that was
        # gone before its start could be read has the app id `local-<pid>-None`: still gone.
        started = _process_start_ticks(run.pid)
        return started is not None and run.app_id == f"local-{run.pid}-{started}"

    def confirm_gone(self, run: RunRecord, timeout: float) -> bool:
        if run.pid is None:
            return True
        deadline = time.monotonic() + timeout
        while self.is_alive(run) or _group_exists(run.pid):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True

    def started_by(self, run: RunRecord, pid: int) -> bool:
        if run.pid is None or not self.is_alive(run):
            return False
        try:
            return os.getpgid(pid) == run.pid
        except ProcessLookupError:
            return False

    def stop(self, run: RunRecord, timeout: float) -> str:
        if not self.is_alive(run):
            self._kill_group(run)
            return "already exited"
        assert run.pid is not None
        # SIGTERM goes to the Python driver only: it lets the running batch commit and stops the
        # query; its JVM exits with it. Signalling the group would kill the JVM mid-batch.
        os.kill(run.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.is_alive(run):
                self._kill_group(run)
                return "stopped gracefully"
            time.sleep(0.2)
        self.kill(run)
        return f"killed after {timeout:g}s stop timeout"

    def kill(self, run: RunRecord) -> None:
        if run.pid is not None and self.is_alive(run):
            os.kill(run.pid, signal.SIGKILL)
            _wait_gone(run.pid)
        self._kill_group(run)

    @staticmethod
    def _kill_group(run: RunRecord) -> None:
        # Leftovers of a dead driver (its JVM, Python workers) share its process group id.
        if run.pid is None:
            return
        try:
            os.killpg(run.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            return
        _reap(run.pid)


def _group_exists(pgid: int) -> bool:
    """Whether a live process is left in process group `pgid` (a driver's group is its pid).

    Zombies do not count: they have exited, and whoever inherited them may never reap them.
    """
    _reap(pgid)
    for process in psutil.process_iter(["status"]):
        try:
            if os.getpgid(process.pid) == pgid and process.info["status"] not in _GONE:
                return True
        except (ProcessLookupError, PermissionError):
            continue
    return False


def _wait_gone(pid: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _reap(pid)
        if _process_start_ticks(pid) is None:
            return
        time.sleep(0.05)
    raise LaunchError(f"process {pid} did not exit after SIGKILL")
