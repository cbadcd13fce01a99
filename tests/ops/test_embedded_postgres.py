"""The embedded platform's PostgreSQL server, as `warden platform up/down/status` run it, with
the ledger in it."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import yaml

from ops.embedded import platform as embedded
from ops.embedded.services import POSTGRES_DATABASES, EmbeddedPostgres
from ops.exceptions import ServiceError
from ops.ledger.store import Ledger
from ops.spec.platform import PlatformConfig, load_platform
from tests.support.platform import write_conf
from tests.support.ports import free_test_port


@pytest.fixture
def server_root() -> Iterator[Path]:
    """A data directory's parent that the server's unprivileged user can reach (see
    tests.support.postgres)."""
    root = Path(tempfile.mkdtemp(prefix="streamwarden-pg-"))
    root.chmod(0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def pg_platform(tmp_path: Path, server_root: Path, postgres_connections: None) -> Iterator[PlatformConfig]:
    """A platform with an embedded PostgreSQL server and its ledger there; no S3 server."""
    conf_dir = tmp_path / "conf"
    port = free_test_port()
    write_conf(conf_dir, tmp_path / "runtime", jobs={})
    document = yaml.safe_load((conf_dir / "platform.yaml").read_text())
    document["postgres"] = {"port": port, "data_dir": str(server_root / "data")}
    document["ledger"] = {"url": f"postgresql+psycopg://streamwarden@127.0.0.1:{port}/ledger"}
    document["s3"] = {"endpoint_url": None}
    (conf_dir / "platform.yaml").write_text(yaml.safe_dump(document))
    platform = load_platform(conf_dir)
    yield platform
    postgres = EmbeddedPostgres.for_platform(platform)
    assert postgres is not None
    postgres.stop()


def test_the_platform_runs_postgresql_with_the_ledger_and_metastore_databases(
    pg_platform: PlatformConfig,
) -> None:
    postgres = EmbeddedPostgres.for_platform(pg_platform)
    assert postgres is not None
    postgres.start()
    with psycopg.connect(postgres.conninfo()) as connection:
        databases = {row[0] for row in connection.execute("SELECT datname FROM pg_database")}
        listen = connection.execute("SHOW listen_addresses").fetchone()
        sockets = connection.execute("SHOW unix_socket_directories").fetchone()
    assert set(POSTGRES_DATABASES) <= databases
    assert (listen, sockets) == (("127.0.0.1",), ("",))

    ledger = Ledger.open(pg_platform.resolved_ledger_url)
    ledger.ensure_job("router", desired_state="running", state="SUBMITTED", config_version="v1")
    assert ("postgres", True) in {(row.name, row.running) for row in embedded.status(pg_platform)}

    lines: list[str] = []
    embedded.down(pg_platform, echo=lines.append)
    assert "postgres: stopped" in lines
    assert ("postgres", False) in {(row.name, row.running) for row in embedded.status(pg_platform)}

    # Started again on the same data directory, the ledger is still there.
    postgres.start()
    assert [job.name for job in Ledger.open(pg_platform.resolved_ledger_url).jobs()] == ["router"]


def test_a_taken_port_is_refused_before_anything_starts(
    postgres_server: EmbeddedPostgres, server_root: Path
) -> None:
    # The port of another server (the worker's test server): this one must not take it for its own.
    postgres = EmbeddedPostgres(server_root / "data", postgres_server.port, server_root / "runtime")
    with pytest.raises(
        ServiceError, match=rf"127\.0\.0\.1:{postgres_server.port}: another process listens there"
    ):
        postgres.start()
    assert not (server_root / "data").exists()
