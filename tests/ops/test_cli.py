"""`warden` commands against a real ledger (no driver is started: the jobs are suspended or unlaunched)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest
import sqlalchemy as sa

from ops.cli import main
from ops.ledger.schema import SCHEMA_REVISION, schema_revision
from ops.ledger.store import Ledger
from ops.spec.job import find_job, job_file
from ops.spec.platform import PlatformConfig
from tests.support.drivers import wait_for


def test_stop_status_and_decisions(platform_conf: PlatformConfig, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stop", "router", "--reason", "maintenance window"]) == 0
    out = capsys.readouterr().out
    assert "router: suspend requested (maintenance window)" in out
    assert "router: SUSPENDED" in out

    assert main(["status"]) == 0
    header, *rows = capsys.readouterr().out.splitlines()
    assert header.split()[:4] == ["job", "state", "desired", "last"]
    # Rates are per second in their cells; the backlog counts landing files not yet read.
    assert "backlog (files)" in header
    # One row per job of conf/jobs, by name.
    assert [row.split()[:3] for row in rows if row.startswith("router ")] == [
        ["router", "SUSPENDED", "suspended"]
    ]

    assert main(["decisions", "router"]) == 0
    out = capsys.readouterr().out
    assert "request_suspend" in out and "maintenance window" in out


def test_unknown_job_is_a_clear_error(
    platform_conf: PlatformConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["start", "nosuchjob"]) == 2
    assert "no job named 'nosuchjob'" in capsys.readouterr().err


def test_migrate_creates_the_ledger_schema(
    platform_conf: PlatformConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger_file = platform_conf.runtime_root / "ledger.db"
    assert not ledger_file.exists()
    assert main(["migrate"]) == 0
    assert capsys.readouterr().out.strip() == f"ledger at sqlite:///{ledger_file}: schema {SCHEMA_REVISION}"
    assert schema_revision(sa.create_engine(f"sqlite:///{ledger_file}")) == SCHEMA_REVISION
    # A second run finds it current and changes nothing.
    assert main(["migrate"]) == 0


def test_decisions_shows_the_newest_30_unless_told_otherwise(
    platform_conf: PlatformConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger = Ledger.open(platform_conf.resolved_ledger_url)
    for index in range(45):
        ledger.record_decision("router", "launch", f"pass {index}", {})

    with pytest.raises(SystemExit):
        main(["decisions", "--help"])
    assert "(default: 30)" in capsys.readouterr().out

    def shown(*args: str) -> tuple[list[str], str]:
        assert main(["decisions", "router", *args]) == 0
        captured = capsys.readouterr()
        return [line.split()[5] for line in captured.out.splitlines()[1:]], captured.err

    reasons, note = shown()
    assert reasons == [str(index) for index in range(44, 14, -1)]
    assert "the newest 30 decisions shown; older ones with --limit N or --all" in note
    reasons, note = shown("--limit", "5")
    assert reasons == ["44", "43", "42", "41", "40"] and "newest 5" in note
    reasons, note = shown("--all")
    assert reasons == [str(index) for index in range(44, -1, -1)] and note == ""


# A process that listens on the port in argv[1] until killed; what follows the port is its only
# likeness to a driver.
HOLD_PORT = (
    "import socket, sys, time\n"
    "server = socket.socket()\n"
    "server.bind(('127.0.0.1', int(sys.argv[1])))\n"
    "server.listen()\n"
    "print('listening', flush=True)\n"
    "time.sleep(600)\n"
)


def test_validate_says_a_job_s_metrics_port_is_taken_and_by_whom(
    platform_conf: PlatformConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = find_job("router", platform_conf.conf_dir)
    path = job_file("router", platform_conf.conf_dir)
    port = spec.operations.metrics_port
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        assert main(["validate", "--no-analysis"]) == 1
    out = capsys.readouterr().out
    assert (
        f"INVALID  {path}: field 'operations.metrics_port': port {port} of job 'router' is in use by "
        "another process on 127.0.0.1; the job is not launched until the port is free or the job file "
        f"names another (held by pid {os.getpid()} ("
    ) in out
    assert sum(line.startswith("INVALID") for line in out.splitlines()) == 1, "only the router's port"

    # Held by what looks like the router's own driver: a warning, and the files still validate.
    with subprocess.Popen(
        [sys.executable, "-c", HOLD_PORT, str(port), "--job", "router", "--run-id", "r1"],
        stdout=subprocess.PIPE,
        text=True,
    ) as holder:
        try:
            assert holder.stdout is not None and holder.stdout.readline() == "listening\n"
            assert main(["validate", "--no-analysis"]) == 0
        finally:
            holder.kill()
    warning = next(line for line in capsys.readouterr().out.splitlines() if "operations.metrics_port" in line)
    assert warning.startswith(
        f"WARNING  {path}: field 'operations.metrics_port': port {port} is held by pid {holder.pid} ("
    )
    assert "which may be job 'router''s own driver: fine while it runs" in warning

    assert main(["validate", "--no-analysis"]) == 0
    assert "operations.metrics_port" not in capsys.readouterr().out


def test_platform_generator_stops_and_starts_alone(
    platform_conf: PlatformConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    landing = platform_conf.landing_root / "events"

    def written() -> int:
        return sum(1 for _ in landing.rglob("*.json")) if landing.exists() else 0

    assert main(["platform", "generator", "start"]) == 0
    try:
        assert capsys.readouterr().out.startswith("generator: started (pid ")
        assert main(["platform", "generator", "start"]) == 0
        assert capsys.readouterr().out.startswith("generator: already running (pid ")
        wait_for(lambda: written() > 0, 60, "the generator's first file")
        assert main(["platform", "status"]) == 0
        assert next(
            line.split()[:2] for line in capsys.readouterr().out.splitlines() if line.startswith("generator")
        ) == ["generator", "running"]
    finally:
        assert main(["platform", "generator", "stop"]) == 0
    assert capsys.readouterr().out == "generator: stopped\n"
    files = written()
    time.sleep(3)
    assert written() == files, "no file after the stop"
    assert main(["platform", "generator", "stop"]) == 0
    assert capsys.readouterr().out == "generator: not running\n"
