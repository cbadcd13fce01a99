"""Airflow for tests: a private AIRFLOW_HOME with a migrated metadata database.

The environment is set when this plugin module is imported, before anything imports Airflow,
because Airflow reads its configuration once at import. Each process imports it once, so every
xdist worker has an AIRFLOW_HOME (and metadata database) of its own.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="warden-airflow-"))

os.environ.update(
    {
        "AIRFLOW_HOME": str(AIRFLOW_HOME),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
    }
)
# The triggerer, workers and DAG parser put the plugins folder on sys.path; so do the tests.
sys.path.insert(0, str(REPO / "plugins"))


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """Airflow's metadata database (SQLite in AIRFLOW_HOME), migrated once per session (per worker)."""
    subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"],
        check=True,
        capture_output=True,
        env=os.environ.copy(),
    )
    return AIRFLOW_HOME
