"""A team's job whose code fails, with real drivers. A UDF that raises on one row fails its batch,
the page says where in the team's code and what, the job restarts within its budget and is
suspended as a storm rather than looping; once the code is fixed and the job resumed, the failed
batch runs again and every row is in the sink once. Code that imports a package the platform
lacks is refused by the driver before its query starts: the job is FAILED with the named error,
pages once and is not relaunched until its code changes."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from ops.control.supervisor import Supervisor, stop_all_jobs
from ops.ledger.store import Ledger
from ops.spec.platform import PlatformConfig
from synthetic.generator import DEFAULT_START, make_event, write_batch
from tests.support.drivers import caught_up, wait_for
from tests.support.slack import SlackReceiver
from tests.support.team_jobs import (
    STRICT_RULES_MODULE,
    TEAM_JOB,
    team_job_spec,
    write_team_code,
    write_team_job,
)


@pytest.mark.spark
def test_a_udf_raising_on_one_row_pages_its_line_suspends_as_a_storm_and_loses_no_row_once_fixed(
    platform_conf: PlatformConfig,
    ledger: Ledger,
    slack_webhook: SlackReceiver,
    spark: SparkSession,
    tmp_path: Path,
) -> None:
    platform = platform_conf
    code = write_team_code(tmp_path / "team-code", rules=STRICT_RULES_MODULE)
    spec = team_job_spec(code)
    spec["operations"]["restart"] = {"initial_backoff_seconds": 1, "budget": 1}
    write_team_job(platform, spec)
    landing = platform.landing_root / "events"
    batches = [write_batch(landing, 300, 0.0, seed=1)]
    supervisor = Supervisor.for_platform(platform)

    def reconciled_until(state: str) -> bool:
        return supervisor.reconcile(TEAM_JOB).state == state

    try:
        wait_for(lambda: reconciled_until("RUNNING"), 300, "the team's job RUNNING")
        wait_for(lambda: caught_up(platform, TEAM_JOB, files=1), 120, "the first file scored")

        # One purchase with an amount the team's UDF refuses, in a file of its own.
        poison = {**make_event(random.Random(7), DEFAULT_START), "event_id": "poison"}
        poison.update(event_type="purchase", amount=123456.0)
        (landing / "events-poison.json").write_text(json.dumps(poison) + "\n")
        wait_for(lambda: reconciled_until("SUSPENDED"), 300, "the restart storm")

        pages = [message["text"] for message in slack_webhook.messages]
        assert any('fraud/rules.py", line 9, in size_of' in page for page in pages), pages
        assert any("ValueError: amount 123456.0 is out of range" in page for page in pages), pages
        assert any("restart storm" in page for page in pages), pages
        failed = [
            run for run in ledger.runs(TEAM_JOB) if run.exit_reason and run.exit_reason.startswith("failed")
        ]
        assert len(failed) == 2

        # The team fixes its rules: a new config version, and the job resumed runs the failed batch.
        write_team_code(code)
        batches.append(write_batch(landing, 300, 0.0, seed=2))
        supervisor.request(TEAM_JOB, "resume", "the rules accept large amounts")
        wait_for(lambda: reconciled_until("RUNNING"), 300, "the fixed job RUNNING")
        wait_for(lambda: caught_up(platform, TEAM_JOB, files=3), 120, "every file scored")
    finally:
        stop_all_jobs(platform)

    rows = spark.read.parquet(str(platform.lake_root / TEAM_JOB)).collect()
    purchases = [e["event_id"] for b in batches for e in b.events if e["event_type"] == "purchase"]
    assert Counter(row["event_id"] for row in rows) == Counter([*purchases, "poison"])
    assert ledger.runs(TEAM_JOB)[0].config_version != failed[0].config_version


@pytest.mark.spark
def test_code_importing_a_package_the_platform_lacks_fails_the_job_once_with_the_package_named(
    platform_conf: PlatformConfig, ledger: Ledger, slack_webhook: SlackReceiver, tmp_path: Path
) -> None:
    platform = platform_conf
    code = write_team_code(tmp_path / "team-code")
    scoring = code / "fraud" / "scoring.py"
    scoring.write_text("import fraudlib_unknown\n" + scoring.read_text())
    write_team_job(platform, team_job_spec(code))
    supervisor = Supervisor.for_platform(platform)

    try:
        wait_for(lambda: supervisor.reconcile(TEAM_JOB).state == "FAILED", 300, "the rejected spec")
        for _ in range(3):
            assert supervisor.reconcile(TEAM_JOB).state == "FAILED"
    finally:
        stop_all_jobs(platform)

    (run,) = ledger.runs(TEAM_JOB)
    assert run.exit_reason is not None and "fraudlib_unknown" in run.exit_reason, run.exit_reason
    pages = [message["text"] for message in slack_webhook.messages]
    assert len([page for page in pages if "spec rejected" in page]) == 1, pages
    assert any(
        "imports 'fraudlib_unknown', which the platform's Python environment does not have" in page
        for page in pages
    ), pages
