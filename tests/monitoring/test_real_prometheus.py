"""A real Prometheus (Debian's, on loopback) scraping a real router driver and a real Pushgateway,
with the repo's rules: every expression of the rules and dashboards names only metrics the driver
exports or the batch tasks push, and evaluates; killing the driver fires StreamwardenJobDown.

One driver for the module (a driver's cold start is most of the cost), killed by the last test.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from ops.ledger.store import Ledger
from ops.prometheus_targets import DRIVER_SCRAPE_JOB, write_driver_targets
from ops.pushgateway import (
    BATCH_TASK_METRICS,
    SAVEPOINT_BATCH,
    SAVEPOINT_INTERVAL,
    SAVEPOINT_TOTAL_BYTES,
    SAVEPOINT_UPLOADED_BYTES,
    BatchTask,
    push_task_outcome,
)
from ops.spec.job import find_job
from ops.spec.platform import MonitoringConfig, PlatformConfig, load_platform
from synthetic.generator import write_batch
from tests.monitoring.expressions import (
    PROMETHEUS_SERIES,
    RULES_FILE,
    Expression,
    dashboard_expressions,
    recorded_names,
    rule_expressions,
    variable_metrics,
)
from tests.monitoring.promql import metric_names
from tests.monitoring.servers import Server, exposition_names, prometheus, pushgateway, query
from tests.support.drivers import Driver, caught_up, edit_job, fast_trigger, wait_for
from tests.support.platform import write_conf

pytestmark = [pytest.mark.spark, pytest.mark.prometheus, pytest.mark.xdist_group("monitoring_router_driver")]

JOB = "router"
INPUT_FILES = 3
# Fast enough for a test: scrape and evaluate every second, and StreamwardenJobDown fires after
# 2 s down instead of a minute (a copy of the rule file; nothing else changes).
SCRAPE_INTERVAL = "1s"
JOB_DOWN_FOR = "2s"


@dataclass(frozen=True)
class Monitored:
    platform: PlatformConfig
    driver: Driver
    prometheus: Server
    pushgateway: Server

    def driver_metrics(self) -> str:
        port = find_job(JOB, self.platform.conf_dir).operations.metrics_port
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            return str(response.read().decode())


def with_limits(spec: dict[str, Any]) -> None:
    """A 1 s trigger, and the optional health limits set so the driver exports them too."""
    fast_trigger(spec)
    spec["operations"]["health"].update(max_state_memory_mb=512, max_watermark_lag_seconds=3600)


def rules_with_short_job_down(directory: Path) -> Path:
    document = yaml.safe_load(RULES_FILE.read_text())
    for group in document["groups"]:
        for rule in group["rules"]:
            if rule.get("alert") == "StreamwardenJobDown":
                rule["for"] = JOB_DOWN_FOR
    path = directory / "streamwarden.yml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def prometheus_config(directory: Path, rules: Path, gateway: Server) -> Path:
    """The shipped scrape job for the drivers (file_sd targets written by `warden scrape-targets`'s
    code), plus the Pushgateway, as the team stack scrapes it."""
    config = {
        "global": {"scrape_interval": SCRAPE_INTERVAL, "evaluation_interval": SCRAPE_INTERVAL},
        "rule_files": [str(rules)],
        "scrape_configs": [
            {
                "job_name": DRIVER_SCRAPE_JOB,
                "honor_labels": True,
                "file_sd_configs": [
                    {"files": [str(directory / "targets" / "*.json")], "refresh_interval": "1s"}
                ],
            },
            {
                "job_name": "pushgateway",
                "honor_labels": True,
                "static_configs": [{"targets": [gateway.url.removeprefix("http://")]}],
            },
        ],
    }
    path = directory / "prometheus.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def push_every_batch_task_metric(gateway: Server) -> None:
    """A savepoint that succeeded and a compaction that failed: between them every listed metric."""
    monitoring = MonitoringConfig(pushgateway_url=gateway.url)
    figures = {SAVEPOINT_BATCH: 1.0, SAVEPOINT_TOTAL_BYTES: 2048.0, SAVEPOINT_UPLOADED_BYTES: 512.0}
    assert push_task_outcome(
        monitoring,
        BatchTask.SAVEPOINT,
        JOB,
        succeeded=True,
        duration_seconds=1.5,
        figures={**figures, SAVEPOINT_INTERVAL: 1800.0},
    )
    assert push_task_outcome(monitoring, BatchTask.COMPACTION, JOB, succeeded=False)


@pytest.fixture(scope="module")
def monitored(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Monitored]:
    root = tmp_path_factory.mktemp("monitoring")
    write_conf(root / "conf", root / "runtime")
    platform = load_platform(root / "conf")
    edit_job(platform, JOB, with_limits)
    for seed in range(INPUT_FILES):
        write_batch(platform.landing_root / "events", 200, 0.05, seed)
    ledger = Ledger.open(platform.resolved_ledger_url)
    ledger.ensure_job(JOB, desired_state="running", state="RUNNING", config_version="test")
    driver = Driver(platform, "monitored-1", JOB)
    try:
        write_driver_targets(platform, ledger, root / "targets" / "drivers.json")
        with pushgateway(root / "pushgateway") as gateway:
            push_every_batch_task_metric(gateway)
            config = prometheus_config(root, rules_with_short_job_down(root), gateway)
            with prometheus(config, root / "prometheus") as server:
                wait_for(lambda: caught_up(platform, JOB, INPUT_FILES), 240, f"{JOB} to read its input")
                yield Monitored(platform, driver, server, gateway)
    finally:
        driver.kill()


def present(server: Server, name: str) -> bool:
    return bool(query(server, f'count({{__name__="{name}"}})'))


def test_every_expression_names_only_exported_metrics_and_evaluates(monitored: Monitored) -> None:
    exported = exposition_names(monitored.driver_metrics())
    pushed = {
        name
        for name in exposition_names(monitored.pushgateway.get("/metrics"))
        if name.startswith("streamwarden_")
    }
    assert pushed == set(BATCH_TASK_METRICS), "BATCH_TASK_METRICS lists exactly what the tasks push"
    known = exported | pushed | recorded_names() | PROMETHEUS_SERIES

    expressions: list[Expression] = [*rule_expressions(), *dashboard_expressions(JOB)]
    unknown = {
        f"{expression.where}: {sorted(metric_names(expression.expr) - known)}"
        for expression in expressions
        if metric_names(expression.expr) - known
    }
    assert not unknown, f"names no driver exports and no task pushes (driver exports {sorted(exported)})"
    assert variable_metrics() <= exported

    # Every raw metric the expressions name is in Prometheus, scraped from the driver or the gateway.
    used = set().union(*(metric_names(expression.expr) for expression in expressions))
    scraped = sorted(used - recorded_names() - {"ALERTS"})
    wait_for(
        lambda: all(present(monitored.prometheus, name) for name in scraped),
        60,
        f"Prometheus to hold {scraped}",
    )
    for expression in expressions:
        query(monitored.prometheus, expression.expr)
    # And the recording rules evaluate over them (the watermark lag needs a watermark: the router has none).
    for name in recorded_names() - {"job_name:streamwarden_watermark_lag_seconds"}:
        wait_for(lambda name=name: present(monitored.prometheus, name), 30, f"recorded {name}")


def firing_job_down(server: Server) -> list[dict[str, Any]]:
    alerts: list[dict[str, Any]] = server.get("/api/v1/alerts")["data"]["alerts"]
    return [
        alert
        for alert in alerts
        if alert["labels"]["alertname"] == "StreamwardenJobDown" and alert["state"] == "firing"
    ]


def test_job_down_fires_after_the_driver_is_killed(monitored: Monitored) -> None:
    server = monitored.prometheus
    wait_for(lambda: query(server, f'up{{job_name="{JOB}"}} == 1') != [], 30, f"{JOB} scraped")
    time.sleep(3)  # longer than the rule's `for:`: a running driver does not fire it
    assert firing_job_down(server) == []

    monitored.driver.kill()
    wait_for(lambda: firing_job_down(server) != [], 60, "StreamwardenJobDown to fire")
    (alert,) = firing_job_down(server)
    assert alert["labels"]["job_name"] == JOB and alert["labels"]["job"] == DRIVER_SCRAPE_JOB
    assert alert["labels"]["severity"] == "critical"
    assert alert["annotations"]["runbook_url"] == "ops/runbooks/README.md#streamwardenjobdown"
    assert alert["annotations"]["summary"] == f"Streamwarden job {JOB} is down"
