"""A fleet's DAG file: a few hundred jobs still parse within Airflow's own import timeout.

`dags/streamwarden.py` builds a supervision DAG per job file (and the forms list every job), so its
parse grows with the fleet; the dag-processor gives up on a file after `core.dagbag_import_timeout`
(30 s by default). This parses it as the dag-processor does, in a fresh interpreter, with
`FLEET` router jobs added to the platform's own, and checks that every job's DAG is there, nothing
failed to import, and the parse took less than that timeout on this machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml
from airflow.configuration import conf

from ops.spec.platform import CONF_DIR_ENV, PlatformConfig

DAGS = Path(__file__).resolve().parents[2] / "dags"
FLEET = 300
FIRST_PORT = 20_000

PARSE = """
import json, sys
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder=sys.argv[1])
errors = {path: str(error)[:500] for path, error in bag.import_errors.items()}
print(json.dumps({"dags": sorted(bag.dag_ids), "errors": errors}))
"""


def test_a_few_hundred_jobs_parse_within_airflows_import_timeout(platform_conf: PlatformConfig) -> None:
    jobs = platform_conf.conf_dir / "jobs"
    router = yaml.safe_load((jobs / "router.yaml").read_text())
    for number in range(FLEET):
        job = {**router, "name": f"fleet_{number:03d}"}
        job["operations"] = {**router["operations"], "metrics_port": FIRST_PORT + number}
        (jobs / f"fleet_{number:03d}.yaml").write_text(yaml.safe_dump(job, sort_keys=False))
    timeout = conf.getfloat("core", "dagbag_import_timeout")

    started = time.monotonic()
    parsed = subprocess.run(
        [sys.executable, "-c", PARSE, str(DAGS)],
        env={**os.environ, CONF_DIR_ENV: str(platform_conf.conf_dir)},
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    seconds = time.monotonic() - started

    result = json.loads(parsed.stdout.splitlines()[-1])
    assert result["errors"] == {}
    supervised = {dag for dag in result["dags"] if dag.startswith("warden_supervise_fleet_")}
    assert len(supervised) == FLEET
    # The whole interpreter (Airflow's import included) within what the dag-processor allows the
    # file alone.
    print(
        f"{FLEET} more jobs: {len(result['dags'])} DAGs parsed in {seconds:.1f} s (timeout {timeout:.0f} s)"
    )
    assert seconds < timeout
