"""A throwaway platform: its own conf dir, storage roots and ledger under tmp_path.

The ledger is SQLite unless the test is parametrized with `on_both_ledgers`, which runs it once
on SQLite and once on a fresh database of the worker's PostgreSQL server (tests.support.postgres).
The `ledger` fixture copies a ledger migrated once per worker rather than running every Alembic
migration for each test; a test that opens the platform's ledger itself still migrates it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from ops.ledger.store import Ledger
from ops.spec.job import find_job
from ops.spec.paths import JobPaths
from ops.spec.platform import CONF_DIR_ENV, DEFAULT_CONF_DIR, LEDGER_URL_ENV, PlatformConfig, load_platform
from tests.support.ports import free_test_port

LEDGER_KINDS = ("sqlite", "postgresql")
# Runs a test on each ledger database: it gets `ledger_url` (and so `platform_conf`, `ledger`) for each.
on_both_ledgers = pytest.mark.parametrize("ledger_url", LEDGER_KINDS, indirect=True)


# Seconds: the floors of a test platform's job graces (`write_conf`).
STUCK_GRACE_FLOORS = {"stuck_grace_seconds": 180, "startup_grace_seconds": 360}


def write_conf(
    conf_dir: Path, runtime: Path, *, jobs: dict[str, dict] | None = None, ledger_url: str | None = None
) -> None:
    """A platform.yaml rooted at `runtime` (SQLite ledger there unless `ledger_url` says otherwise,
    no embedded PostgreSQL server) plus the repo's job files without their preview taps (or the
    given ones)."""
    (conf_dir / "jobs").mkdir(parents=True, exist_ok=True)
    platform = {
        "storage": {
            "runtime_root": str(runtime),
            "landing_root": str(runtime / "landing"),
            "lake_root": str(runtime / "lake"),
            "checkpoint_root": str(runtime / "checkpoints"),
        },
        "ledger": {"url": ledger_url or f"sqlite:///{runtime / 'ledger.db'}"},
        "postgres": None,
        "spark": {"master": "local[2]", "ui_enabled": False},
    }
    (conf_dir / "platform.yaml").write_text(yaml.safe_dump(platform))
    # Files job specs refer to (e.g. the enricher's mapping) live beside conf/jobs.
    for extra in ("mappings",):
        if (DEFAULT_CONF_DIR / extra).is_dir():
            shutil.copytree(DEFAULT_CONF_DIR / extra, conf_dir / extra, dirs_exist_ok=True)
    if jobs is None:
        for job_file in (DEFAULT_CONF_DIR / "jobs").glob("*.yaml"):
            spec = yaml.safe_load(job_file.read_text())
            spec["operations"]["metrics_port"] = free_test_port()
            # A preview tap is a second query in every driver of the job (the shipped router has
            # one, for the demo): the tests that are about taps turn them on themselves.
            spec["operations"].pop("preview", None)
            # The suite loads 2 cores with several Spark stacks at once, where a cold start takes
            # minutes and a first batch 45 s: graces at these floors keep the supervisor from
            # killing slow drivers as stuck and turning the load into restart storms. The tests of
            # stuck detection set their own thresholds.
            health = spec["operations"].setdefault("health", {})
            for grace, floor in STUCK_GRACE_FLOORS.items():
                health[grace] = max(health.get(grace, 0), floor)
            (conf_dir / "jobs" / job_file.name).write_text(yaml.safe_dump(spec, sort_keys=False))
    else:
        for name, spec in jobs.items():
            (conf_dir / "jobs" / f"{name}.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))


@pytest.fixture
def ledger_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The throwaway platform's ledger: SQLite under tmp_path, or with `on_both_ledgers` also a
    fresh PostgreSQL database (already migrated when the test takes `ledger`)."""
    kind = getattr(request, "param", "sqlite")
    if kind == "postgresql":
        # A test that takes `ledger` gets it migrated anyway: its database starts as the migrated copy.
        fixture = "postgres_ledger_database" if "ledger" in request.fixturenames else "postgres_database"
        return str(request.getfixturevalue(fixture))
    assert kind == "sqlite", f"unknown ledger kind {kind!r}; one of {LEDGER_KINDS}"
    return f"sqlite:///{tmp_path / 'runtime' / 'ledger.db'}"


@pytest.fixture
def platform_conf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ledger_url: str) -> PlatformConfig:
    """A platform config in tmp_path, made the current one through STREAMWARDEN_CONF_DIR (and no
    ledger URL from the environment)."""
    conf_dir = tmp_path / "conf"
    write_conf(conf_dir, tmp_path / "runtime", ledger_url=ledger_url)
    monkeypatch.setenv(CONF_DIR_ENV, str(conf_dir))
    monkeypatch.delenv(LEDGER_URL_ENV, raising=False)
    return load_platform(conf_dir)


@pytest.fixture(scope="session")
def sqlite_ledger_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite ledger migrated to the newest schema, once per worker, for `ledger` to copy."""
    template = tmp_path_factory.mktemp("ledger-template") / "ledger.db"
    Ledger.open(f"sqlite:///{template}").engine.dispose()
    # The last connection's close checkpoints the WAL into the file: a copy of the file alone is whole.
    assert not template.with_name(f"{template.name}-wal").exists(), "the template's WAL outlived its engine"
    return template


@pytest.fixture
def ledger(request: pytest.FixtureRequest, platform_conf: PlatformConfig) -> Ledger:
    """The throwaway platform's ledger at the newest schema: on SQLite a copy of the worker's
    migrated file when nothing has created the ledger yet (on PostgreSQL, see `ledger_url`)."""
    url = platform_conf.resolved_ledger_url
    if url.startswith("sqlite:///"):
        ledger_file = Path(url.removeprefix("sqlite:///"))
        if not ledger_file.exists():
            ledger_file.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(request.getfixturevalue("sqlite_ledger_template"), ledger_file)
    return Ledger.open(url)


def copy_job(conf_dir: Path, name: str, new_name: str) -> Path:
    """A copy of a job file under a new name (for tests that need two jobs)."""
    source = conf_dir / "jobs" / f"{name}.yaml"
    spec = yaml.safe_load(source.read_text())
    spec["name"] = new_name
    spec["operations"]["metrics_port"] = free_test_port()
    target = conf_dir / "jobs" / f"{new_name}.yaml"
    target.write_text(yaml.safe_dump(spec, sort_keys=False))
    shutil.copymode(source, target)
    return target


def job_paths(platform: PlatformConfig, job: str) -> JobPaths:
    """The paths of `job` (its file loaded from the platform's conf dir)."""
    return JobPaths.of(platform, find_job(job, platform.conf_dir))
