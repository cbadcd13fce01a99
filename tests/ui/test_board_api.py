"""The job board's web app inside Airflow's real api-server app (in process): it is mounted where
the plugin says, answers the board and job pages as JSON, refuses a request without credentials
when Airflow's auth is on, and drafts and checks a job for the New job and Edit forms while the
writing stays behind Airflow's own check of the user's right to trigger the DAG that writes."""

from __future__ import annotations

import datetime as dt
import json
import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pyspark.sql import SparkSession

from ops.driver.checkpoint import log_entries
from ops.ledger.store import Ledger
from ops.spec.platform import CONF_DIR_ENV, PlatformConfig
from tests.support.device_state import STATE_ROWS, run_device_health

USERS = "operator:admin,reader:viewer"


def airflow_api(monkeypatch: pytest.MonkeyPatch, *, all_admins: bool, passwords: Path) -> FastAPI:
    """Airflow's api-server app as `airflow api-server` builds it, with the simple auth manager."""
    from airflow.api_fastapi.app import create_app, purge_cached_app
    from airflow.plugins_manager import get_fastapi_plugins

    monkeypatch.setenv(
        "AIRFLOW__CORE__AUTH_MANAGER",
        "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
    )
    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS", str(all_admins))
    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", USERS)
    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE", str(passwords))
    # A key long enough for the HS512 tokens (PyJWT warns below 64 bytes).
    monkeypatch.setenv("AIRFLOW__API_AUTH__JWT_SECRET", secrets.token_hex(64))
    purge_cached_app()
    app = create_app()
    assert any(entry["url_prefix"] == "/streamwarden" for entry in get_fastapi_plugins()[0])
    return app


def bearer(client: TestClient, passwords: Path, user: str) -> dict[str, str]:
    """The headers of `user`'s requests, with the token Airflow gives for its password."""
    password = json.loads(passwords.read_text())[user]
    token = client.post("/auth/token", json={"username": user, "password": password})
    assert token.status_code == 201, token.text
    return {"Authorization": f"Bearer {token.json()['access_token']}"}


@pytest.fixture
def platform_ledger(platform_conf: PlatformConfig, airflow_db: Path) -> Iterator[Ledger]:
    from streamwarden_airflow.console_app import console

    console.cache_clear()
    ledger = Ledger.open(platform_conf.resolved_ledger_url)
    ledger.ensure_job("router", desired_state="running", state="RESTARTING", config_version="v1")
    yield ledger
    console.cache_clear()


def test_with_auth_on_a_request_without_credentials_is_refused(
    monkeypatch: pytest.MonkeyPatch, platform_ledger: Ledger, tmp_path: Path
) -> None:
    passwords = tmp_path / "passwords.json"
    with TestClient(airflow_api(monkeypatch, all_admins=False, passwords=passwords)) as client:
        for path in (
            "/streamwarden/api/board",
            "/streamwarden/api/jobs/router",
            "/streamwarden/api/jobs/device_health/state?key=d1",
            "/streamwarden/board",
        ):
            assert client.get(path).status_code == 401, path
        assert (
            client.get("/streamwarden/api/board", headers={"Authorization": "Bearer forged"}).status_code
            == 403
        )

        password = json.loads(passwords.read_text())["operator"]
        token = client.post("/auth/token", json={"username": "operator", "password": password})
        assert token.status_code == 201, token.text
        headers = {"Authorization": f"Bearer {token.json()['access_token']}"}
        board = client.get("/streamwarden/api/board", headers=headers)
        assert board.status_code == 200
        rows = {row["job"]: row for row in board.json()["jobs"]}
        assert rows["router"]["state"] == "RESTARTING" and rows["router"]["down"] is True
        page = client.get("/streamwarden/jobs/router", headers=headers)
        assert page.status_code == 200 and "Streamwarden job board" in page.text
        assert client.get("/streamwarden/api/jobs/nope", headers=headers).status_code == 404


def test_the_forms_draft_and_check_a_job_for_any_user_but_airflow_decides_who_writes_it(
    monkeypatch: pytest.MonkeyPatch, platform_conf: PlatformConfig, platform_ledger: Ledger, tmp_path: Path
) -> None:
    passwords = tmp_path / "passwords.json"
    with TestClient(airflow_api(monkeypatch, all_admins=False, passwords=passwords)) as client:
        assert client.post("/streamwarden/api/drafts", json={"name": "x", "pipeline": {}}).status_code == 401
        reader = bearer(client, passwords, "reader")
        start = client.get("/streamwarden/api/drafts/new", params={"kind": "router"}, headers=reader)
        assert start.status_code == 200, start.text
        assert start.json()["pipeline"]["source"]["path"] == "events"
        assert (
            client.get("/streamwarden/api/drafts/new", params={"kind": "python"}, headers=reader).status_code
            == 422
        )

        # Refused before Spark is asked: the name is taken. Nothing is written either way.
        checked = client.post(
            "/streamwarden/api/drafts", json={**start.json(), "name": "router"}, headers=reader
        )
        assert checked.status_code == 200, checked.text
        router_file = platform_conf.conf_dir / "jobs" / "router.yaml"
        assert checked.json()["problems"] == {"name": f"a job named 'router' exists already ({router_file})"}
        assert checked.json()["text"].startswith("name: router\n")

        edit = client.get("/streamwarden/api/jobs/router/draft", headers=reader)
        assert edit.status_code == 200 and edit.json()["pipeline"]["routes"][0]["name"] == "purchases"
        page = client.get("/streamwarden/api/jobs/router", headers=reader).json()
        assert page["edit_refusal"] is None
        refused = client.get("/streamwarden/api/jobs/sessionizer/draft", headers=reader)
        assert refused.status_code == 409
        assert refused.json()["detail"].endswith("deploy it with `warden upgrade sessionizer --spec FILE`")
        assert client.get("/streamwarden/api/jobs/nope/draft", headers=reader).status_code == 404

        # Writing is the DAG's, and Airflow lets only those with the right trigger it.
        run = {"logical_date": None, "conf": {"job_file": checked.json()["text"]}}
        assert client.post("/api/v2/dags/warden_new_job/dagRuns", json=run, headers=reader).status_code == 403
        # An admin gets past that check: to a run, or to no parsed DAG in this worker's metadata
        # database (whether another test parsed the DAGs into it first).
        operator = bearer(client, passwords, "operator")
        answer = client.post("/api/v2/dags/warden_new_job/dagRuns", json=run, headers=operator)
        assert answer.status_code in (200, 404), answer.text


def test_the_embedded_platforms_all_admins_mode_opens_the_board_without_a_login(
    monkeypatch: pytest.MonkeyPatch, platform_ledger: Ledger, tmp_path: Path
) -> None:
    with TestClient(airflow_api(monkeypatch, all_admins=True, passwords=tmp_path / "p.json")) as client:
        answer = client.get("/streamwarden/api/jobs/router")
        assert answer.status_code == 200, answer.text
        assert answer.json()["row"]["state"] == "RESTARTING"
        # Stateful, but nothing committed yet: no form, and a lookup says why without starting Spark.
        page = client.get("/streamwarden/api/jobs/device_health").json()
        assert page["state_lookup"] == {
            "key_column": None,
            "batch_id": None,
            "note": "this job keeps no state yet: no batch has committed",
        }
        refused = client.get("/streamwarden/api/jobs/device_health/state", params={"key": "d1"})
        assert refused.status_code == 409
        assert refused.json()["detail"] == "this job keeps no state yet: no batch has committed"


@pytest.fixture
def device_state(spark: SparkSession, platform_conf: PlatformConfig) -> PlatformConfig:
    return run_device_health(spark, platform_conf)


def spawned_with(conf_dir: Path) -> list[int]:
    """The processes started with `conf_dir` as their platform (a lookup's `warden state`, its JVM)."""
    marker = f"{CONF_DIR_ENV}={conf_dir}".encode()
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if marker in environ.read_bytes().split(b"\0"):
                found.append(int(environ.parent.name))
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found


def test_a_stateful_jobs_page_looks_up_its_committed_state_by_key_in_a_spark_process(
    monkeypatch: pytest.MonkeyPatch, device_state: PlatformConfig, platform_ledger: Ledger, tmp_path: Path
) -> None:
    committed = max(log_entries(device_state.checkpoint_root / "device_health" / "commits"))
    with TestClient(airflow_api(monkeypatch, all_admins=True, passwords=tmp_path / "p.json")) as client:
        page = client.get("/streamwarden/api/jobs/device_health").json()
        assert page["state_lookup"] == {"key_column": "device_id", "batch_id": committed, "note": None}

        found = client.get("/streamwarden/api/jobs/device_health/state", params={"key": "d1"})
        assert found.status_code == 200, found.text
        assert found.json() == {
            "job": "device_health",
            "key": "d1",
            "state_var": "latest",
            "batch_id": committed,
            "columns": [
                "device_id",
                "data_point",
                "value",
                "event_time",
                "event_id",
                "health",
                "health_since",
            ],
            "rows": [
                [cell.isoformat() if isinstance(cell, dt.datetime) else cell for cell in row]
                for row in STATE_ROWS[:2]
            ],
        }
        missing = client.get("/streamwarden/api/jobs/device_health/state", params={"key": "d9"})
        assert missing.status_code == 404
        assert (
            missing.json()["detail"]
            == f"no state for key 'd9' in job 'device_health' as of batch {committed}"
        )

        # Stateless, and stateful in a form the reader does not read: no form, no Spark process.
        assert client.get("/streamwarden/api/jobs/router").json()["state_lookup"] == {
            "key_column": None,
            "batch_id": None,
            "note": "this job keeps no state",
        }
        refused = client.get("/streamwarden/api/jobs/router/state", params={"key": "x"})
        assert (refused.status_code, refused.json()["detail"]) == (409, "this job keeps no state")
        sessionizer = client.get("/streamwarden/api/jobs/sessionizer").json()["state_lookup"]
        assert sessionizer["key_column"] is None
        assert sessionizer["note"].startswith("this job's state (sessionizer) cannot be looked up by key")
        assert client.get("/streamwarden/api/jobs/nope/state", params={"key": "x"}).status_code == 404

        # Past its time limit a read is stopped, its JVM with it.
        from streamwarden_airflow.console_app import console

        console().state.timeout_seconds = 1.0
        late = client.get("/streamwarden/api/jobs/device_health/state", params={"key": "d1"})
        assert late.status_code == 504
        assert (
            late.json()["detail"]
            == "reading the state of job 'device_health' took longer than 1 s; it was stopped"
        )
        deadline = time.monotonic() + 10
        while spawned_with(device_state.conf_dir) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert spawned_with(device_state.conf_dir) == []
