"""Every DAG test needs Airflow's metadata database: DagBag itself reads it."""

import pytest


@pytest.fixture(autouse=True)
def _airflow_metadata(airflow_db):
    return airflow_db
