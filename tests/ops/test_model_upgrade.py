"""A new model version deployed through `warden upgrade` under a real supervisor: real drivers of
the shipped scoring example (`jobs.purchase_risk`), its model versions in a real S3 server.

The dry run computes both versions' scores of the savepoint's newest input on the savepoint's
copy (`operations.upgrade.output_check`): a version whose scores moved beyond `max_shift` is
refused before the running version stops; a close one is deployed, and the purchases after it
carry its version.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from ops.control.supervisor import Supervisor, stop_all_jobs
from ops.exceptions import UpgradeError
from ops.ledger.store import Ledger
from ops.recovery.upgrade import upgrade
from ops.spec.job import find_job
from ops.spec.platform import PlatformConfig
from synthetic.generator import write_batch
from tests.support.drivers import caught_up, edited_job_file, wait_for
from tests.support.purchase_risk import CLOSE_BIAS, JOB, SHIFTED_BIAS, install_risk_job, push_risk_model


def test_a_model_whose_scores_moved_is_refused_before_the_running_version_stops_and_a_close_one_deploys(
    platform_with_s3: PlatformConfig, ledger: Ledger, spark: SparkSession, tmp_path: Path
) -> None:
    platform = platform_with_s3
    models = tmp_path / "models"
    push_risk_model(platform, models)
    assert push_risk_model(platform, models, SHIFTED_BIAS).version == 2
    assert push_risk_model(platform, models, CLOSE_BIAS).version == 3
    install_risk_job(platform, model_version=1)
    landing = platform.landing_root / "events"
    for seed in range(2):
        write_batch(landing, 300, 0.0, seed)
    supervisor = Supervisor.for_platform(platform)

    def pinning(version: int) -> Path:
        def edit(spec: dict[str, Any]) -> None:
            spec["pipeline"]["models"]["risk"]["version"] = version

        return edited_job_file(platform, JOB, edit, tmp_path / f"{JOB}-model-{version}.yaml")

    try:
        wait_for(lambda: supervisor.reconcile(JOB).state == "RUNNING", 300, "version 1 RUNNING")
        wait_for(lambda: caught_up(platform, JOB, files=2), 180, "version 1's files")
        running = ledger.current_run(JOB)
        assert running is not None

        with pytest.raises(UpgradeError, match=r"'score' moved by 0\.\d+ .* more than .*max_shift 0\.2"):
            upgrade(supervisor, JOB, pinning(2), reason="retrained", readiness_timeout=60)
        still = ledger.current_run(JOB)
        assert still is not None and still.run_id == running.run_id
        assert supervisor.backend.is_alive(still), "the running version must not be stopped"
        assert find_job(JOB, platform.conf_dir).pipeline.models["risk"].version == 1
        outcome = ledger.decisions(JOB, action="upgrade")[0].outcome
        assert outcome is not None and outcome.startswith("refused: ")

        def feed_the_new_version() -> None:
            wait_for(
                lambda: (ledger.current_run(JOB) or running).run_id != running.run_id, 120, "the new run"
            )
            write_batch(landing, 300, 0.0, 2)

        feeder = threading.Thread(target=feed_the_new_version)
        feeder.start()
        result = upgrade(supervisor, JOB, pinning(3), reason="recalibrated", readiness_timeout=180)
        feeder.join()
        assert result.outcome == "upgraded", result.line()
        wait_for(lambda: caught_up(platform, JOB, files=3), 180, "version 3's file")
    finally:
        stop_all_jobs(platform)

    # The purchases of the file that arrived after the switch were scored by version 3, every
    # earlier one by version 1.
    after_switch = {
        json.loads(line)["event_id"] for line in (landing / "events-2.json").read_text().splitlines()
    }
    sink = spark.read.parquet(str(platform.lake_root / "purchase_risk")).where("dead_letter_reason IS NULL")
    versions = {(row["event_id"] in after_switch, row["model_version"]) for row in sink.collect()}
    assert versions == {(False, 1), (True, 3)}
