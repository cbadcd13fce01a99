"""Every DAG file imports cleanly and the factory builds the expected DAGs from conf."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from airflow.dag_processing.dagbag import DagBag

from ops.control.supervisor import Supervisor
from ops.ledger.store import Ledger
from ops.spec.job import find_job, load_jobs
from ops.spec.platform import PlatformConfig
from tests.support.drivers import edit_job
from tests.support.slack import SlackReceiver

DAGS = Path(__file__).resolve().parents[2] / "dags"


def dagbag() -> DagBag:
    return DagBag(dag_folder=str(DAGS))


def test_dags_import_without_errors(platform_conf: PlatformConfig) -> None:
    bag = dagbag()
    assert bag.import_errors == {}
    supervision = {f"warden_supervise_{job}" for job in load_jobs(platform_conf.conf_dir).specs}
    assert "warden_supervise_router" in supervision
    assert set(bag.dag_ids) == supervision | {
        "warden_suspend",
        "warden_resume",
        "warden_restart",
        "warden_savepoint",
        "warden_scale",
        "warden_restate",
        "warden_backfill",
        "warden_new_job",
        "warden_edit_job",
        "warden_platform",
        "warden_compact_router",
        "warden_compact_sessionizer",
    }
    compact = bag.get_dag("warden_compact_router")
    assert [t.task_id for t in compact.tasks] == ["compact"]
    assert (compact.schedule, compact.catchup) == ("0 2 * * *", False), (
        "a run catches up every changed partition"
    )
    supervise = bag.get_dag("warden_supervise_router")
    assert [t.task_id for t in supervise.tasks] == ["reconcile", "watch"]
    assert supervise.schedule == "@continuous"
    jobs = sorted(load_jobs(platform_conf.conf_dir).specs)
    assert bag.get_dag("warden_restart").params.get_param("job").schema["enum"] == jobs
    # Trigger forms and housekeeping run as soon as they are loaded; `platform up` unpauses supervision.
    paused = {dag_id: bag.get_dag(dag_id).is_paused_upon_creation for dag_id in bag.dag_ids}
    assert paused == {dag_id: dag_id in supervision for dag_id in bag.dag_ids}


def test_invalid_job_file_disables_only_its_dag_and_pages(
    platform_conf: PlatformConfig, slack_webhook: SlackReceiver
) -> None:
    router = yaml.safe_load((platform_conf.conf_dir / "jobs" / "router.yaml").read_text())
    broken = platform_conf.conf_dir / "jobs" / "broken.yaml"
    broken.write_text(yaml.safe_dump(router | {"name": "broken", "oops": 1}))
    bag = dagbag()
    assert bag.import_errors == {}
    assert "warden_supervise_router" in bag.dag_ids
    assert "warden_supervise_broken" not in bag.dag_ids

    # The platform DAG pages once about the broken file, and closes the page once it is fixed.
    platform_dag = bag.get_dag("warden_platform")
    assert platform_dag.test().state == "success"
    assert platform_dag.test().state == "success"
    texts = [message["text"] for message in slack_webhook.messages]
    assert len(texts) == 1, texts
    assert f"{broken}: field 'oops': unknown key" in texts[0]
    fixed = router | {"name": "broken", "operations": router["operations"] | {"metrics_port": 9499}}
    broken.write_text(yaml.safe_dump(fixed))
    assert platform_dag.test().state == "success"
    assert slack_webhook.messages[-1]["text"].startswith("✅ resolved: broken")


def test_a_restatement_schedule_in_a_job_file_adds_a_scheduled_restate_dag(
    platform_conf: PlatformConfig,
) -> None:
    def nightly(spec: dict) -> None:
        # Router keeps 10 savepoints 30 minutes apart: they reach 4.5 hours back.
        spec["operations"]["restatement"] = {"cron": "0 3 * * *", "lookback_hours": 4}

    edit_job(platform_conf, "router", nightly)
    bag = dagbag()
    assert bag.import_errors == {}
    scheduled = bag.get_dag("warden_restate_router")
    assert scheduled.schedule == "0 3 * * *"
    assert scheduled.params["dry_run"] is False and scheduled.params["job"] == "router"
    assert scheduled.get_task("restate").lookback_hours == 4
    # The manual form stays a dry run by default.
    assert bag.get_dag("warden_restate").params["dry_run"] is True


def test_a_route_filter_spark_rejects_gets_no_dag_once_analysed_and_pages_once(
    platform_conf: PlatformConfig, slack_webhook: SlackReceiver
) -> None:
    router_file = platform_conf.conf_dir / "jobs" / "router.yaml"

    def break_filter(spec: dict) -> None:
        # `>>>` parses (an unsigned shift), but a route needs a condition.
        spec["pipeline"]["routes"][0]["filter"] = "amount >>> 1"

    edit_job(platform_conf, "router", break_filter)
    # Not analysed yet: provisionally valid (its driver would run the same check and refuse).
    assert "warden_supervise_router" in dagbag().dag_ids

    # The platform DAG analyses the new version with Spark, stores the verdict and pages once.
    platform_dag = dagbag().get_dag("warden_platform")
    assert platform_dag.test().state == "success"
    bag = dagbag()
    assert bag.import_errors == {}
    assert "warden_supervise_router" not in bag.dag_ids
    assert "warden_supervise_sessionizer" in bag.dag_ids
    assert "router" not in bag.get_dag("warden_restart").params.get_param("job").schema["enum"]
    assert platform_dag.test().state == "success"
    [page] = [message["text"] for message in slack_webhook.messages]
    assert "router config invalid: INVALID" in page
    assert (
        f"{router_file}: field 'pipeline.routes.0.filter': route 'purchases' filter 'amount &gt;&gt;&gt; 1' "
        "is not a valid boolean expression: is of type int, not boolean" in page
    )

    # A fixed file is a new version: its DAG is back at once, and the next analysis accepts it.
    edit_job(platform_conf, "router", lambda spec: spec["pipeline"]["routes"][0].update(filter="amount > 1"))
    assert "warden_supervise_router" in dagbag().dag_ids
    assert platform_dag.test().state == "success"
    assert slack_webhook.messages[-1]["text"].startswith("✅ resolved: router config invalid")
    assert "warden_supervise_router" in dagbag().dag_ids


def test_the_platform_dag_keeps_prometheus_targets_to_the_jobs_meant_to_run(
    platform_conf: PlatformConfig, ledger: Ledger
) -> None:
    for job in ("router", "sessionizer"):
        ledger.ensure_job(job, desired_state="running", state="RUNNING", config_version="v")
    path = platform_conf.scrape_targets_file
    assert path == platform_conf.conf_dir / "prometheus" / "targets" / "drivers.json"
    platform_dag = dagbag().get_dag("warden_platform")

    def scraped() -> dict[str, list[str]]:
        return {group["labels"]["job_name"]: group["targets"] for group in json.loads(path.read_text())}

    assert platform_dag.test().state == "success"
    router_port = find_job("router", platform_conf.conf_dir).operations.metrics_port
    assert scraped().keys() == {"router", "sessionizer"}
    assert scraped()["router"] == [f"127.0.0.1:{router_port}"]
    # Nothing changed: the file is left as it is (Prometheus reloads a file on every rewrite).
    written = path.stat().st_ino
    assert platform_dag.test().state == "success"
    assert path.stat().st_ino == written

    # Suspended the way the warden_suspend DAG does it: the next run drops it, in one rename.
    Supervisor.for_platform(platform_conf).request("sessionizer", "suspend", "maintenance")
    assert platform_dag.test().state == "success"
    assert scraped() == {"router": [f"127.0.0.1:{router_port}"]}
    assert path.stat().st_ino != written
    assert [entry.name for entry in path.parent.iterdir()] == ["drivers.json"]
