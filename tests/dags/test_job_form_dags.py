"""The DAGs behind the board's New job and Edit forms under Airflow's dag.test(): `warden_new_job`
writes a checked job file, and the next parse gives the job its supervision DAG, paused;
`warden_edit_job` refuses a version a running job cannot take before `warden upgrade` starts.
The whole walk from the page, through the edit's upgrade, is tests/ops/test_platform.py's."""

from __future__ import annotations

from pathlib import Path

import pytest
from airflow.dag_processing.dagbag import DagBag

from ops.console.job_form import current_values, draft_text, new_job_values
from ops.ledger.store import Ledger
from ops.spec.analysis import read_verdict
from ops.spec.job import find_job, job_file
from ops.spec.platform import PlatformConfig

DAGS = Path(__file__).resolve().parents[2] / "dags"


def dagbag() -> DagBag:
    return DagBag(dag_folder=str(DAGS))


@pytest.mark.spark
def test_a_job_the_new_job_dag_writes_gets_its_supervision_dag_paused(platform_conf: PlatformConfig) -> None:
    values = new_job_values("router")
    routes = [{"name": "big", "filter": "event_type = 'purchase' AND amount > 3", "columns": ["event_id"]}]
    values = values.model_copy(
        update={
            "name": "big_purchases",
            "pipeline": {**values.pipeline, "routes": routes, "sink": {"path": "big"}},
        }
    )
    text = draft_text(platform_conf, values)
    bag = dagbag()
    job_file_param = bag.get_dag("warden_new_job").params.get_param("job_file")
    assert job_file_param.schema["type"] == "string" and not job_file_param.has_value
    assert "warden_supervise_big_purchases" not in bag.dag_ids

    assert bag.get_dag("warden_new_job").test(run_conf={"job_file": text}).state == "success"

    assert job_file("big_purchases", platform_conf.conf_dir).read_text() == text
    assert read_verdict(platform_conf, find_job("big_purchases", platform_conf.conf_dir)) is not None
    parsed = dagbag()
    assert parsed.get_dag("warden_supervise_big_purchases").is_paused_upon_creation is True
    # The Edit form's DAG offers the router and SQL jobs, the new one among them.
    edit = parsed.get_dag("warden_edit_job").params.get_param("job")
    assert edit.schema["enum"] == ["big_purchases", "router"]
    # A second run with the same file writes nothing: the name is taken.
    assert dagbag().get_dag("warden_new_job").test(run_conf={"job_file": text}).state == "failed"
    assert job_file("big_purchases", platform_conf.conf_dir).read_text() == text


def test_the_edit_dag_refuses_a_version_that_moves_the_sink_before_any_upgrade(
    platform_conf: PlatformConfig, ledger: Ledger
) -> None:
    router = current_values(platform_conf, find_job("router", platform_conf.conf_dir))
    moved = router.model_copy(update={"pipeline": {**router.pipeline, "sink": {"path": "elsewhere"}}})
    before = job_file("router", platform_conf.conf_dir).read_text()
    form = {"job": "router", "job_file": draft_text(platform_conf, moved, "router"), "reason": "test"}

    assert dagbag().get_dag("warden_edit_job").test(run_conf=form).state == "failed"

    assert job_file("router", platform_conf.conf_dir).read_text() == before
    assert ledger.decisions("router", action="upgrade") == []
