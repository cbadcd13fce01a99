"""The per-job operation lock, held by another process: a file lock with a SQLite ledger, a
PostgreSQL advisory lock with a PostgreSQL ledger (then across hosts: platforms that share nothing
but the database)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ops.exceptions import JobBusyError
from ops.ledger.locks import job_lock, table_lock
from ops.spec.platform import CONF_DIR_ENV, PlatformConfig, load_platform
from tests.support.platform import on_both_ledgers, write_conf

HOLDER = """
import sys, time
from ops.ledger import locks
from ops.spec.platform import load_platform
with getattr(locks, sys.argv[2])(load_platform(), sys.argv[1], "a test holder"):
    print("held", flush=True)
    time.sleep(600)
"""
Hold = Callable[..., "subprocess.Popen[str]"]


@pytest.fixture
def hold(platform_conf: PlatformConfig) -> Iterator[Hold]:
    """Starts a process that takes a job's lock (under the given platform) and keeps it."""
    holders: list[subprocess.Popen[str]] = []

    def start(
        job: str, platform: PlatformConfig = platform_conf, lock: str = "job_lock"
    ) -> subprocess.Popen[str]:
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLDER, job, lock],
            env={**os.environ, CONF_DIR_ENV: str(platform.conf_dir)},
            stdout=subprocess.PIPE,
            text=True,
        )
        holders.append(holder)
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        return holder

    yield start
    for holder in holders:
        holder.kill()
        holder.wait()
        assert holder.stdout is not None
        holder.stdout.close()


@on_both_ledgers
def test_a_held_job_lock_names_its_holder_and_is_free_once_the_holder_is_killed(
    platform_conf: PlatformConfig, hold: Hold
) -> None:
    holder = hold("router")
    expected = rf"a test holder \(pid {holder.pid} on {socket.gethostname()}\) holds its lock"
    with (
        pytest.raises(JobBusyError, match=expected),
        job_lock(platform_conf, "router", "reconcile", timeout=0.5),
    ):
        pytest.fail("the lock was taken while another process held it")
    with job_lock(platform_conf, "enricher", "reconcile", timeout=0):
        pass  # other jobs are not held up

    holder.send_signal(signal.SIGKILL)
    holder.wait()
    with job_lock(platform_conf, "router", "reconcile", timeout=5):
        pass


def test_on_postgresql_the_lock_holds_across_platforms_that_share_only_the_ledger(
    postgres_database: str, tmp_path: Path, hold: Hold
) -> None:
    # Two hosts: each its own conf and runtime directory (so no file lock in common), one ledger.
    hosts = []
    for host in ("host-a", "host-b"):
        write_conf(tmp_path / host / "conf", tmp_path / host / "runtime", ledger_url=postgres_database)
        hosts.append(load_platform(tmp_path / host / "conf"))
    holder = hold("router", hosts[0])
    with (
        pytest.raises(JobBusyError, match=f"pid {holder.pid}"),
        job_lock(hosts[1], "router", "reconcile", timeout=0.5),
    ):
        pytest.fail("host b took the lock host a holds")
    assert not (hosts[0].job_runtime_dir("router") / ".operation.lock").exists()
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    with job_lock(hosts[1], "router", "reconcile", timeout=5):
        pass


@on_both_ledgers
def test_a_held_table_lock_keeps_other_table_writers_out_but_never_the_supervisor(
    platform_conf: PlatformConfig, hold: Hold
) -> None:
    # A compaction holds the router's table for as long as it runs ...
    holder = hold("router", lock="table_lock")
    with (
        pytest.raises(JobBusyError, match=f"pid {holder.pid}"),
        table_lock(platform_conf, "router", "backfill publish", timeout=0.5),
    ):
        pytest.fail("a second table writer took the lock a compaction holds")
    # ... while a restart of the router's dead driver, or `warden stop`, goes ahead at once.
    with job_lock(platform_conf, "router", "reconcile", timeout=0):
        pass
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    with table_lock(platform_conf, "router", "compaction", timeout=5):
        pass
