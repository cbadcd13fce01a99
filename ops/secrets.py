"""The platform's secrets (the Slack webhook URL, the S3 keys), named in platform.yaml by
reference, never by value, and held as `Secret`s whose str and repr are `***`.

A reference is one of:

- `env:NAME`: an environment variable;
- `file:/PATH`: a file's content, surrounding whitespace stripped (how Docker and Kubernetes
  mount secrets, e.g. `/run/secrets/slack_webhook`);
- `airflow:CONN_ID[#FIELD]`: a field of an Airflow connection, `password` by default (or `login`,
  `host`, `extra.KEY`). Airflow looks the connection up through whatever it is configured with:
  `AIRFLOW_CONN_<ID>` variables, a secrets backend (a local file, Vault, AWS Secrets Manager...)
  and, inside a task, its metadata database.

ops/ never imports Airflow, so an `airflow:` reference resolves through a `SecretsHost` that the
Airflow side installs (`streamwarden_airflow.secrets_host`, whenever the plugin package is imported:
in every task, the triggerer and the DAG processor). The host also masks every value resolved in
its process in Airflow's task logs, whatever the reference. A `warden` command run from a shell
has no host: an `airflow:` reference there fails, saying so.

Missing values: `resolve_secret` raises `SecretNotFoundError`, naming the reference and never a
value. `lookup_secret` returns None for an `env:` reference whose variable is unset or empty,
the platform's way of saying "not configured" (no webhook: alerts go to the console; no S3 keys:
the embedded server's, or boto3's own chain for Amazon S3). A `file:` or `airflow:` reference
names something that was provisioned, so its absence is an error either way.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol, final

from ops.exceptions import SecretNotFoundError

MASK: Final = "***"
SCHEMES: Final = ("env", "file", "airflow")
CONNECTION_FIELDS: Final = ("password", "login", "host")
DEFAULT_CONNECTION_FIELD: Final = "password"
EXTRA_PREFIX: Final = "extra."
FORMS: Final = "env:NAME, file:/PATH or airflow:CONN_ID[#FIELD]"

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CONN_ID = re.compile(r"[A-Za-z0-9_.-]+")


@final
class Secret:
    """A secret value. It prints as `***` (str, repr, f-strings, log calls); `reveal()` returns it,
    for the one client that needs it (slack_sdk's webhook client, boto3)."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __str__(self) -> str:
        return MASK

    def __repr__(self) -> str:
        return MASK


class SecretsHost(Protocol):
    """What the process ops runs in offers for secrets; Airflow's side installs one."""

    def connection_field(self, conn_id: str, field: str) -> str | None:
        """A field of connection `conn_id` (`extra.KEY` for a key of its extra); None when the field
        is empty. Raises KeyError when no connection `conn_id` is defined."""
        ...

    def mask(self, value: str) -> None:
        """Hide `value` wherever this process's logs show it."""
        ...


_host: SecretsHost | None = None


def install_secrets_host(host: SecretsHost | None) -> SecretsHost | None:
    """Make `host` the one that resolves `airflow:` references and masks values; the previous one."""
    global _host
    previous, _host = _host, host
    return previous


@dataclass(frozen=True)
class SecretReference:
    """A parsed reference: `scheme`, `locator` (variable, path or connection id), connection `field`."""

    scheme: str
    locator: str
    field: str = DEFAULT_CONNECTION_FIELD

    @classmethod
    def parse(cls, text: str) -> SecretReference:
        """The reference in `text`; ValueError otherwise, never quoting `text`: a value pasted
        where a reference belongs is itself the secret."""
        scheme, colon, locator = text.partition(":")
        if not colon or scheme not in SCHEMES:
            raise ValueError(
                f"not a secret reference; use {FORMS} (put the value itself in the environment, "
                "a file or an Airflow connection)"
            )
        if scheme == "env":
            if not _ENV_NAME.fullmatch(locator):
                raise ValueError("the part after env: is not a variable name (letters, digits, _)")
            return cls("env", locator)
        if scheme == "file":
            if not Path(locator).is_absolute():
                raise ValueError("the part after file: is not an absolute path")
            return cls("file", locator)
        conn_id, _, field = locator.partition("#")
        field = field or DEFAULT_CONNECTION_FIELD
        if not _CONN_ID.fullmatch(conn_id):
            raise ValueError("the part after airflow: is not a connection id (letters, digits, _ . -)")
        if field not in CONNECTION_FIELDS and not (
            field.startswith(EXTRA_PREFIX) and len(field) > len(EXTRA_PREFIX)
        ):
            raise ValueError(
                f"connection field {field!r} is not one of {', '.join(CONNECTION_FIELDS)} or extra.KEY"
            )
        return cls("airflow", conn_id, field)

    def __str__(self) -> str:
        if self.scheme != "airflow":
            return f"{self.scheme}:{self.locator}"
        suffix = "" if self.field == DEFAULT_CONNECTION_FIELD else f"#{self.field}"
        return f"airflow:{self.locator}{suffix}"


def check_reference(value: Any) -> str:
    """A config validator: `value` as a reference's canonical text; ValueError otherwise."""
    if not isinstance(value, str):
        raise ValueError(f"not a secret reference: a {type(value).__name__}; use {FORMS}")
    return str(SecretReference.parse(value))


def resolve_secret(reference: str) -> Secret:
    """The value `reference` names; SecretNotFoundError naming the reference when there is none."""
    parsed = SecretReference.parse(reference)
    value = _read(parsed)
    if _host is not None:
        _host.mask(value)
    return Secret(value)


def lookup_secret(reference: str | None) -> Secret | None:
    """Like `resolve_secret`, but None for no reference or an `env:` one whose variable is unset."""
    if reference is None:
        return None
    parsed = SecretReference.parse(reference)
    if parsed.scheme == "env" and not os.environ.get(parsed.locator):
        return None
    return resolve_secret(reference)


def _read(reference: SecretReference) -> str:
    if reference.scheme == "env":
        value = os.environ.get(reference.locator)
        if not value:
            raise SecretNotFoundError(str(reference), "the variable is unset or empty")
        return value
    if reference.scheme == "file":
        try:
            value = Path(reference.locator).read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            raise SecretNotFoundError(str(reference), "no such file") from None
        except (OSError, UnicodeDecodeError) as error:
            # The error's own text could quote the file's bytes: name only its kind.
            raise SecretNotFoundError(str(reference), f"cannot read it ({type(error).__name__})") from None
        if not value:
            raise SecretNotFoundError(str(reference), "the file is empty")
        return value
    if _host is None:
        raise SecretNotFoundError(
            str(reference),
            "Airflow connections are read only inside Airflow (tasks, the triggerer); "
            "use an env: or file: reference for processes outside it",
        )
    try:
        field_value = _host.connection_field(reference.locator, reference.field)
    except KeyError:
        raise SecretNotFoundError(str(reference), f"no Airflow connection {reference.locator!r}") from None
    if not field_value:
        raise SecretNotFoundError(
            str(reference), f"Airflow connection {reference.locator!r} has no {reference.field}"
        )
    return field_value
