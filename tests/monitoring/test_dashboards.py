"""The Grafana dashboards are well-formed dashboard JSON (no Grafana here to load them): ids, layout,
queries, the job page's `job` variable, and PromQL that Prometheus's own parser accepts."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from tests.monitoring.expressions import DASHBOARDS, dashboard, dashboard_expressions, panels
from tests.monitoring.servers import PROMTOOL

GRID_COLUMNS = 24
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


def test_the_fleet_and_job_dashboards_are_shipped() -> None:
    assert sorted(path.name for path in DASHBOARDS) == ["fleet.json", "job.json"]
    uids = [dashboard(path)["uid"] for path in DASHBOARDS]
    assert len(set(uids)) == len(uids)


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda path: path.name)
def test_dashboard_structure(path: Path) -> None:
    board = dashboard(path)
    assert board["title"] and board["uid"] and isinstance(board["schemaVersion"], int)
    variables = {variable["name"]: variable for variable in board["templating"]["list"]}
    assert (
        variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    )
    all_panels = panels(board)
    ids = [panel["id"] for panel in all_panels]
    assert len(set(ids)) == len(ids), "panel ids are unique"
    occupied: set[tuple[int, int]] = set()
    for panel in all_panels:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["w"] > 0 and grid["x"] + grid["w"] <= GRID_COLUMNS, panel["title"]
        cells = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not cells & occupied, f"{panel['title']} overlaps another panel"
        occupied |= cells
        assert panel["datasource"] == DATASOURCE, panel["title"]
        targets = panel["targets"]
        assert targets and all(target["expr"].strip() for target in targets), panel["title"]
        ref_ids = [target["refId"] for target in targets]
        assert len(set(ref_ids)) == len(ref_ids), panel["title"]
        assert all(target["datasource"] == DATASOURCE for target in targets), panel["title"]
        if panel["type"] == "table":
            # Instant queries as tables: one row per job (and task), its labels as columns.
            assert all(t.get("format") == "table" and t.get("instant") for t in targets), panel["title"]


def test_the_job_page_is_driven_by_its_job_variable() -> None:
    board = dashboard(next(path for path in DASHBOARDS if path.name == "job.json"))
    variable = next(v for v in board["templating"]["list"] if v["name"] == "job")
    assert variable["type"] == "query" and variable["datasource"] == DATASOURCE
    assert variable["definition"] == variable["query"]["query"]
    assert variable["definition"].startswith("label_values(") and variable["definition"].endswith(
        ", job_name)"
    )
    for panel in panels(board):
        for target in panel["targets"]:
            assert 'job_name="$job"' in target["expr"], f"{panel['title']}: {target['expr']}"


def test_the_fleet_page_shows_every_job() -> None:
    board = dashboard(next(path for path in DASHBOARDS if path.name == "fleet.json"))
    for panel in panels(board):
        for target in panel["targets"]:
            assert "$job" not in target["expr"], panel["title"]


@pytest.mark.prometheus
def test_every_dashboard_query_parses(tmp_path: Path) -> None:
    """promtool parses each query as the expression of a recording rule: Prometheus's own parser."""
    expressions = dashboard_expressions("router")
    rule_file = tmp_path / "dashboards.yml"
    rule_file.write_text(
        yaml.safe_dump(
            {
                "groups": [
                    {
                        "name": "dashboards",
                        "rules": [
                            {"record": f"dashboard:query_{index}:check", "expr": expression.expr}
                            for index, expression in enumerate(expressions)
                        ],
                    }
                ]
            }
        )
    )
    result = subprocess.run([PROMTOOL, "check", "rules", str(rule_file)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(expressions)} rules found" in result.stdout
