"""`warden` commands against a real ledger (no driver is started: the job is suspended)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from ops.cli import main
from ops.ledger.store import SCHEMA_REVISION, schema_revision
from ops.spec.platform import PlatformConfig


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
