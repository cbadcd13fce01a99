"""From `supervision.fleet_from_jobs` jobs on, one continuous DAG supervises them all: its DagBag
shape, and a run of it under Airflow's dag.test() launching the autostarted job (a Spark-free
stand-in driver, `tests.support.stub_driver`) and no other."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from airflow.dag_processing.dagbag import DagBag

from ops.control.launcher import DRIVER_MODULE_ENV
from ops.control.supervisor import stop_all_jobs
from ops.ledger.store import Ledger
from ops.spec.job import load_jobs
from ops.spec.platform import FLEET_DAG_ID, SUPERVISE_DAG_PREFIX, PlatformConfig, load_platform
from tests.support.stub_driver import StubDriverBackend, launched

DAGS = Path(__file__).resolve().parents[2] / "dags"
# Seconds of supervision in the test's run of the fleet DAG's task.
TASK_SECONDS = 6.0


@pytest.fixture
def fleet_platform(
    platform_conf: PlatformConfig, monkeypatch: pytest.MonkeyPatch
) -> Iterator[PlatformConfig]:
    """The test platform's jobs under the fleet watch, with stand-in drivers; stopped after."""
    path = platform_conf.conf_dir / "platform.yaml"
    settings = yaml.safe_load(path.read_text())
    settings["supervision"] = {"fleet_from_jobs": 2, "fleet_task_minutes": TASK_SECONDS / 60}
    settings["autostart_jobs"] = ["router"]
    path.write_text(yaml.safe_dump(settings))
    monkeypatch.setenv(DRIVER_MODULE_ENV, StubDriverBackend.driver_module)
    platform = load_platform(platform_conf.conf_dir)
    yield platform
    stop_all_jobs(platform)


def test_a_fleet_is_supervised_by_one_dag(fleet_platform: PlatformConfig) -> None:
    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}
    fleet = bag.get_dag(FLEET_DAG_ID)
    assert [task.task_id for task in fleet.tasks] == ["supervise"]
    assert (fleet.schedule, fleet.is_paused_upon_creation) == ("@continuous", False)
    jobs = sorted(load_jobs(fleet_platform.conf_dir).specs)
    for job in jobs:
        # Kept for a pass by hand and its history; no watch of its own.
        supervise = bag.get_dag(f"{SUPERVISE_DAG_PREFIX}{job}")
        assert [task.task_id for task in supervise.tasks] == ["reconcile"]
        assert supervise.schedule is None

    assert fleet.test().state == "success"

    ledger = Ledger.open(fleet_platform.resolved_ledger_url)
    run = ledger.current_run("router")
    assert run is not None and [pid for _, pid in launched(fleet_platform, "router")] == [run.pid]
    assert StubDriverBackend(fleet_platform).is_alive(run)
    # Nobody started the others: no record, no run.
    assert {record.name for record in ledger.jobs()} == {"router"}
    assert all(launched(fleet_platform, job) == [] for job in jobs if job != "router")
