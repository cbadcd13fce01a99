"""Opening the ledger: Alembic runs only for a database behind the newest revision."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import command
from alembic.config import Config as AlembicConfig
from alembic.script import ScriptDirectory

from ops.ledger.store import MIGRATIONS_DIR, SCHEMA_REVISION, Ledger, schema_revision
from ops.spec.platform import PlatformConfig


def alembic_config(url: str) -> AlembicConfig:
    config = AlembicConfig()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", url)
    return config


def test_schema_revision_is_the_newest_migration() -> None:
    assert ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head() == SCHEMA_REVISION


def test_open_creates_a_new_ledger_and_migrates_one_left_behind(platform_conf: PlatformConfig) -> None:
    url = platform_conf.resolved_ledger_url
    # A ledger an older release created: the first revision only, with a job in it.
    platform_conf.runtime_root.mkdir(parents=True)
    command.upgrade(alembic_config(url), "0001")
    engine = sa.create_engine(url)
    assert schema_revision(engine) == "0001"
    with engine.begin() as connection:
        connection.execute(
            sa.text(
                "INSERT INTO jobs (name, desired_state, state, state_reason, state_since, config_version,"
                " updated_at) VALUES ('router', 'running', 'RUNNING', '', '2026-01-01', 'v1', '2026-01-01')"
            )
        )

    ledger = Ledger.open(url)
    assert schema_revision(engine) == SCHEMA_REVISION
    assert [job.name for job in ledger.jobs()] == ["router"]
    assert ledger.savepoints("router") == []  # the table revision 0002 adds

    fresh = platform_conf.runtime_root / "fresh" / "ledger.db"
    assert Ledger.open(f"sqlite:///{fresh}").jobs() == []
    assert schema_revision(sa.create_engine(f"sqlite:///{fresh}")) == SCHEMA_REVISION
