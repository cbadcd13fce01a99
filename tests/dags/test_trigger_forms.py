"""The trigger forms read right to a person: the job is a required choice with nothing preselected,
a field that may be left empty is not required, and the restate form offers the job's savepoints
from the ledger's catalogue (read at parse time), shown by job, batch and time."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from airflow.dag_processing.dagbag import DagBag
from airflow.sdk.exceptions import ParamValidationError

from ops.ledger.records import SavepointRecord
from ops.ledger.store import Ledger
from ops.spec.job import load_jobs
from ops.spec.platform import PlatformConfig

DAGS = Path(__file__).resolve().parents[2] / "dags"


def dagbag() -> DagBag:
    return DagBag(dag_folder=str(DAGS))


def test_the_job_is_a_required_choice_with_nothing_preselected(platform_conf: PlatformConfig) -> None:
    jobs = sorted(load_jobs(platform_conf.conf_dir).specs)
    bag = dagbag()
    for dag_id in (
        "warden_suspend",
        "warden_resume",
        "warden_restart",
        "warden_savepoint",
        "warden_scale",
        "warden_restate",
    ):
        job = bag.get_dag(dag_id).params.get_param("job")
        assert job.schema["enum"] == jobs and job.schema["type"] == "string"
        assert not job.has_value, f"{dag_id} preselects {job.value!r}"
        with pytest.raises(ParamValidationError):
            job.resolve()
        assert job.resolve("router") == "router"


def test_savepoint_and_before_may_be_left_empty(platform_conf: PlatformConfig) -> None:
    params = dagbag().get_dag("warden_restate").params
    for name in ("savepoint", "before"):
        param = params.get_param(name)
        assert "null" in param.schema["type"], f"{name} is marked required"
        assert param.resolve() is None
        assert param.resolve("x") == "x"
    # Airflow's form leaves a field without a value null; the operator gets no "None" text for it.
    task = dagbag().get_dag("warden_restate").get_task("restate")
    assert task.savepoint == "{{ params.savepoint or '' }}" and task.before == "{{ params.before or '' }}"


def test_the_restate_form_offers_the_catalogued_savepoints(
    platform_conf: PlatformConfig, ledger: Ledger
) -> None:
    taken = datetime(2026, 11, 24, 10, 3, tzinfo=UTC)
    for savepoint_id, job, status in (
        ("sp-router", "router", "complete"),
        ("sp-old", "router", "superseded"),
        ("sp-sessions", "sessionizer", "complete"),
    ):
        ledger.add_savepoint(SavepointRecord(savepoint_id, job, 42, taken, "k", 1, 1, status, "v1"))

    savepoint = dagbag().get_dag("warden_restate").params.get_param("savepoint")

    assert sorted(savepoint.schema["examples"]) == ["sp-router", "sp-sessions"]
    assert savepoint.schema["values_display"]["sp-router"] == "router: batch 42, 2026-11-24 10:03 UTC"
    # Not an enum: a savepoint taken after the last parse is still accepted.
    assert savepoint.resolve("sp-taken-later") == "sp-taken-later"


def test_the_scale_form_pins_the_cores_and_an_empty_field_releases_them(
    platform_conf: PlatformConfig, ledger: Ledger
) -> None:
    scale = dagbag().get_dag("warden_scale")
    cores = scale.params.get_param("cores")
    assert cores.resolve() is None and "null" in cores.schema["type"]
    with pytest.raises(ParamValidationError):
        cores.resolve(0)

    assert scale.test(run_conf={"job": "router", "cores": 3, "reason": "load test"}).state == "success"
    job = ledger.job("router")
    # Autoscaling is off for the router: the pin keeps the file's batch size of its cores.
    assert (job.scale_pinned, job.scale_cores, job.scale_max_files) == (True, 3, 50)
    # dag.test() renders the templates into the task object: a second run needs a fresh parse.
    release_form = dagbag().get_dag("warden_scale")
    assert release_form.test(run_conf={"job": "router", "reason": "load test over"}).state == "success"
    assert not ledger.job("router").scale_pinned
    [pin] = ledger.decisions("router", action="scale_pin")
    [release] = ledger.decisions("router", action="scale_release")
    assert "load test (via " in pin.reason
    assert release.outcome == "pin released: the job runs at default cores, 50 files/batch"
