"""How the backfill application is submitted, light enough for a DAG file's parse (no boto3,
pyarrow or pyspark): the `warden_backfill` DAG's SparkSubmitOperators and `warden backfill` both
start `jobs/backfill.py`, then `ops/warehouse/publish.py` (the publish), with these arguments
and this environment."""

from __future__ import annotations

import sys
from pathlib import Path

from ops.driver.backfill import BackfillRun
from ops.spec.platform import CONF_DIR_ENV

APPLICATION_MODULE = "jobs.backfill"
# The application that publishes a finished run into the warehouse table (or diffs a candidate).
PUBLISH_MODULE = "ops.warehouse.publish"
# The repository the application is imported from (a platform's conf dir may live elsewhere).
REPO_ROOT = Path(__file__).resolve().parents[2]


def application_file() -> Path:
    """The application file spark-submit runs (`jobs/backfill.py` in the repository)."""
    return REPO_ROOT / "jobs" / "backfill.py"


def publish_application_file() -> Path:
    """The publish application file spark-submit runs (`ops/warehouse/publish.py`)."""
    return REPO_ROOT / "ops" / "warehouse" / "publish.py"


def submit_arguments(run: BackfillRun) -> list[str]:
    """The arguments of either application (`application_file`, `publish_application_file`)."""
    return ["--run-dir", str(run.root)]


def application_env(conf_dir: Path) -> dict[str, str]:
    """What the application's process needs: the conf dir, the repository on the import path and
    the venv's python for Spark's Python workers."""
    return {
        CONF_DIR_ENV: str(conf_dir),
        "PYTHONPATH": str(REPO_ROOT),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }
