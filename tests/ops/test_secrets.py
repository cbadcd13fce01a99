"""Secrets by reference (env:, file:, airflow:) without Airflow: each source resolves, a missing
one is an error naming the reference and never the value, and real flows (a Slack alert to the
loopback stand-in, savepoints on a SeaweedFS server that only knows random keys) leave no secret
in the ledger, the logs, the captured output or the Slack messages. Airflow connections and
secrets backends: tests/dags/test_secrets_dag.py."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from ops.alerts import Alert, AlertCenter
from ops.control.supervisor import Supervisor
from ops.exceptions import ConfigError, SavepointError, SecretNotFoundError
from ops.ledger.store import Ledger
from ops.s3 import s3_credentials
from ops.savepoints.store import read_manifest, take_savepoint
from ops.secrets import MASK, Secret, install_secrets_host, lookup_secret, resolve_secret
from ops.spec.job import find_job
from ops.spec.platform import PlatformConfig
from tests.ops.test_savepoints import write_checkpoint_batch
from tests.support.secrets import (
    BUCKET,
    KeyedS3,
    captured,
    configure_platform,
    file_leaks,
    platform_leaks,
    secret_file,
    secret_value,
)
from tests.support.slack import WEBHOOK_PATH, SlackReceiver


@pytest.fixture(autouse=True)
def no_airflow_host() -> Iterator[None]:
    """Outside Airflow: the plugin package, once another test imported it, installed Airflow's host."""
    previous = install_secrets_host(None)
    yield
    install_secrets_host(previous)


# --- each source ------------------------------------------------------------------------------


def test_an_env_reference_resolves_to_a_secret_that_prints_as_a_mask(monkeypatch: pytest.MonkeyPatch) -> None:
    value = secret_value("env")
    monkeypatch.setenv("WARDEN_TEST_SECRET", value)

    secret = resolve_secret("env:WARDEN_TEST_SECRET")

    assert secret.reveal() == value
    assert str(secret) == repr(secret) == f"{secret}" == MASK
    assert value not in repr({"webhook": secret, "keys": [secret]})


def test_a_file_reference_resolves_to_the_content_without_the_trailing_newline(tmp_path: Path) -> None:
    value = secret_value("file")
    reference = secret_file(tmp_path, "slack_webhook", value)

    assert resolve_secret(reference).reveal() == value
    assert lookup_secret(reference) is not None


def test_an_unset_env_reference_means_not_configured_and_s3_falls_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("WARDEN_TEST_UNSET", raising=False)
    assert lookup_secret("env:WARDEN_TEST_UNSET") is None
    assert lookup_secret(None) is None
    embedded = PlatformConfig.model_validate(
        {"s3": {"access_key_id": "env:WARDEN_TEST_UNSET", "secret_access_key": None}}
    ).s3
    credentials = s3_credentials(embedded)
    assert credentials is not None and credentials.access_key_id.reveal() == "streamwarden"
    amazon = embedded.model_copy(update={"endpoint_url": None})
    assert s3_credentials(amazon) is None, "boto3's own chain for Amazon S3"


@pytest.mark.parametrize(
    ("make_reference", "problem"),
    [
        (lambda d: "env:WARDEN_TEST_UNSET", "the variable is unset or empty"),
        (lambda d: f"file:{d / 'absent'}", "no such file"),
        (lambda d: secret_file(d, "empty", "  "), "the file is empty"),
        (lambda d: "airflow:warden_slack", "read only inside Airflow"),
    ],
    ids=["env", "file", "empty-file", "airflow-outside-airflow"],
)
def test_a_missing_secret_is_an_error_naming_the_reference(
    make_reference: Any, problem: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("WARDEN_TEST_UNSET", raising=False)
    reference = make_reference(tmp_path)

    with pytest.raises(SecretNotFoundError) as raised:
        resolve_secret(reference)

    assert str(raised.value).startswith(f"secret {reference}: ") and problem in str(raised.value)


def test_file_and_airflow_references_must_resolve_even_where_env_may_be_unset(tmp_path: Path) -> None:
    with pytest.raises(SecretNotFoundError, match="no such file"):
        lookup_secret(f"file:{tmp_path / 'absent'}")
    platform = PlatformConfig.model_validate(
        {"s3": {"access_key_id": f"file:{tmp_path / 'absent'}", "secret_access_key": None}}
    )
    with pytest.raises(SecretNotFoundError, match=r"secret file:.*absent: no such file"):
        s3_credentials(platform.s3)


def test_a_value_pasted_where_a_reference_belongs_is_refused_without_quoting_it(
    platform_conf: PlatformConfig,
) -> None:
    token = secret_value("token")
    pasted = f"https://hooks.slack.com/services/T000/B000/{token}"

    with pytest.raises(ConfigError) as raised:
        configure_platform(platform_conf, "slack", webhook_url=pasted)

    message = str(raised.value)
    assert "field 'slack.webhook_url': not a secret reference; use env:NAME, file:/PATH" in message
    assert token not in message and "hooks.slack.com" not in message
    with pytest.raises(ConfigError, match=r"field 's3.secret_access_key': .*not an absolute path"):
        configure_platform(platform_conf, "s3", secret_access_key="file:relative/key")
    with pytest.raises(ConfigError, match=r"connection field 'pass' is not one of password, login, host"):
        configure_platform(platform_conf, "s3", secret_access_key="airflow:warden_s3#pass")


@dataclass
class FakeAirflowHost:
    """A stand-in for the Airflow side (tested for real in tests/dags/test_secrets_dag.py)."""

    connections: dict[str, dict[str, Any]]
    masked: list[str] = field(default_factory=list)

    def connection_field(self, conn_id: str, field: str) -> str | None:
        connection = self.connections[conn_id]
        if field.startswith("extra."):
            return connection.get("extra", {}).get(field.removeprefix("extra."))
        return connection.get(field)

    def mask(self, value: str) -> None:
        self.masked.append(value)


def test_airflow_references_resolve_through_the_installed_host_which_masks_every_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    login, password, region_key = secret_value("login"), secret_value("password"), secret_value("extra")
    host = FakeAirflowHost(
        {"warden_s3": {"login": login, "password": password, "extra": {"key": region_key}, "host": None}}
    )
    install_secrets_host(host)
    env_value = secret_value("env")
    monkeypatch.setenv("WARDEN_TEST_SECRET", env_value)

    assert resolve_secret("airflow:warden_s3").reveal() == password
    assert resolve_secret("airflow:warden_s3#login").reveal() == login
    assert resolve_secret("airflow:warden_s3#extra.key").reveal() == region_key
    assert resolve_secret("env:WARDEN_TEST_SECRET").reveal() == env_value
    assert host.masked == [password, login, region_key, env_value]

    with pytest.raises(SecretNotFoundError, match="^secret airflow:warden_slack: no Airflow connection"):
        resolve_secret("airflow:warden_slack")
    with pytest.raises(SecretNotFoundError, match="^secret airflow:warden_s3#host: .* has no host$"):
        resolve_secret("airflow:warden_s3#host")


# --- real flows, scanned for the values -------------------------------------------------------


def slack_page(reason: str = "driver exited with code 1") -> Alert:
    return Alert(
        job="router",
        kind="down",
        severity="critical",
        state="RESTARTING",
        reason=reason,
        last_batch=7,
        run_url=None,
    )


def test_a_slack_alert_with_the_webhook_from_a_file_is_delivered_and_leaks_nothing(
    platform_conf: PlatformConfig, ledger: Ledger, slack_receiver: SlackReceiver, tmp_path: Path, capfd: Any
) -> None:
    token = secret_value("token")
    url = slack_receiver.url.replace(WEBHOOK_PATH, f"/services/T0SECRET/B0SECRET/{token}")
    platform = configure_platform(
        platform_conf, "slack", webhook_url=secret_file(tmp_path / "mounted", "slack_webhook", url)
    )
    center = AlertCenter(ledger, platform.slack)

    alert_id = center.raise_alert(slack_page())
    report = center.deliver_due()

    assert report.sent == (alert_id,)
    [request] = slack_receiver.requests
    assert request.path.endswith(token), "the message went to the URL the file holds"
    assert "router" in request.json()["text"]
    assert platform_leaks([url, token], platform, captured(capfd), slack_receiver) == []


@pytest.mark.parametrize("scheme", ["", "ftp://"], ids=["no-scheme", "not-http"])
def test_a_webhook_url_slack_sdk_refuses_stays_out_of_the_ledger_and_the_logs(
    scheme: str, platform_conf: PlatformConfig, ledger: Ledger, tmp_path: Path, capfd: Any
) -> None:
    """urllib and slack_sdk quote a URL they cannot use in their errors."""
    token = secret_value("token")
    url = f"{scheme}hooks.slack.com/services/T0SECRET/B0SECRET/{token}"
    platform = configure_platform(
        platform_conf, "slack", webhook_url=secret_file(tmp_path, "slack_webhook", url)
    )
    center = AlertCenter(ledger, platform.slack)

    center.raise_alert(slack_page())
    report = center.deliver_due()

    assert report.retry_at is not None
    [record] = ledger.alerts()
    assert record.status == "pending" and record.last_error is not None
    assert record.last_error.startswith("Slack unreachable: ") and MASK in record.last_error
    assert platform_leaks([url, token], platform, captured(capfd)) == []


def test_alerts_wait_in_the_outbox_while_the_webhook_reference_gives_nothing(
    platform_conf: PlatformConfig, ledger: Ledger, slack_receiver: SlackReceiver, tmp_path: Path, capfd: Any
) -> None:
    mounted = tmp_path / "mounted" / "slack_webhook"
    platform = configure_platform(platform_conf, "slack", webhook_url=f"file:{mounted}")
    center = AlertCenter(ledger, platform.slack)
    alert_id = center.raise_alert(slack_page())

    report = center.deliver_due()

    assert (report.sent, report.logged, report.failed) == ((), (), ())
    [record] = ledger.alerts()
    assert (record.status, record.attempts) == ("pending", 0)
    assert f"secret file:{mounted}: no such file" in capfd.readouterr().out
    secret_file(mounted.parent, mounted.name, slack_receiver.url)
    assert center.deliver_due().sent == (alert_id,)


def test_a_savepoint_with_s3_keys_from_files_reaches_seaweedfs_and_leaks_nothing(
    platform_conf: PlatformConfig, ledger: Ledger, keyed_s3: KeyedS3, capfd: Any
) -> None:
    platform = configure_platform(
        platform_conf,
        "s3",
        endpoint_url=keyed_s3.endpoint_url,
        bucket=BUCKET,
        savepoint_prefix="sp-files",
        **keyed_s3.references,
    )
    for batch_id in range(2):
        write_checkpoint_batch(platform, "router", batch_id)

    savepoint = take_savepoint(platform, ledger, find_job("router", platform.conf_dir))

    assert read_manifest(platform, savepoint)["batch_id"] == 1
    stored = keyed_s3.client(keyed_s3.access_key_id, keyed_s3.secret_access_key)
    assert stored.head_object(Bucket=BUCKET, Key=savepoint.manifest_key)["ContentLength"] > 0
    with pytest.raises(ClientError, match="SignatureDoesNotMatch"):
        keyed_s3.client(keyed_s3.access_key_id, "not-the-key").get_object(
            Bucket=BUCKET, Key=savepoint.manifest_key
        )
    values = [keyed_s3.access_key_id, keyed_s3.secret_access_key]
    assert platform_leaks(values, platform, captured(capfd), extra_roots=(keyed_s3.runtime_root,)) == []


def test_wrong_s3_keys_page_on_slack_without_quoting_any_secret(
    platform_conf: PlatformConfig,
    ledger: Ledger,
    keyed_s3: KeyedS3,
    slack_receiver: SlackReceiver,
    tmp_path: Path,
    capfd: Any,
) -> None:
    wrong_id, wrong_key = secret_value("AKID"), secret_value("s3secret")
    mounted = tmp_path / "mounted"
    configure_platform(
        platform_conf, "slack", webhook_url=secret_file(mounted, "slack_webhook", slack_receiver.url)
    )
    platform = configure_platform(
        platform_conf,
        "s3",
        endpoint_url=keyed_s3.endpoint_url,
        bucket=BUCKET,
        savepoint_prefix="sp-wrong",
        access_key_id=secret_file(mounted, "access_key_id", wrong_id),
        secret_access_key=secret_file(mounted, "secret_access_key", wrong_key),
    )
    write_checkpoint_batch(platform, "router", 0)

    with pytest.raises(SavepointError, match="refused checking bucket .*Forbidden"):
        Supervisor.for_platform(platform).savepoint("router", "before the deploy")

    [message] = slack_receiver.messages
    assert "savepoint failed" in message["text"] and "Forbidden" in message["text"]
    real_keys = [keyed_s3.access_key_id, keyed_s3.secret_access_key]
    assert (
        platform_leaks(
            [wrong_id, wrong_key, slack_receiver.url, *real_keys], platform, captured(capfd), slack_receiver
        )
        == []
    )
    # SeaweedFS's own log names the key id it was offered and did not know; its keys stay out.
    assert file_leaks([keyed_s3.runtime_root], real_keys) == []


def test_s3_keys_that_cannot_be_read_fail_the_savepoint_with_a_page_naming_the_reference(
    platform_conf: PlatformConfig, ledger: Ledger, slack_webhook: SlackReceiver, tmp_path: Path
) -> None:
    missing = tmp_path / "mounted" / "secret_access_key"
    platform = configure_platform(
        platform_conf,
        "s3",
        access_key_id=secret_file(missing.parent, "access_key_id", secret_value("AKID")),
        secret_access_key=f"file:{missing}",
    )
    write_checkpoint_batch(platform, "router", 0)

    with pytest.raises(
        SavepointError, match=f"no S3 credentials for .*: secret file:{missing}: no such file"
    ):
        Supervisor.for_platform(platform).savepoint("router", "nightly")

    [message] = slack_webhook.messages
    assert "savepoint failed" in message["text"] and f"secret file:{missing}: no such file" in message["text"]
    outcome = ledger.decisions("router", action="savepoint")[0].outcome
    assert outcome is not None and outcome.startswith("error: no S3 credentials")


def test_a_secret_never_turns_into_its_value_by_accident() -> None:
    secret = Secret(secret_value("value"))
    record = logging.LogRecord("streamwarden", logging.INFO, __file__, 1, "%s %r", (secret, secret), None)
    assert record.getMessage() == f"{MASK} {MASK}"
    assert f"{secret!s} {secret!r} {[secret]}" == f"{MASK} {MASK} [{MASK}]"
