"""Airflow's side of `ops.secrets`: `airflow:CONN_ID[#FIELD]` references read through Airflow's
connections, and every secret the platform resolves masked in Airflow's logs.

`Connection.get` from the Task SDK is the one lookup Airflow 3 offers task code and plugins
alike: inside a task it asks the configured secrets backend, then `AIRFLOW_CONN_<ID>` variables,
then the metadata database (through the API server); in the triggerer or a DAG parse it asks the
secrets backend and the variables. Importing `streamwarden_airflow` installs it (see __init__),
so ops finds it in every Airflow process without importing Airflow itself.

Not `secrets.py`: Airflow's plugin loader imports every file under plugins/ as a top-level module
named after the file, and one named `secrets` replaces the standard library's for the process.
"""

from __future__ import annotations

from airflow.sdk import Connection
from airflow.sdk.exceptions import AirflowNotFoundException
from airflow.sdk.log import mask_secret

from ops.secrets import EXTRA_PREFIX, install_secrets_host


class AirflowSecretsHost:
    """Reads connection fields with Airflow's `Connection.get`; masks with its secrets masker."""

    def connection_field(self, conn_id: str, field: str) -> str | None:
        try:
            connection = Connection.get(conn_id)
        except AirflowNotFoundException:
            raise KeyError(conn_id) from None
        if field.startswith(EXTRA_PREFIX):
            value = connection.extra_dejson.get(field[len(EXTRA_PREFIX) :])
        else:
            value = getattr(connection, field)
        return None if value is None else str(value)

    def mask(self, value: str) -> None:
        # Airflow masks a connection's password and extra by itself, not its login, nor values
        # read from the environment or a file.
        mask_secret(value)


def install_airflow_secrets() -> None:
    """Make ops resolve `airflow:` references, and mask secrets, through this process's Airflow."""
    install_secrets_host(AirflowSecretsHost())
