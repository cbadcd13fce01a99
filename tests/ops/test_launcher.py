"""The local backend knows its driver by pid and start time, so a recycled pid is never taken for it."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ops.control.launcher import LocalProcessBackend, _process_start_ticks
from ops.ledger.records import RunRecord
from ops.spec.platform import PlatformConfig


def run_of(pid: int, app_id: str) -> RunRecord:
    return RunRecord(
        run_id="router-1",
        job="router",
        backend="local",
        pid=pid,
        app_id=app_id,
        metrics_port=None,
        log_path=None,
        config_version="test",
        started_at=datetime.now(UTC),
        stopped_at=None,
        exit_reason=None,
    )


def proc_start_ticks(pid: int) -> str:
    """Field 22 of /proc/<pid>/stat, what earlier versions recorded in app ids and pid files."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2 :].split()[19]


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    yield process
    process.kill()
    process.wait()


def test_a_driver_is_alive_under_its_own_start_time_only(
    platform_conf: PlatformConfig, sleeper: subprocess.Popen[bytes]
) -> None:
    backend = LocalProcessBackend(platform_conf)
    # The start is recorded in clock ticks since boot, as before: app ids in existing ledger rows
    # and pid files of running services keep identifying their processes.
    assert _process_start_ticks(sleeper.pid) == proc_start_ticks(sleeper.pid)
    assert backend.is_alive(run_of(sleeper.pid, f"local-{sleeper.pid}-{proc_start_ticks(sleeper.pid)}"))

    recycled = f"local-{sleeper.pid}-{int(proc_start_ticks(sleeper.pid)) - 1}"
    assert not backend.is_alive(run_of(sleeper.pid, recycled))


def test_zombies_and_vanished_processes_are_gone(platform_conf: PlatformConfig) -> None:
    exited = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 30
    while _process_start_ticks(exited.pid) is not None:
        assert time.monotonic() < deadline, "the child never exited"
        time.sleep(0.05)
    # Exited but not yet reaped: a zombie counts as gone.
    assert Path(f"/proc/{exited.pid}").exists()
    exited.wait()
    assert _process_start_ticks(exited.pid) is None

    # A driver gone before its start could be read was recorded as `local-<pid>-None`.
    backend = LocalProcessBackend(platform_conf)
    assert not backend.is_alive(run_of(exited.pid, f"local-{exited.pid}-None"))
