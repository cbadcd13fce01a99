"""The PromQL of the repo: the rules in conf/prometheus/rules and the Grafana dashboards."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS_CONF = REPO_ROOT / "conf" / "prometheus"
RULES_FILE = PROMETHEUS_CONF / "rules" / "streamwarden.yml"
RULE_TESTS = sorted((PROMETHEUS_CONF / "rules" / "tests").glob("*.yml"))
DASHBOARDS = sorted((REPO_ROOT / "conf" / "grafana" / "dashboards").glob("*.json"))
RUNBOOK = REPO_ROOT / "ops" / "runbooks" / "README.md"
# Series Prometheus makes itself: the scrape health of each target, and the alerts' state.
PROMETHEUS_SERIES = frozenset({"up", "ALERTS"})
# Grafana's variables, as a dashboard would send them for the job under test.
_LABEL_VALUES = re.compile(r"^label_values\((?P<metric>[A-Za-z_:][A-Za-z0-9_:]*),\s*(?P<label>\w+)\)$")


@dataclass(frozen=True)
class Expression:
    """One PromQL expression and where it is (rule name, or dashboard and panel)."""

    where: str
    expr: str


def rules() -> list[dict[str, Any]]:
    document = yaml.safe_load(RULES_FILE.read_text())
    return [rule for group in document["groups"] for rule in group["rules"]]


def alert_rules() -> list[dict[str, Any]]:
    return [rule for rule in rules() if "alert" in rule]


def recorded_names() -> set[str]:
    return {rule["record"] for rule in rules() if "record" in rule}


def rule_expressions() -> list[Expression]:
    return [Expression(rule.get("alert") or rule["record"], rule["expr"]) for rule in rules()]


def dashboard(path: Path) -> dict[str, Any]:
    board: dict[str, Any] = json.loads(path.read_text())
    return board


def panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel, those inside collapsed rows included."""
    found = []
    for panel in board["panels"]:
        found.append(panel)
        found.extend(panel.get("panels", []))
    return found


def dashboard_expressions(job: str) -> list[Expression]:
    """Every panel query of every dashboard, with Grafana's variables filled in for `job`."""
    return [
        Expression(f"{path.name}: {panel['title']}", grafana_to_promql(target["expr"], job))
        for path in DASHBOARDS
        for panel in panels(dashboard(path))
        for target in panel.get("targets", [])
    ]


def variable_metrics() -> set[str]:
    """The metrics the dashboards' `label_values(metric, label)` variables list values of."""
    names = set()
    for path in DASHBOARDS:
        for variable in dashboard(path)["templating"]["list"]:
            if variable["type"] == "query":
                match = _LABEL_VALUES.match(variable["definition"])
                assert match, f"{path.name}: variable {variable['name']} is not label_values(metric, label)"
                names.add(match["metric"])
    return names


def grafana_to_promql(expr: str, job: str) -> str:
    """`expr` as Grafana sends it with `$job` = `job` and its interval variables at one minute."""
    for variable, value in (("$__rate_interval", "1m"), ("$__interval", "1m"), ("$job", job)):
        expr = expr.replace(variable, value)
    assert "$" not in expr.replace('"$1"', ""), f"an unknown Grafana variable in {expr!r}"
    return expr
