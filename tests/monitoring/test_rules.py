"""The alert rules: valid, unit-tested by promtool (a firing and a quiet case each), labelled with a
severity, linked to a runbook section that exists; the embedded Prometheus config and its targets."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest
import yaml

from ops.cli import main
from ops.ledger.store import Ledger
from ops.prometheus_targets import DRIVER_SCRAPE_JOB, write_driver_targets
from ops.spec.job import find_job
from ops.spec.platform import PlatformConfig
from tests.monitoring.expressions import (
    PROMETHEUS_CONF,
    RULE_TESTS,
    RULES_FILE,
    RUNBOOK,
    alert_rules,
    recorded_names,
)
from tests.monitoring.servers import PROMTOOL

SEVERITIES = {"critical", "warning"}
RUNBOOK_LINK = re.compile(r"^ops/runbooks/(?P<file>[\w.-]+\.md)#(?P<anchor>[\w-]+)$")


def promtool(*args: str) -> str:
    result = subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=120)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    return output


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: lower case, punctuation dropped, spaces to `-`."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.prometheus
def test_rules_are_valid_and_their_unit_tests_pass() -> None:
    assert "SUCCESS" in promtool("check", "rules", str(RULES_FILE))
    assert RULE_TESTS, "no promtool unit tests"
    output = promtool("test", "rules", *map(str, RULE_TESTS))
    assert "FAILED" not in output


def test_every_alert_has_a_firing_and_a_quiet_case_in_the_unit_tests() -> None:
    cases: dict[str, set[str]] = defaultdict(set)
    for path in RULE_TESTS:
        for test in yaml.safe_load(path.read_text())["tests"]:
            for check in test.get("alert_rule_test", []):
                cases[check["alertname"]].add("fires" if check.get("exp_alerts") else "quiet")
    alerts = {rule["alert"] for rule in alert_rules()}
    assert set(cases) <= alerts, f"tests of alerts that do not exist: {set(cases) - alerts}"
    assert {alert: cases[alert] for alert in alerts} == {alert: {"fires", "quiet"} for alert in alerts}


def test_every_recording_rule_has_an_expression_test() -> None:
    tested = {
        check["expr"]
        for path in RULE_TESTS
        for test in yaml.safe_load(path.read_text())["tests"]
        for check in test.get("promql_expr_test", [])
    }
    assert recorded_names() <= tested, f"untested: {recorded_names() - tested}"


def test_every_alert_has_a_severity_a_summary_and_a_runbook_section() -> None:
    headings = [line.lstrip("#").strip() for line in RUNBOOK.read_text().splitlines() if line.startswith("#")]
    anchors = {github_anchor(heading) for heading in headings}
    for rule in alert_rules():
        name = rule["alert"]
        assert rule["labels"]["severity"] in SEVERITIES, name
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], name
        link = RUNBOOK_LINK.match(rule["annotations"]["runbook_url"])
        assert link, f"{name}: runbook_url {rule['annotations']['runbook_url']!r}"
        assert (RUNBOOK.parent / link["file"]) == RUNBOOK
        assert link["anchor"] in anchors, f"{name}: no section #{link['anchor']} in {RUNBOOK}"
        assert link["anchor"] == github_anchor(name), f"{name}: its section is named after it"


def test_recorded_series_are_named_level_metric_operations() -> None:
    """Recorded series follow Prometheus's `level:metric:operations`, so none can be taken for a
    metric a driver exports."""
    for name in recorded_names():
        level, metric, *_ = name.split(":")
        assert level == "job_name" and metric.startswith("streamwarden_"), name


@pytest.mark.prometheus
def test_embedded_prometheus_config_scrapes_the_targets_warden_writes(
    platform_conf: PlatformConfig, ledger: Ledger, tmp_path: Path
) -> None:
    """The shipped prometheus.yml, in a copy of conf/prometheus, with the targets file `warden
    scrape-targets` writes: promtool accepts it and discovers the running job with its job_name."""
    conf = tmp_path / "prometheus"
    shutil.copytree(PROMETHEUS_CONF, conf)
    router = find_job("router", platform_conf.conf_dir)
    ledger.ensure_job("router", desired_state="running", state="RUNNING", config_version="v")
    ledger.ensure_job("sessionizer", desired_state="suspended", state="SUSPENDED", config_version="v")

    targets = write_driver_targets(platform_conf, ledger, conf / "targets" / "drivers.json")
    expected = [
        {"targets": [f"127.0.0.1:{router.operations.metrics_port}"], "labels": {"job_name": "router"}}
    ]
    assert targets == expected
    assert json.loads((conf / "targets" / "drivers.json").read_text()) == expected

    assert "SUCCESS" in promtool("check", "config", str(conf / "prometheus.yml"))
    discovered = json.loads(
        promtool(
            "check", "service-discovery", "--timeout=5s", str(conf / "prometheus.yml"), DRIVER_SCRAPE_JOB
        ).split("\n]", 1)[0]
        + "\n]"
    )
    assert [target["labels"]["instance"] for target in discovered] == expected[0]["targets"]
    assert [target["labels"]["job_name"] for target in discovered] == ["router"]
    assert [target["labels"]["job"] for target in discovered] == [DRIVER_SCRAPE_JOB]


def test_warden_scrape_targets_writes_the_file(
    platform_conf: PlatformConfig, ledger: Ledger, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger.ensure_job("router", desired_state="running", state="RUNNING", config_version="v")
    path = tmp_path / "targets" / "drivers.json"
    assert main(["scrape-targets", str(path)]) == 0
    assert capsys.readouterr().out == f"{path}: 1 driver targets\n"
    port = find_job("router", platform_conf.conf_dir).operations.metrics_port
    assert json.loads(path.read_text())[0]["targets"] == [f"127.0.0.1:{port}"]
