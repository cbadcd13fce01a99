"""From `supervision.fleet_from_jobs` jobs on, one continuous DAG supervises them all: its DagBag
shape, a run of it under Airflow's dag.test() launching the autostarted job (a Spark-free
stand-in driver, `tests.support.stub_driver`) and no other, and a run that outlasts its
PostgreSQL ledger going down while the driver is killed."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml
from airflow.dag_processing.dagbag import DagBag

from ops.control.launcher import DRIVER_MODULE_ENV
from ops.control.supervisor import stop_all_jobs
from ops.embedded.services import EmbeddedPostgres
from ops.ledger.store import Ledger
from ops.spec.job import load_jobs
from ops.spec.platform import FLEET_DAG_ID, SUPERVISE_DAG_PREFIX, PlatformConfig, load_platform
from tests.support.drivers import wait_for
from tests.support.stub_driver import StubDriverBackend, launched

DAGS = Path(__file__).resolve().parents[2] / "dags"
# Seconds of supervision in the test's runs of the fleet DAG's task: the first launches one
# stand-in; the second launches it, loses its ledger for OUTAGE_SECONDS and relaunches it after,
# with room for a busy machine's slow PostgreSQL start.
TASK_SECONDS = 6.0
OUTAGE_TASK_SECONDS = 40.0
OUTAGE_SECONDS = 4.0


def _fleet_conf(
    platform_conf: PlatformConfig, monkeypatch: pytest.MonkeyPatch, task_seconds: float, **settings: object
) -> PlatformConfig:
    """The test platform's jobs under the fleet watch (the router autostarted), with stand-in
    drivers and `settings` over platform.yaml's."""
    path = platform_conf.conf_dir / "platform.yaml"
    written = yaml.safe_load(path.read_text())
    written["supervision"] = {"fleet_from_jobs": 2, "fleet_task_minutes": task_seconds / 60}
    written["autostart_jobs"] = ["router"]
    path.write_text(yaml.safe_dump({**written, **settings}))
    monkeypatch.setenv(DRIVER_MODULE_ENV, StubDriverBackend.driver_module)
    return load_platform(platform_conf.conf_dir)


@pytest.fixture
def fleet_platform(
    platform_conf: PlatformConfig, monkeypatch: pytest.MonkeyPatch
) -> Iterator[PlatformConfig]:
    """The fleet on the test platform's SQLite ledger; stopped after."""
    platform = _fleet_conf(platform_conf, monkeypatch, TASK_SECONDS)
    yield platform
    stop_all_jobs(platform)


@pytest.fixture
def fleet_on_postgresql(
    platform_conf: PlatformConfig, monkeypatch: pytest.MonkeyPatch, postgres_ledger_database: str
) -> Iterator[PlatformConfig]:
    """The fleet with its ledger on the worker's PostgreSQL server; stopped after."""
    platform = _fleet_conf(
        platform_conf, monkeypatch, OUTAGE_TASK_SECONDS, ledger={"url": postgres_ledger_database}
    )
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


def test_the_fleet_task_outlasts_its_ledger_going_down(
    fleet_on_postgresql: PlatformConfig, postgres_server: EmbeddedPostgres
) -> None:
    platform = fleet_on_postgresql
    fleet = DagBag(dag_folder=str(DAGS)).get_dag(FLEET_DAG_ID)

    def outage() -> int:
        """Once the router runs: the ledger's server down, the driver killed meanwhile, the server
        back. The pid killed."""
        wait_for(lambda: len(launched(platform, "router")) == 1, 60, "the router's first launch")
        [(_, first)] = launched(platform, "router")
        postgres_server.stop()
        try:
            os.kill(first, signal.SIGKILL)
            time.sleep(OUTAGE_SECONDS)
        finally:
            postgres_server.start()
        return first

    with ThreadPoolExecutor(max_workers=1) as pool:
        killed = pool.submit(outage)
        run_of_dag = fleet.test()
        first = killed.result()
    # Every sweep and pass of the outage failed; the task went on and ended as planned, in its
    # first try (a failed task is retried after 5 s, every job unwatched meanwhile).
    [task] = run_of_dag.get_task_instances()
    assert (run_of_dag.state, task.state, task.try_number) == ("success", "success", 1)

    run = Ledger.open(platform.resolved_ledger_url).current_run("router")
    assert run is not None and [pid for _, pid in launched(platform, "router")] == [first, run.pid]
    assert StubDriverBackend(platform).is_alive(run)
