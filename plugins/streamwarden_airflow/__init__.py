"""Airflow adapters for Streamwarden: operators, the job watch trigger and the DAG factory.

Thin by design: every operator and trigger delegates to `ops/`. This package lives in the plugins
folder so the scheduler, the workers and the triggerer can all import it. Importing it lets ops
read `airflow:` secret references (every DAG file, operator and trigger imports it first).
"""

from streamwarden_airflow.secrets_host import install_airflow_secrets

install_airflow_secrets()
