"""The walls hold at run time: what the DAG parser, `warden status` and a Spark driver load.

ruff's banned-import rules see one file at a time; these tests import the real entry points in a
fresh interpreter each and look at `sys.modules` when it exits, so a wall broken through a chain
of imports shows up too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ops.ledger.store import Ledger
from ops.spec.platform import PlatformConfig

REPO = Path(__file__).resolve().parents[1]

# Prepended to each probe: at interpreter exit, write the names of every loaded module as JSON to
# the file named by WARDEN_MODULES_OUT.
RECORD_MODULES_AT_EXIT = """
import atexit, json, os, sys

def _record_modules():
    with open(os.environ["WARDEN_MODULES_OUT"], "w") as out:
        json.dump(sorted(sys.modules), out)

atexit.register(_record_modules)
"""

PARSE_DAGS = """
from airflow.dag_processing.dagbag import DagBag

bag = DagBag(dag_folder=sys.argv[1])
print(json.dumps({"dag_ids": sorted(bag.dag_ids), "import_errors": bag.import_errors}))
"""

# `python -m ops.cli status`, as the `warden` entry point runs it.
WARDEN_STATUS = """
import runpy

sys.argv = ["warden", "status"]
runpy.run_module("ops.cli", run_name="__main__", alter_sys=True)
"""


def run_probe(code: str, *args: str, out: Path) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run `code` in a fresh interpreter; its result and the modules loaded when it exited."""
    env = os.environ | {"WARDEN_MODULES_OUT": str(out)}
    result = subprocess.run(
        [sys.executable, "-c", RECORD_MODULES_AT_EXIT + code, *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return result, set(json.loads(out.read_text()))


def loaded(modules: set[str], *packages: str) -> set[str]:
    """The given packages (or their submodules) that are among `modules`."""
    return {
        package for package in packages if any(m == package or m.startswith(package + ".") for m in modules)
    }


def test_parsing_the_dags_loads_no_pyspark(
    airflow_db: Path, platform_conf: PlatformConfig, tmp_path: Path
) -> None:
    result, modules = run_probe(PARSE_DAGS, str(REPO / "dags"), out=tmp_path / "modules.json")
    parsed = json.loads(result.stdout.strip().splitlines()[-1])
    assert parsed["import_errors"] == {}
    assert "warden_supervise_router" in parsed["dag_ids"]
    # The probe does see the DAG factory, so an empty answer below is not for want of looking.
    assert "streamwarden_airflow.dag_factory" in modules
    # The clients only an action needs (S3, Slack, Parquet, migrations) load when it runs.
    assert loaded(modules, "pyspark", "boto3", "botocore", "pyarrow", "slack_sdk", "alembic") == set()


def test_warden_status_loads_the_ledger_and_nothing_heavier(ledger: Ledger, tmp_path: Path) -> None:
    # The ledger exists and is at the newest revision, as on every call after the first.
    result, modules = run_probe(WARDEN_STATUS, out=tmp_path / "modules.json")
    assert result.stdout.splitlines()[0].split()[:2] == ["job", "state"]
    # ops.cli itself runs as __main__; it reads the ledger and observes jobs through these.
    assert {"ops.ledger.store", "ops.control.health", "sqlalchemy"} <= modules
    walls = loaded(
        modules,
        "pyspark",
        "airflow",
        "boto3",
        "botocore",
        "pyarrow",
        "slack_sdk",
        "alembic",
        "ops.control.supervisor",
        "ops.savepoints",
        "ops.recovery",
        "ops.embedded",
    )
    assert walls == set()


def test_a_spark_driver_loads_no_control_plane(tmp_path: Path) -> None:
    _, modules = run_probe("import jobs.runner", out=tmp_path / "modules.json")
    assert loaded(modules, "pyspark", "ops.driver") == {"pyspark", "ops.driver"}
    walls = loaded(
        modules,
        "sqlalchemy",
        "alembic",
        "boto3",
        "botocore",
        "slack_sdk",
        "airflow",
        "ops.control",
        "ops.alerts",
        "ops.ledger",
        "ops.savepoints",
        "ops.recovery",
        "ops.embedded",
        "ops.cli",
        "ops.s3",
    )
    assert walls == set()
