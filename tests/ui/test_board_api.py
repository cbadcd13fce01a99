"""The job board's web app inside Airflow's real api-server app (in process): it is mounted where
the plugin says, answers the board and job pages as JSON, and refuses a request without
credentials when Airflow's auth is on."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from ops.ledger.store import Ledger
from ops.spec.platform import PlatformConfig

USERS = "operator:admin"


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
        for path in ("/streamwarden/api/board", "/streamwarden/api/jobs/router", "/streamwarden/board"):
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


def test_the_embedded_platforms_all_admins_mode_opens_the_board_without_a_login(
    monkeypatch: pytest.MonkeyPatch, platform_ledger: Ledger, tmp_path: Path
) -> None:
    with TestClient(airflow_api(monkeypatch, all_admins=True, passwords=tmp_path / "p.json")) as client:
        answer = client.get("/streamwarden/api/jobs/router")
        assert answer.status_code == 200, answer.text
        assert answer.json()["row"]["state"] == "RESTARTING"
