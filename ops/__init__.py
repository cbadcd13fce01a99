"""Streamwarden platform library: config, ledger, launcher, supervisor, alerts, CLI.

Nothing in ops/ imports Airflow; dags/ and plugins/ call into it, and jobs/ imports only what a
driver needs (config models and the telemetry listener).
"""
