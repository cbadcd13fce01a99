"""The ledger on SQLite and on a real PostgreSQL server: migrations, every table's reads and writes,
where the URL comes from, and what a caller sees when the database is unreachable."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.config import Config as AlembicConfig
from alembic.script import ScriptDirectory

from ops.console.status import job_statuses
from ops.embedded.services import EmbeddedPostgres
from ops.exceptions import ConfigError, LedgerError
from ops.ledger.records import RunRecord, SavepointRecord
from ops.ledger.schema import (
    MIGRATIONS_DIR,
    SCHEMA_REVISION,
    alerts_table,
    decisions_table,
    runs_table,
    schema_revision,
)
from ops.ledger.store import Ledger
from ops.spec.job import JobSpec, find_job
from ops.spec.platform import DEFAULT_CONF_DIR, LEDGER_URL_ENV, LedgerRetention, PlatformConfig, load_platform
from tests.support.platform import on_both_ledgers
from tests.support.ports import free_test_port

# The longest name a job may have (JOB_NAME_PATTERN): every id the platform derives from it must fit.
LONGEST_JOB = "j" * 63


def alembic_config(url: str) -> AlembicConfig:
    config = AlembicConfig()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", url)
    return config


def test_schema_revision_is_the_newest_migration() -> None:
    assert ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head() == SCHEMA_REVISION


@on_both_ledgers
def test_open_migrates_a_ledger_left_behind_by_an_older_release(ledger_url: str, tmp_path: Path) -> None:
    # A ledger an older release created: the first revision only, with a job in it.
    Path(tmp_path / "runtime").mkdir()
    command.upgrade(alembic_config(ledger_url), "0001")
    engine = sa.create_engine(ledger_url)
    assert schema_revision(engine) == "0001"
    with engine.begin() as connection:
        connection.execute(
            sa.text(
                "INSERT INTO jobs (name, desired_state, state, state_reason, state_since, config_version,"
                " updated_at) VALUES ('router', 'running', 'RUNNING', '', '2026-01-01', 'v1', '2026-01-01')"
            )
        )
    engine.dispose()

    ledger = Ledger.open(ledger_url)
    assert schema_revision(ledger.engine) == SCHEMA_REVISION
    assert [job.name for job in ledger.jobs()] == ["router"]
    assert ledger.savepoints("router") == []  # the table revision 0002 adds


def schema_of(engine: sa.Engine) -> dict[str, object]:
    """Each table's columns, primary key, indexes, unique constraints and foreign keys."""
    inspector = sa.inspect(engine)
    return {
        table: {
            "columns": [(c["name"], str(c["type"]), c["nullable"]) for c in inspector.get_columns(table)],
            "primary_key": inspector.get_pk_constraint(table)["constrained_columns"],
            "indexes": sorted(
                (i["name"], tuple(i["column_names"]), i["unique"]) for i in inspector.get_indexes(table)
            ),
            "unique": sorted(tuple(u["column_names"]) for u in inspector.get_unique_constraints(table)),
            "foreign_keys": sorted(
                (tuple(f["constrained_columns"]), f["referred_table"], tuple(f["referred_columns"]))
                for f in inspector.get_foreign_keys(table)
            ),
        }
        for table in sorted(inspector.get_table_names())
    }


@on_both_ledgers
def test_the_ledger_fixtures_copy_is_what_a_migration_makes(
    ledger: Ledger, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """The `ledger` fixture copies a template migrated once per worker: the copy must be the schema a
    fresh migration gives, at the newest revision, and empty."""
    if ledger.dialect == "sqlite":
        fresh_url = f"sqlite:///{tmp_path / 'fresh.db'}"
    else:
        fresh_url = str(request.getfixturevalue("postgres_database"))
    fresh = Ledger.open(fresh_url)
    assert schema_revision(ledger.engine) == schema_revision(fresh.engine) == SCHEMA_REVISION
    assert schema_of(ledger.engine) == schema_of(fresh.engine)
    assert ledger.jobs() == []
    fresh.engine.dispose()


@on_both_ledgers
def test_every_migration_downgrades_and_upgrades_again(ledger: Ledger, ledger_url: str) -> None:
    ledger.ensure_job("router", desired_state="running", state="SUBMITTED", config_version="v1")
    ledger.engine.dispose()
    command.downgrade(alembic_config(ledger_url), "0003")
    command.upgrade(alembic_config(ledger_url), "head")
    assert schema_revision(ledger.engine) == SCHEMA_REVISION
    assert [job.name for job in ledger.jobs()] == ["router"]
    command.downgrade(alembic_config(ledger_url), "base")
    assert sa.inspect(ledger.engine).get_table_names() == ["alembic_version"]
    assert Ledger.open(ledger_url).jobs() == []


@on_both_ledgers
def test_jobs_runs_and_decisions_round_trip_with_utc_times(ledger: Ledger) -> None:
    first = ledger.ensure_job("router", desired_state="running", state="SUBMITTED", config_version="v1")
    again = ledger.ensure_job("router", desired_state="suspended", state="SUSPENDED", config_version="v2")
    assert again == first, "registering a known job changes nothing"
    assert first.state_since.tzinfo is not None and first.state_since.utcoffset() == timedelta(0)

    ledger.update_job("router", state="RUNNING", state_reason="driver up", last_batch_id=7)
    running = ledger.job("router")
    assert running is not None and running.state_since > first.state_since
    ledger.update_job("router", state="RUNNING", backlog=3)
    assert ledger.job("router").state_since == running.state_since  # type: ignore[union-attr]

    started = datetime(2031, 5, 4, 12, 0, tzinfo=UTC)
    for number in (1, 2):
        ledger.start_run(
            RunRecord(
                run_id=f"router-{number}",
                job="router",
                backend="local",
                pid=100 + number,
                app_id=f"local-{number}",
                metrics_port=9401,
                log_path=None,
                config_version="v1",
                started_at=started + timedelta(minutes=number),
                stopped_at=None,
                exit_reason=None,
            )
        )
    assert ledger.current_run("router").run_id == "router-2"  # type: ignore[union-attr]
    ledger.finish_run("router-2", "failed: killed")
    ledger.finish_run("router-2", "a later reason is ignored")
    assert ledger.current_run("router").run_id == "router-1"  # type: ignore[union-attr]
    newest = ledger.runs("router")[0]
    assert (newest.run_id, newest.exit_reason, newest.started_at) == (
        "router-2",
        "failed: killed",
        started + timedelta(minutes=2),
    )

    inputs = {"observed": {"alive": False, "at": started}, "restarts": [1, 2]}
    decision = ledger.record_decision("router", "launch", "driver gone", inputs, "router-2")
    ledger.set_outcome(decision, "run router-3 pid 103")
    [recorded] = ledger.decisions("router", action="launch")
    assert recorded.inputs == {"observed": {"alive": False, "at": str(started)}, "restarts": [1, 2]}
    assert (recorded.outcome, recorded.run_id) == ("run router-3 pid 103", "router-2")


@on_both_ledgers
def test_savepoints_and_operations_round_trip(ledger: Ledger) -> None:
    ledger.ensure_job("router", desired_state="running", state="RUNNING", config_version="v1")
    at = datetime(2031, 5, 4, 12, 0, tzinfo=UTC)
    for number in (1, 2):
        ledger.add_savepoint(
            SavepointRecord(
                id=f"sp-{number}",
                job="router",
                batch_id=10 * number,
                created_at=at + timedelta(hours=number),
                manifest_key=f"savepoints/router/sp-{number}/manifest.json",
                total_bytes=2**40,  # past 32 bits: BIGINT on both databases
                uploaded_bytes=2**33,
                status="good",
                config_version="v1",
            )
        )
    ledger.set_savepoint_status(["sp-1"], "expired")
    assert [(s.id, s.status, s.total_bytes) for s in ledger.savepoints("router")] == [
        ("sp-2", "good", 2**40),
        ("sp-1", "expired", 2**40),
    ]
    ledger.delete_savepoint_row("sp-1")
    assert [s.id for s in ledger.savepoints("router")] == ["sp-2"]

    decision = ledger.record_decision("router", "rewind", "bad deploy", {})
    operation = ledger.start_operation(
        "router", "rewind", "bad deploy", decision, "stop", savepoint_id="sp-2"
    )
    assert ledger.operation("router") == operation
    ledger.update_operation(operation.id, step="rewind", savepoint_batch=20)
    moved = ledger.operation_by_id(operation.id)
    assert moved is not None and (moved.step, moved.savepoint_batch) == ("rewind", 20)
    ledger.finish_operation(operation.id, "rewound to batch 20")
    ledger.finish_operation(operation.id, "closed twice")
    assert ledger.operation("router") is None
    assert [o.outcome for o in ledger.operations("router")] == ["rewound to batch 20"]


@on_both_ledgers
def test_ids_of_the_longest_job_name_fit(ledger: Ledger) -> None:
    # PostgreSQL enforces column lengths (SQLite does not): a run id and a notice's dedup key are
    # the job name plus a time stamp or two more names.
    ledger.ensure_job(LONGEST_JOB, desired_state="running", state="SUBMITTED", config_version="v1")
    run_id = f"{LONGEST_JOB}-20310504T120000-abcdef"
    ledger.start_run(
        RunRecord(
            run_id=run_id,
            job=LONGEST_JOB,
            backend="local",
            pid=1,
            app_id=None,
            metrics_port=None,
            log_path=None,
            config_version="v1",
            started_at=datetime(2031, 5, 4, tzinfo=UTC),
            stopped_at=None,
            exit_reason=None,
        )
    )
    ledger.record_decision(LONGEST_JOB, "launch", "new job", {}, run_id)
    dedup_key = f"notice/{LONGEST_JOB}/restate_summary/{'f' * 32}"
    ledger.enqueue_alert(LONGEST_JOB, "restate_summary", dedup_key, "info", {})
    assert ledger.current_run(LONGEST_JOB).run_id == run_id  # type: ignore[union-attr]
    assert [alert.dedup_key for alert in ledger.alerts(LONGEST_JOB)] == [dedup_key]


@on_both_ledgers
def test_processes_opening_a_new_ledger_at_once_all_get_it(ledger_url: str) -> None:
    # Supervisors starting together on a new ledger each migrate it; none may fail on the other's tables.
    opener = (
        "import sys; from ops.ledger.store import Ledger; "
        "Ledger.open(sys.argv[1]).ensure_job('router', desired_state='running', state='SUBMITTED', "
        "config_version='v1')"
    )
    processes = [subprocess.Popen([sys.executable, "-c", opener, ledger_url]) for _ in range(2)]
    assert [process.wait(60) for process in processes] == [0, 0]
    ledger = Ledger.open(ledger_url)
    assert schema_revision(ledger.engine) == SCHEMA_REVISION
    assert [job.name for job in ledger.jobs()] == ["router"]


def test_an_unreachable_postgresql_ledger_is_named_without_its_password() -> None:
    url = f"postgresql+psycopg://warden:s3cret-pw@127.0.0.1:{free_test_port()}/ledger"
    with pytest.raises(LedgerError) as raised:
        Ledger.open(url)
    message = str(raised.value)
    assert f"ledger at postgresql+psycopg://warden:***@127.0.0.1:{url.split(':')[3]}" in message
    assert "Connection refused" in message
    assert "s3cret" not in message


def test_a_ledger_whose_server_stops_fails_each_call_clearly_and_works_once_it_is_back(
    postgres_server: EmbeddedPostgres, postgres_database: str
) -> None:
    ledger = Ledger.open(postgres_database)
    ledger.ensure_job("router", desired_state="running", state="RUNNING", config_version="v1")
    postgres_server.stop()
    try:
        with pytest.raises(
            LedgerError, match=r"ledger at postgresql\+psycopg://streamwarden@127\.0\.0\.1:\d+/"
        ):
            ledger.jobs()
    finally:
        postgres_server.start()
    # The pool's connections died with the server: the next call gets a fresh one.
    assert [job.name for job in ledger.jobs()] == ["router"]


# --- where the URL comes from ------------------------------------------------------------------


def test_the_url_comes_from_platform_yaml_or_the_environment(
    platform_conf: PlatformConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert platform_conf.resolved_ledger_url.startswith("sqlite:////")
    monkeypatch.setenv(LEDGER_URL_ENV, "postgresql://warden@db.example:5432/ledger")
    # The generic scheme means psycopg 3, the driver installed.
    assert load_platform(platform_conf.conf_dir).resolved_ledger_url == (
        "postgresql+psycopg://warden@db.example:5432/ledger"
    )


def test_warden_uses_the_ledger_the_environment_names(
    platform_conf: PlatformConfig, postgres_database: str
) -> None:
    Ledger.open(postgres_database).record_decision("router", "launch", "decided on PostgreSQL", {})
    # platform.yaml says SQLite; the variable wins.
    decisions = subprocess.run(
        [str(Path(sys.executable).parent / "warden"), "decisions", "router"],
        env={**os.environ, LEDGER_URL_ENV: postgres_database},
        capture_output=True,
        text=True,
    )
    assert decisions.returncode == 0, decisions.stderr
    assert "decided on PostgreSQL" in decisions.stdout
    assert not Path(platform_conf.resolved_ledger_url.removeprefix("sqlite:///")).exists()


def test_a_ledger_url_of_another_database_is_refused_naming_where_it_came_from(
    platform_conf: PlatformConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(LEDGER_URL_ENV, "mysql+pymysql://warden:s3cret@db.example/ledger")
    with pytest.raises(ConfigError) as raised:
        load_platform(platform_conf.conf_dir)
    assert str(raised.value).startswith(f"${LEDGER_URL_ENV}: the ledger runs on SQLite or PostgreSQL")
    assert "mysql+pymysql://warden:***@db.example/ledger" in str(raised.value)
    assert "s3cret" not in str(raised.value)

    monkeypatch.delenv(LEDGER_URL_ENV)
    path = platform_conf.conf_dir / "platform.yaml"
    path.write_text(path.read_text().replace("sqlite:///", "oracle://"))
    with pytest.raises(ConfigError, match=r"platform.yaml: field 'ledger.url': .* not 'oracle'"):
        load_platform(platform_conf.conf_dir)


def a_year_of_history(ledger: Ledger, now: datetime, jobs: tuple[str, ...]) -> None:
    """Per job and day of the year before `now` (from the day's start, `now` less whole days): 48
    decisions, 6 runs (one failed) and a page and its resolution; written in bulk, as a year of
    reconcile passes would have left them."""
    days = range(365, 0, -1)  # oldest first, as the rows' ids grow

    def at(day: int, **offset: float) -> datetime:
        return now - timedelta(days=day) + timedelta(**offset)

    for job in jobs:
        ledger.ensure_job(job, desired_state="running", state="RUNNING", config_version="v1")
    with ledger.engine.begin() as connection:
        for job in jobs:
            connection.execute(
                decisions_table.insert(),
                [
                    {"job": job, "at": at(day, minutes=30 * n), "action": "launch",
                     "reason": "r", "inputs": {}}
                    for day in days for n in range(48)
                ],
            )  # fmt: skip
            connection.execute(
                runs_table.insert(),
                [
                    {"run_id": f"{job}-{day}-{n}", "job": job, "backend": "local", "config_version": "v1",
                     "started_at": at(day, hours=4 * n),
                     "stopped_at": at(day, hours=4 * n + 1),
                     "exit_reason": "failed: exit 1" if n == 0 else "stopped: restart requested"}
                    for day in days for n in range(6)
                ],
            )  # fmt: skip
            connection.execute(
                alerts_table.insert(),
                [
                    {"job": job, "kind": kind, "dedup_key": f"{job}/down", "severity": "critical",
                     "payload": {}, "status": "sent", "created_at": at(day, minutes=m),
                     "attempts": 1, "next_attempt_at": now}
                    for day in days for kind, m in (("down", 5), ("resolved", 10))
                ],
            )  # fmt: skip


@on_both_ledgers
def test_a_year_old_ledger_is_pruned_to_its_retention_and_keeps_what_is_open(ledger: Ledger) -> None:
    now = datetime(2026, 11, 29, 12, tzinfo=UTC)
    jobs = ("router", "sessionizer")
    a_year_of_history(ledger, now, jobs)
    old = now - timedelta(days=300)
    # What stays whatever its age: an open run, an undelivered page and an open incident's page.
    ledger.start_run(
        RunRecord(
            run_id="router-open", job="router", backend="local", pid=1, app_id=None, metrics_port=9401,
            log_path=None, config_version="v1", started_at=old, stopped_at=None, exit_reason=None,
        )
    )  # fmt: skip
    ledger.enqueue_alert("router", "down", "router/stuck", "critical", {}, at=old)
    open_incident = ledger.enqueue_alert("sessionizer", "stuck", "sessionizer/stuck", "critical", {}, at=old)
    ledger.update_alert(open_incident, status="sent")
    specs: dict[str, JobSpec | ConfigError] = dict.fromkeys(jobs, find_job("router", DEFAULT_CONF_DIR))
    before = job_statuses(ledger, specs, now)
    retention = LedgerRetention(decisions_days=30, alerts_days=60, runs_days=90)

    deleted = ledger.prune(retention, now)

    assert deleted == {
        "decisions": 2 * 48 * (365 - 30),
        "alerts": 2 * 2 * (365 - 60),
        "runs": 2 * 6 * (365 - 90),
        "standbys": 0,
    }
    assert job_statuses(ledger, specs, now) == before
    for job in jobs:
        assert min(d.at for d in ledger.decisions(job, limit=None)) >= now - timedelta(days=31)
    assert min(r.started_at for r in ledger.runs("router", limit=10_000)) == old, "the open run stays"
    kept = [a.dedup_key for a in ledger.alerts(limit=10_000) if a.created_at < now - timedelta(days=60)]
    assert sorted(kept) == ["router/stuck", "sessionizer/stuck"]
    assert ledger.prune(retention, now) == {"decisions": 0, "alerts": 0, "runs": 0, "standbys": 0}
