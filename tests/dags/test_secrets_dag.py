"""`airflow:` secret references against a real Airflow: connections from `AIRFLOW_CONN_*`
variables (JSON and URI), from the LocalFilesystemBackend secrets backend and, inside a task,
from the metadata database. The `warden_platform` DAG, run by dag.test(), pages Slack (the loopback
stand-in) with the webhook from a connection in the metadata database and prunes savepoints on a
SeaweedFS server whose keys come from a secrets-backend file; afterwards no secret value is in
any log, the ledger, the XCom rows (or any other Airflow table but `connection`) or the Slack
messages, and Airflow's masker hides every one."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from airflow.dag_processing.dagbag import DagBag
from airflow.models.connection import Connection as ConnectionRow
from airflow.models.xcom import XComModel
from airflow.sdk.configuration import clear_secrets_backends_cache
from airflow.sdk.log import redact
from airflow.utils.session import create_session
from botocore.exceptions import ClientError

from ops.exceptions import SecretNotFoundError
from ops.ledger.store import Ledger
from ops.savepoints.store import take_savepoint
from ops.secrets import install_secrets_host, resolve_secret
from ops.spec.job import find_job
from ops.spec.platform import PlatformConfig
from streamwarden_airflow.secrets_host import install_airflow_secrets
from tests.ops.test_savepoints import write_checkpoint_batch
from tests.support.airflow import AIRFLOW_HOME
from tests.support.drivers import edit_job
from tests.support.secrets import (
    BUCKET,
    KeyedS3,
    captured,
    configure_platform,
    database_leaks,
    file_leaks,
    platform_leaks,
    secret_value,
)
from tests.support.slack import WEBHOOK_PATH, SlackReceiver

DAGS = Path(__file__).resolve().parents[2] / "dags"
LOCAL_FILESYSTEM_BACKEND = "airflow.secrets.local_filesystem.LocalFilesystemBackend"


@pytest.fixture(autouse=True)
def airflow_secrets() -> Iterator[None]:
    """Airflow's host installed, and Airflow's secrets backends built afresh before and after: it
    keeps a configured backend for the life of the process."""
    previous = install_secrets_host(None)
    install_airflow_secrets()
    clear_secrets_backends_cache()
    yield
    clear_secrets_backends_cache()
    install_secrets_host(previous)


def connections_file(directory: Path, connections: dict[str, dict[str, Any]]) -> Path:
    """A LocalFilesystemBackend connections file (JSON: conn_id -> fields)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "connections.json"
    path.write_text(json.dumps(connections))
    return path


def test_a_connection_in_an_airflow_conn_variable_resolves_in_json_and_uri_form(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, login, password = (
        secret_value("https://hooks.example/T/B/"),
        secret_value("AKID"),
        secret_value("key"),
    )
    monkeypatch.setenv(
        "AIRFLOW_CONN_WARDEN_SLACK", json.dumps({"conn_type": "slackwebhook", "password": url})
    )
    monkeypatch.setenv("AIRFLOW_CONN_WARDEN_S3", f"aws://{quote(login)}:{quote(password, safe='')}@")

    assert resolve_secret("airflow:warden_slack").reveal() == url
    assert resolve_secret("airflow:warden_s3#login").reveal() == login
    assert resolve_secret("airflow:warden_s3#password").reveal() == password
    assert [redact(value) for value in (url, login, password)] == ["***"] * 3


def test_a_connection_from_a_local_filesystem_secrets_backend_resolves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    login, password, region = secret_value("AKID"), secret_value("key"), secret_value("region")
    path = connections_file(
        tmp_path,
        {
            "warden_s3": {
                "conn_type": "aws",
                "login": login,
                "password": password,
                "extra": {"region": region},
            }
        },
    )
    monkeypatch.setenv("AIRFLOW__SECRETS__BACKEND", LOCAL_FILESYSTEM_BACKEND)
    monkeypatch.setenv("AIRFLOW__SECRETS__BACKEND_KWARGS", json.dumps({"connections_file_path": str(path)}))

    assert resolve_secret("airflow:warden_s3#login").reveal() == login
    assert resolve_secret("airflow:warden_s3").reveal() == password
    assert resolve_secret("airflow:warden_s3#extra.region").reveal() == region


def test_a_missing_connection_is_an_error_naming_the_reference() -> None:
    with pytest.raises(SecretNotFoundError) as raised:
        resolve_secret("airflow:warden_absent#login")
    assert str(raised.value) == "secret airflow:warden_absent#login: no Airflow connection 'warden_absent'"


@pytest.fixture
def slack_connection_in_the_metadata_db(slack_receiver: SlackReceiver) -> Iterator[str]:
    """The webhook URL (a random path on the Slack stand-in) as a connection in Airflow's database."""
    url = slack_receiver.url.replace(WEBHOOK_PATH, f"/services/T0SECRET/B0SECRET/{secret_value('token')}")
    with create_session() as session:
        session.add(ConnectionRow(conn_id="warden_slack", conn_type="slackwebhook", password=url))
    yield url
    with create_session() as session:
        session.query(ConnectionRow).filter(ConnectionRow.conn_id == "warden_slack").delete()


def test_the_platform_dag_reads_slack_and_s3_secrets_from_airflow_and_leaks_none(
    platform_conf: PlatformConfig,
    ledger: Ledger,
    keyed_s3: KeyedS3,
    slack_receiver: SlackReceiver,
    slack_connection_in_the_metadata_db: str,
    tmp_path: Path,
    capfd: Any,
) -> None:
    webhook_url = slack_connection_in_the_metadata_db
    configure_platform(platform_conf, "slack", webhook_url="airflow:warden_slack")
    platform = configure_platform(
        platform_conf,
        "s3",
        endpoint_url=keyed_s3.endpoint_url,
        bucket=BUCKET,
        savepoint_prefix=f"sp-{secret_value('dag')}",
        access_key_id="airflow:warden_s3#login",
        secret_access_key="airflow:warden_s3",
    )
    backend_file = connections_file(
        tmp_path / "secrets-backend",
        {
            "warden_s3": {
                "conn_type": "aws",
                "login": keyed_s3.access_key_id,
                "password": keyed_s3.secret_access_key,
            }
        },
    )
    # Two savepoints of the router, taken outside Airflow with the keys from their files; with
    # keep_count 1 the DAG's retention deletes the older one.
    edit_job(platform, "router", lambda spec: spec["operations"]["savepoints"].update(keep_count=1))
    outside = platform.model_copy(update={"s3": platform.s3.model_copy(update=keyed_s3.references)})
    older, newer = [], []
    for batch_id, taken in enumerate((older, newer)):
        write_checkpoint_batch(platform, "router", batch_id)
        taken.append(take_savepoint(outside, ledger, find_job("router", platform.conf_dir)))
    # An invalid job file, so the DAG has something to page about.
    (platform.conf_dir / "jobs" / "broken.yaml").write_text("name: broken\n")

    dag = DagBag(dag_folder=str(DAGS)).get_dag("warden_platform")
    # Spark's analysis of the job files is not what this test is about (and takes a JVM).
    run = dag.test(conn_file_path=str(backend_file), mark_success_pattern="analyse_job_files")

    assert run.state == "success"
    [page] = slack_receiver.messages
    assert "broken" in page["text"] and "config invalid" in page["text"].lower()
    assert slack_receiver.requests[0].path == webhook_url.removeprefix(
        f"http://127.0.0.1:{slack_receiver.port}"
    )
    assert [sp.id for sp in ledger.savepoints("router")] == [newer[0].id]
    s3 = keyed_s3.client(keyed_s3.access_key_id, keyed_s3.secret_access_key)
    with pytest.raises(ClientError, match="404"):
        s3.head_object(Bucket=BUCKET, Key=older[0].manifest_key)

    secrets = [webhook_url, webhook_url.rsplit("/", 1)[1], keyed_s3.access_key_id, keyed_s3.secret_access_key]
    resolved = [webhook_url, keyed_s3.access_key_id, keyed_s3.secret_access_key]
    assert [redact(f"<{value}>") for value in resolved] == ["<***>"] * 3, "masked in task logs"
    airflow_db = f"sqlite:///{AIRFLOW_HOME / 'airflow.db'}"
    with create_session() as session:
        xcom_rows = session.query(XComModel).filter(XComModel.dag_id == "warden_platform").count()
    assert xcom_rows, "the tasks' return values are in XCom, and scanned"
    # dag.test() runs the tasks in this process and writes their logs to its output.
    output = captured(capfd)
    assert "alert delivery pass" in output and "router: deleted savepoints" in output
    assert "decisions: 0 rows deleted" in output, "the ledger's retention ran too"
    assert platform_leaks(secrets, platform, output, slack_receiver) == []
    # The `connection` table holds the webhook URL: that is where it is kept on purpose.
    assert database_leaks(airflow_db, secrets, skip_tables=["connection"]) == []
    assert file_leaks([AIRFLOW_HOME / "logs"], secrets) == []
