"""Spark's analyzer on job files without a stream (`jobs.analysis`), and what its stored verdicts do:
a rejected version is an invalid file for everything that reads it, the supervisor included."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyspark
import pytest
from pyspark.sql import SparkSession

from jobs.analysis import analyse, record_verdict
from jobs.catalog import sink_rows
from jobs.runtime import read_job_landing
from ops.alerts import Alert, AlertCenter
from ops.clock import utcnow
from ops.control.supervisor import Supervisor
from ops.exceptions import ConfigError
from ops.ledger.store import Ledger
from ops.spec.analysis import (
    AnalysisVerdict,
    find_valid_job,
    read_verdict,
    unanalysed,
    verdict_path,
    with_verdicts,
)
from ops.spec.job import find_job, load_jobs
from ops.spec.platform import PlatformConfig
from tests.support.drivers import edit_job
from tests.support.fake_backend import FakeBackend

ROUTER_FILE = Path("jobs") / "router.yaml"
NOT_BOOLEAN_INT = "is of type int, not boolean"
UNRESOLVED = "[UNRESOLVED_COLUMN.WITH_SUGGESTION] A column, variable, or function parameter with name `amout`"


def break_routes(spec: dict[str, Any]) -> None:
    # `>>>` parses (an unsigned shift) but is no condition; `amout` is no column.
    spec["pipeline"]["routes"][0]["filter"] = "amount >>> 1"
    spec["pipeline"]["routes"][1]["filter"] = "amout > 0"


def test_the_analysis_finds_what_the_driver_refuses_without_a_stream(
    spark: SparkSession, platform_conf: PlatformConfig
) -> None:
    edit_job(platform_conf, "router", break_routes)
    spec = find_job("router", platform_conf.conf_dir)

    problems = analyse(spark, platform_conf, spec)

    assert list(problems) == ["pipeline.routes.0.filter", "pipeline.routes.1.filter"]
    assert problems["pipeline.routes.0.filter"] == (
        f"route 'purchases' filter 'amount >>> 1' is not a valid boolean expression: {NOT_BOOLEAN_INT}"
    )
    assert problems["pipeline.routes.1.filter"].startswith(
        f"route 'eu_views' filter 'amout > 0' is not a valid boolean expression: {UNRESOLVED}"
    )
    assert spark.streams.active == []
    # The driver plans its query over the landing stream and refuses with the same words.
    with pytest.raises(ConfigError) as refused:
        sink_rows(platform_conf, spec, read_job_landing(spark, platform_conf, spec))
    assert str(refused.value) == (
        f"{platform_conf.conf_dir / ROUTER_FILE}: field 'pipeline.routes.0.filter': "
        f"{problems['pipeline.routes.0.filter']}"
    )


@pytest.mark.parametrize(
    ("job", "edit", "field", "problem"),
    [
        (
            "device_health",
            lambda spec: spec["pipeline"]["data_points"][0].update(red_when="value + 1"),
            "pipeline.data_points.0.red_when",
            "data point 'signal_db' red_when 'value + 1' is not a valid boolean expression: "
            "is of type double, not boolean",
        ),
        (
            "attack_chains",
            lambda spec: spec["pipeline"]["rules"][0].update(then="stage = 'exec'"),
            "pipeline.rules.0.then",
            "rule 'download_then_exec' then \"stage = 'exec'\" is not a valid boolean expression: "
            "[UNRESOLVED_COLUMN.WITH_SUGGESTION] A column, variable, or function parameter with name `stage`",
        ),
        (
            "router",
            lambda spec: spec["operations"].update(preview={"stages": ["parsed", "routed"]}),
            "operations.preview.stages.1",
            "unknown stage 'routed'; this job has ['parsed', 'output']",
        ),
    ],
)
def test_rules_of_other_kinds_and_preview_stages_are_analysed_too(
    job: str, edit, field: str, problem: str, spark: SparkSession, platform_conf: PlatformConfig
) -> None:
    edit_job(platform_conf, job, edit)
    problems = analyse(spark, platform_conf, find_job(job, platform_conf.conf_dir))
    assert list(problems) == [field]
    assert problems[field].startswith(problem)


def test_every_repo_job_passes_the_analysis(spark: SparkSession, platform_conf: PlatformConfig) -> None:
    specs = load_jobs(platform_conf.conf_dir).specs
    assert {name: analyse(spark, platform_conf, spec) for name, spec in specs.items()} == {
        name: {} for name in specs
    }


def test_a_verdict_holds_for_its_file_version_only(
    spark: SparkSession, platform_conf: PlatformConfig
) -> None:
    platform = platform_conf
    edit_job(platform, "router", break_routes)
    rejected = find_job("router", platform.conf_dir)
    assert unanalysed(platform, load_jobs(platform.conf_dir)) == sorted(load_jobs(platform.conf_dir).specs)

    record_verdict(platform, rejected, analyse(spark, platform, rejected))

    checked = with_verdicts(platform, load_jobs(platform.conf_dir))
    assert "router" not in checked.specs and "sessionizer" in checked.specs
    error = checked.errors[platform.conf_dir / ROUTER_FILE]
    assert str(error).startswith(
        f"{platform.conf_dir / ROUTER_FILE}: field 'pipeline.routes.0.filter': route 'purchases' filter "
        f"'amount >>> 1' is not a valid boolean expression: {NOT_BOOLEAN_INT} (and 1 more problem)"
    )
    with pytest.raises(ConfigError, match="route 'purchases' filter 'amount >>> 1'"):
        find_valid_job("router", platform)

    # A changed file has no verdict until it is analysed again: it counts as valid meanwhile.
    edit_job(platform, "router", lambda spec: spec["pipeline"]["routes"][0].update(filter="amount > 1"))
    fixed = find_job("router", platform.conf_dir)
    assert read_verdict(platform, fixed) is None
    assert "router" in with_verdicts(platform, load_jobs(platform.conf_dir)).specs
    assert "router" in unanalysed(platform, load_jobs(platform.conf_dir))
    assert find_valid_job("router", platform) == fixed


def test_the_supervisor_launches_nothing_from_a_rejected_version_and_pages_once(
    spark: SparkSession, platform_conf: PlatformConfig, ledger: Ledger
) -> None:
    edit_job(platform_conf, "router", break_routes)
    spec = find_job("router", platform_conf.conf_dir)
    record_verdict(platform_conf, spec, analyse(spark, platform_conf, spec))
    backend = FakeBackend(platform_conf, utcnow)
    alerts = AlertCenter(ledger, platform_conf.slack)
    supervisor = Supervisor(platform_conf, ledger, backend, alerts)

    first, second = supervisor.reconcile("router"), supervisor.reconcile("router")

    assert backend.launches == 0 and ledger.runs("router") == []
    assert (first.state, second.state) == ("INVALID", "INVALID")
    assert "field 'pipeline.routes.0.filter'" in first.reason and NOT_BOOLEAN_INT in first.reason
    assert supervisor.attention("router") is not None and supervisor.attention("router").startswith(
        "spec invalid"
    )
    [incident] = alerts.open_incidents("router")
    assert (
        incident.kind == "config_invalid"
        and "route 'purchases' filter 'amount >>> 1'" in incident.alert.reason
    )


def test_a_verdict_by_another_spark_version_does_not_count(platform_conf: PlatformConfig) -> None:
    spec = find_job("router", platform_conf.conf_dir)
    path = verdict_path(platform_conf, "router")
    path.parent.mkdir(parents=True, exist_ok=True)
    for spark_version, counts in (("3.5.0", False), (pyspark.__version__, True)):
        verdict = AnalysisVerdict(
            job="router",
            config_version=spec.config_version,
            spark_version=spark_version,
            analysed_at=datetime(2026, 11, 24, tzinfo=UTC),
            problems={
                "pipeline.routes.0.filter": "route 'purchases' filter 'x' is not a valid boolean expression"
            },
        )
        path.write_text(verdict.model_dump_json())
        assert (read_verdict(platform_conf, spec) == verdict) is counts
        assert (
            "router" in with_verdicts(platform_conf, load_jobs(platform_conf.conf_dir)).specs
        ) is not counts


def test_a_version_its_driver_already_refused_is_not_paged_twice(
    spark: SparkSession, platform_conf: PlatformConfig, ledger: Ledger
) -> None:
    edit_job(platform_conf, "router", break_routes)
    spec = find_job("router", platform_conf.conf_dir)
    alerts = AlertCenter(ledger, platform_conf.slack)
    # A driver launched before any analysis refused the version: the supervisor paged spec_rejected.
    alerts.raise_alert(
        Alert(
            job="router",
            kind="spec_rejected",
            severity="critical",
            state="FAILED",
            reason="failed: config: query terminated (ConfigError: ...)",
            last_batch=None,
            run_url=None,
        )
    )
    record_verdict(platform_conf, spec, analyse(spark, platform_conf, spec))
    supervisor = Supervisor(platform_conf, ledger, FakeBackend(platform_conf, utcnow), alerts)

    problems = supervisor.check_job_files()

    assert [problem.split(": field ")[1][:26] for problem in problems] == ["'pipeline.routes.0.filter'"]
    assert [incident.kind for incident in alerts.open_incidents("router")] == ["spec_rejected"]
