"""Kappa+ backfills on real Spark and a real S3 server: the job's own query over the archive.

The reference is the streaming job itself, run live: its real query (`jobs.runner.plan_job`) over
the same landing files, delivered in the backfill's micro-batches (the arrival hours its byte
budget groups, or the slices of an hour it splits) and read with an available-now trigger after
each, so the watermark moves at the same points. A backfill of the archived hours must give that
output row for row, late-data decisions included (each scenario has events that arrive a day
late), at the default budget (the test's three hours are one batch) and at one that splits an
hour. A team's jobs too, their code outside the repository: the stateless python job, the
windowed one and the SQL join.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from jobs.backfill import without_file_limit
from jobs.runner import plan_job
from jobs.runtime import with_trigger
from ops import archive
from ops.backfill import run as backfill_run
from ops.backfill.bootstrap import bootstrap_savepoint
from ops.backfill.plan import BackfillRequest, fetch_partitions, plan_backfill, prepare_run
from ops.backfill.run import run_backfill
from ops.backfill.submit import application_env, submit_arguments
from ops.cli import main
from ops.control.supervisor import Supervisor
from ops.driver.backfill import BackfillPlan, BackfillRun
from ops.driver.session import state_conf
from ops.event_times import stored_span, time_key
from ops.exceptions import BackfillError
from ops.ledger.store import Ledger
from ops.pushgateway import LAST_DURATION, LAST_FAILURE, LAST_SUCCESS, BatchTask
from ops.recovery.rewind import rewind_job
from ops.s3 import platform_client
from ops.spec.job import JobSpec, find_job
from ops.spec.paths import JobPaths
from ops.spec.platform import PlatformConfig, StorageConfig, load_platform
from synthetic.generator import make_event
from synthetic.scenarios import (
    impressions_plays_late,
    impressions_plays_scenario,
    sessionizer_late,
    sessionizer_scenario,
    write_json_lines,
)
from tests.monitoring.servers import pushed, pushgateway
from tests.support.backfill import run_in_test_processes
from tests.support.drivers import edit_job, edited_job_file
from tests.support.secrets import configure_platform
from tests.support.team_jobs import (
    SQL_JOB,
    TEAM_JOB,
    WINDOWED_JOB,
    install_team_job,
    install_windowed_job,
    sql_job_spec,
    write_team_job,
)
from tests.support.warehouse import query_table

# The arrival hours of the test input: the archive's clock, unrelated to the events' own times.
FIRST_ARRIVAL = datetime(2026, 11, 20, 6, tzinfo=UTC)
HOURS = 3
NOW = FIRST_ARRIVAL + timedelta(hours=HOURS + 1)
FILE_INDEX = re.compile(r"-(\d+)\.json$")


@pytest.fixture
def platform(platform_with_s3: PlatformConfig) -> PlatformConfig:
    """The throwaway platform with an archive prefix of its own on the shared S3 server."""
    path = platform_with_s3.conf_dir / "platform.yaml"
    settings = yaml.safe_load(path.read_text())
    settings["archive"] = {"prefix": f"archive-{uuid.uuid4().hex[:8]}", "seal_after_minutes": 10}
    path.write_text(yaml.safe_dump(settings))
    return load_platform(platform_with_s3.conf_dir)


@pytest.fixture
def warehouse(platform: PlatformConfig, warehouse_platform: PlatformConfig) -> PlatformConfig:
    """`platform` with a warehouse: its metastore a fresh database on the worker's PostgreSQL."""
    return load_platform(platform.conf_dir)


def router_routes(*names: str) -> Callable[[dict[str, Any]], None]:
    """A router spec edit keeping only the routes named (and the dead letters): fewer partitions
    to audit."""

    def edit(spec: dict[str, Any]) -> None:
        spec["pipeline"]["routes"] = [r for r in spec["pipeline"]["routes"] if r["name"] in names]

    return edit


def published_rows(platform: PlatformConfig) -> Counter[tuple[str, ...]]:
    """Every row the warehouse table shows, as strings."""
    return Counter(
        tuple(str(v) for v in row.values()) for row in query_table(platform, "SELECT * FROM warehouse.router")
    )


def router_input(landing_root: Path, seed: int) -> list[Path]:
    """Product events in `events/`: one file per arrival hour, events timed within their hour (and a
    late file a day behind, arriving in the last hour)."""
    rng = random.Random(seed)
    start = datetime(2025, 3, 1, 22, tzinfo=UTC)
    paths = []
    for hour in range(HOURS):
        moments = sorted(start + timedelta(hours=hour, seconds=rng.uniform(0, 3599)) for _ in range(300))
        lines = [json.dumps(make_event(rng, moment)) for moment in moments] + ["{not json"]
        paths.append(write_json_lines(landing_root / "events", f"events-{seed}-{hour}.json", lines))
    late = [json.dumps(make_event(rng, start - timedelta(days=1))) for _ in range(5)]
    paths.append(write_json_lines(landing_root / "events", f"events-{seed}-late.json", late))
    return paths


def sessionizer_input(landing_root: Path, seed: int) -> list[Path]:
    sessionizer_late(landing_root, seed)
    return sessionizer_scenario(landing_root, 900, seed)


def impressions_plays_input(landing_root: Path, seed: int) -> list[Path]:
    impressions_plays_late(landing_root, seed)
    return impressions_plays_scenario(landing_root, 900, seed)


def conversions_input(landing_root: Path, seed: int) -> list[Path]:
    """The impressions and plays of `impressions_plays_input`, a third of them: the same join."""
    impressions_plays_late(landing_root, seed)
    return impressions_plays_scenario(landing_root, 300, seed)


# Each job's input; what a writer returns aside, every file it wrote under the root is landed.
INPUTS: dict[str, Callable[[Path, int], list[Path]]] = {
    "router": router_input,
    "sessionizer": sessionizer_input,
    "impressions_plays": impressions_plays_input,
    TEAM_JOB: router_input,
    WINDOWED_JOB: router_input,
    SQL_JOB: conversions_input,
}
# A team's jobs, their code from a directory outside the repository: (platform, a directory for
# the code) -> the job file written.
TEAM_JOBS: dict[str, Callable[[PlatformConfig, Path], Path]] = {
    TEAM_JOB: install_team_job,
    WINDOWED_JOB: install_windowed_job,
    SQL_JOB: lambda platform, _: write_team_job(platform, sql_job_spec()),
}


def arrival_index(path: Path) -> int:
    """The arrival hour (0..HOURS-1) of a test file: its index, or the last hour for a late file."""
    match = FILE_INDEX.search(path.name)
    return int(match.group(1)) if match else HOURS - 1


def land(platform: PlatformConfig, files: list[Path], scratch: Path) -> dict[int, list[Path]]:
    """Move the written files into the landing zone with their arrival times; the files by hour."""
    by_hour: dict[int, list[Path]] = {}
    for path in files:
        target = platform.landing_root / path.relative_to(scratch)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(path, target)
        hour = arrival_index(target)
        arrived = (FIRST_ARRIVAL + timedelta(hours=hour, minutes=20)).timestamp()
        os.utime(target, (arrived, arrived))
        by_hour.setdefault(hour, []).append(target)
    return by_hour


def write_input(platform: PlatformConfig, job: str, seed: int) -> dict[int, list[Path]]:
    scratch = platform.runtime_root / "written"
    INPUTS[job](scratch, seed)
    return land(platform, sorted(scratch.rglob("*.json")), scratch)


def live_reference(
    spark: SparkSession, platform: PlatformConfig, spec: JobSpec, arrivals: list[list[Path]]
) -> DataFrame:
    """The streaming job's output when its input arrives in `arrivals`: one trigger, one
    micro-batch, each (no per-trigger file limit, as in the backfill)."""
    spec = without_file_limit(spec)
    live = platform.model_copy(
        update={
            "storage": StorageConfig(
                **{k: platform.runtime_root / "live" / k for k in StorageConfig.model_fields}
            )
        }
    )
    for key, value in state_conf(spec).items():
        spark.conf.set(key, value)
    paths = JobPaths.of(live, spec)
    for arrived in arrivals:
        for path in arrived:
            source = path.parent.relative_to(platform.landing_root)
            (live.landing_root / source).mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, live.landing_root / source / path.name)
        query = with_trigger(plan_job(live, spec), spec, available_now=True)(spark).start()
        query.awaitTermination(300)
        assert query.exception() is None
    return spark.read.parquet(str(paths.sink))


def as_fed(plan: BackfillPlan, by_hour: dict[int, list[Path]]) -> list[list[Path]]:
    """The landing files in the plan's micro-batches (archived files keep their landing names)."""
    landed = {path.name: path for paths in by_hour.values() for path in paths}
    return [
        [landed[name] for piece in batch.pieces for names in piece.files.values() for name in names]
        for batch in plan.batches
    ]


# A budget that splits the test's largest arrival hour in two; None: the default (a quarter of the
# job's 1g driver), which makes the three hours one batch.
SPLIT_AN_HOUR = "split"
LATE_COLUMNS = {"sessionizer": "output", "impressions_plays": "outcome"}


@pytest.mark.parametrize(
    ("job", "budget"),
    [
        *[(job, None) for job in ["router", "sessionizer", "impressions_plays", *TEAM_JOBS]],
        *[(job, SPLIT_AN_HOUR) for job in ["router", "sessionizer", "impressions_plays"]],
    ],
)
@pytest.mark.usefixtures("backfill_in_session")
def test_a_backfill_of_the_archive_equals_the_streaming_job_row_for_row(
    spark: SparkSession, platform: PlatformConfig, job: str, budget: str | None, tmp_path: Path
) -> None:
    if job in TEAM_JOBS:
        TEAM_JOBS[job](platform, tmp_path / "team-code")
    by_hour = write_input(platform, job, seed=7)
    spec = find_job(job, platform.conf_dir)
    report = archive.archive_landing(
        platform, sorted(spec.pipeline.inputs[n].path for n in spec.pipeline.inputs), NOW
    )
    assert len(report.sealed) == HOURS * len(spec.pipeline.inputs)
    request = BackfillRequest(job, start=FIRST_ARRIVAL, end=FIRST_ARRIVAL + timedelta(hours=HOURS))
    if budget == SPLIT_AN_HOUR:
        _, whole, _ = plan_backfill(platform, request, NOW)
        request = replace(request, max_batch_bytes=max(p.bytes for p in whole.partitions) * 2 // 3)

    plan, staged = run_backfill(platform, request, NOW)

    assert [p.hour for p in plan.partitions] == [FIRST_ARRIVAL + timedelta(hours=h) for h in range(HOURS)]
    assert all(all(files for files in p.files.values()) for p in plan.partitions)
    fed = [[(p.partition, p.part, p.parts) for p in batch.pieces] for batch in plan.batches]
    if budget is None:
        # Every hour in one batch, every input in it (lockstep).
        assert fed == [[(hour, 1, 1) for hour in range(HOURS)]]
    else:
        # The largest hour in slices, each its own batch; every batch within the budget but a
        # slice of one file.
        assert any(parts > 1 for pieces in fed for _, _, parts in pieces), fed
        assert all(b.bytes <= plan.max_batch_bytes or len(b.pieces) == 1 for b in plan.batches)
    # Each feed batch its own micro-batches, one after the other.
    assert [record.index for record in staged.batches] == [batch.index for batch in plan.batches]
    assert all(
        later.first_batch == earlier.last_batch + 1
        for earlier, later in zip(staged.batches, staged.batches[1:], strict=False)
    )
    backfilled = spark.read.parquet(str(staged.sink))
    assert backfilled.count() == staged.rows > 0
    reference = live_reference(spark, platform, spec, as_fed(plan, by_hour))
    assertDataFrameEqual(backfilled, reference)
    if job in LATE_COLUMNS:
        # The late-data rule: an event is late when older than the watermark its batch started
        # under. The day-late events arrive in the last hour: in one batch with every hour they
        # are not late (the watermark moves only after it); fed after an earlier batch, they are.
        late = backfilled.where(F.col(LATE_COLUMNS[job]) == "late").count()
        assert late == 0 if budget is None else late > 0
    if job == "sessionizer":
        # A session spanning the boundary between the first two arrival hours is one session.
        boundary = datetime(2025, 1, 1, 1, tzinfo=UTC)
        spanning = backfilled.where(
            (F.col("output") == "sessions")
            & (F.col("session_start") < boundary)
            & (F.col("session_end") > boundary)
        )
        assert spanning.count() > 0


def test_a_range_not_sealed_or_not_archived_is_refused_before_anything_runs(platform: PlatformConfig) -> None:
    write_input(platform, "router", seed=3)
    archive.archive_landing(platform, ["events"], NOW)
    with pytest.raises(BackfillError, match="not sealed in the archive yet"):
        plan_backfill(platform, BackfillRequest("router", start=FIRST_ARRIVAL, end=NOW), NOW)
    with pytest.raises(BackfillError, match="holds no input"):
        plan_backfill(
            platform,
            BackfillRequest("router", start=FIRST_ARRIVAL - timedelta(hours=5), end=FIRST_ARRIVAL),
            NOW,
        )
    with pytest.raises(BackfillError, match="not a whole hour"):
        plan_backfill(
            platform, BackfillRequest("router", start=FIRST_ARRIVAL, end=NOW.replace(minute=5)), NOW
        )
    run, _, _ = plan_backfill(
        platform, BackfillRequest("router", start=FIRST_ARRIVAL, end=FIRST_ARRIVAL + timedelta(hours=2)), NOW
    )
    assert not BackfillRun(run.root).root.exists()


def driver_heap_options(pid: int) -> set[str]:
    """The heap options (`-Xms`, `-Xmx`) of the Spark driver JVM under process `pid`, if it runs."""
    options: set[str] = set()
    try:
        members = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return options
    for member in members:
        try:
            argv = member.cmdline()
        except psutil.Error:
            continue
        # The launcher (`org.apache.spark.launcher.Main`, 128m) names SparkSubmit as its argument.
        if "org.apache.spark.deploy.SparkSubmit" in argv and "org.apache.spark.launcher.Main" not in argv:
            options |= {arg for arg in argv if arg.startswith(("-Xms", "-Xmx"))}
    return options


# `warden backfill`'s own processes (the application, killed and resumed, and the publish), a rerun
# and warehouse readers, with the cores shared.
@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.prometheus
def test_a_killed_backfill_resumes_without_redoing_partitions_and_a_rerun_changes_nothing(
    spark: SparkSession, warehouse: PlatformConfig, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    platform = warehouse
    edit_job(platform, "router", router_routes("purchases"))
    write_input(platform, "router", seed=11)
    archive.archive_landing(platform, ["events"], NOW)
    # A batch per file (a byte is less than any hour), so the run can be killed between batches.
    request = BackfillRequest(
        "router",
        start=FIRST_ARRIVAL,
        end=FIRST_ARRIVAL + timedelta(hours=HOURS),
        throttle_seconds=4,
        max_batch_bytes=1,
    )
    run, plan, spec_bytes = plan_backfill(platform, request, NOW)
    assert len(plan.batches) > HOURS  # the last hour's two files are two slices
    prepare_run(run, plan, spec_bytes)
    fetch_partitions(platform, run, plan)
    application = subprocess.Popen(
        [sys.executable, "-m", "jobs.backfill", *submit_arguments(run)],
        env={**os.environ, **application_env(platform.conf_dir)},
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 240
    heap_options: set[str] = set()
    while not run.done() and application.poll() is None and time.monotonic() < deadline:
        heap_options |= driver_heap_options(application.pid)
        time.sleep(0.2)
    os.killpg(application.pid, signal.SIGKILL)
    application.wait()
    first = run.done()
    assert 1 <= len(first) < len(plan.batches), first
    # A byte's budget runs in the least heap (`batch_heap`), committed from the JVM's start.
    assert heap_options == {"-Xms512m", "-Xmx512m"}
    first_commit = JobPaths.of(run.platform(platform), find_job("router", platform.conf_dir)).commits / "0"
    committed_at = first_commit.stat().st_mtime_ns

    # With a Pushgateway configured, each run of the application and of its publish pushes its
    # outcome (the batch-task alert reads them): publishing the unfinished run fails and says so,
    # and the resumed run and its publish succeed after it.
    with pushgateway(tmp_path) as gateway:
        configure_platform(platform, "monitoring", pushgateway_url=gateway.url)
        with pytest.raises(BackfillError, match="has not finished"):
            backfill_run.publish_output(platform, run, plan)
        failed_at = pushed(gateway, "router", BatchTask.BACKFILL)[LAST_FAILURE]

        resumed_plan, resumed = run_backfill(platform, request, NOW)
        ran_at = pushed(gateway, "router", BatchTask.BACKFILL)[LAST_SUCCESS]
        backfill_run.publish_output(platform, resumed.run, resumed_plan)
        figures = pushed(gateway, "router", BatchTask.BACKFILL)
        assert failed_at < ran_at < figures[LAST_SUCCESS] and figures[LAST_DURATION] > 0
        configure_platform(platform, "monitoring", pushgateway_url=None)

    assert resumed_plan.run_id == plan.run_id
    assert {
        record.index: record for record in resumed.batches if record.index in first
    } == first  # not run again
    assert first_commit.stat().st_mtime_ns == committed_at
    resumed_rows = spark.read.parquet(str(resumed.sink)).collect()
    after_resume = published_rows(platform)
    # An uninterrupted run of the same range, published: the same rows, the same table. Its
    # processes are not the subject (the resumed run's were): it runs in the test's processes.
    run_in_test_processes(spark, monkeypatch)
    rerun_plan, rerun = run_backfill(platform, replace(request, throttle_seconds=0), NOW)
    assert rerun_plan.run_id == plan.run_id
    assert rerun.rows_by_target == resumed.rows_by_target
    assertDataFrameEqual(spark.read.parquet(str(rerun.sink)), resumed_rows)
    backfill_run.publish_output(platform, rerun.run, rerun_plan)
    assert published_rows(platform) == after_resume
    with_time = spark.read.parquet(str(rerun.sink)).where("event_date IS NOT NULL")
    assert sum(after_resume.values()) == with_time.count() > 0
    statuses = {
        (v.version, v.status) for v in Ledger.open(platform.resolved_ledger_url).partition_versions("router")
    }
    assert statuses == {(1, "published"), (2, "published")}


# A backfill, its savepoint, a rewind and live runs, with the cores shared.
@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.usefixtures("backfill_in_session")
def test_a_job_bootstrapped_from_a_backfill_savepoint_continues_live_as_if_it_had_run_from_the_start(
    spark: SparkSession, platform: PlatformConfig, ledger: Ledger, capsys: pytest.CaptureFixture[str]
) -> None:
    by_hour = write_input(platform, "sessionizer", seed=5)
    spec = find_job("sessionizer", platform.conf_dir)
    archive.archive_landing(platform, ["app_events", "web_events"], NOW)
    history_end = FIRST_ARRIVAL + timedelta(hours=HOURS - 1)

    plan, staged = run_backfill(
        platform, BackfillRequest("sessionizer", end=history_end, bootstrap=True), NOW
    )
    assert plan.start == FIRST_ARRIVAL  # from the oldest archived hour
    savepoint = bootstrap_savepoint(platform, ledger, staged.run)
    rewind_job(
        Supervisor.for_platform(platform), "sessionizer", reason="bootstrap", savepoint_id=savepoint.id
    )
    # Live, the job reads its landing zone, which still holds the history: only the last hour is new.
    for key, value in state_conf(spec).items():
        spark.conf.set(key, value)
    query = with_trigger(plan_job(platform, spec), spec, available_now=True)(spark).start()
    query.awaitTermination(300)
    assert query.exception() is None
    assert sum(p["numInputRows"] for p in query.recentProgress) == sum(
        len(path.read_text().splitlines()) for path in by_hour[HOURS - 1]
    )
    live = spark.read.parquet(str(JobPaths.of(platform, spec).sink))

    # The history in the bootstrap's batches (its two hours are one), then the live hour.
    reference = live_reference(spark, platform, spec, [*as_fed(plan, by_hour), by_hour[HOURS - 1]])
    assert [batch.completes for batch in plan.batches] == [list(range(HOURS - 1))]
    assert live.count() > 0
    assertDataFrameEqual(spark.read.parquet(str(staged.sink)).unionByName(live), reference)

    # The job now has output: restoring the bootstrap savepoint again would orphan it, and is refused.
    sink_before = sorted(JobPaths.of(platform, spec).sink.rglob("*"))
    exit_code = main(["rewind", "sessionizer", "--savepoint", savepoint.id, "--reason", "bootstrap again"])
    assert exit_code == 2
    assert "[sink_has_output]" in capsys.readouterr().err
    [refused] = [d for d in ledger.decisions("sessionizer") if (d.outcome or "").startswith("refused: ")]
    assert "sink_has_output" in refused.outcome and refused.action == "rewind"
    assert sorted(JobPaths.of(platform, spec).sink.rglob("*")) == sink_before


# Backfills and publishes (in this session and the warehouse process) and readers, with the cores shared.
@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.usefixtures("backfill_in_session")
def test_a_candidate_runs_into_a_side_table_and_is_diffed_per_partition_without_publishing(
    spark: SparkSession, warehouse: PlatformConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    platform = warehouse
    edit_job(platform, "router", router_routes("purchases", "eu_views"))
    write_input(platform, "router", seed=13)
    archive.archive_landing(platform, ["events"], NOW)
    # The installed job's backfill is what the warehouse table shows.
    installed_plan, installed = run_backfill(
        platform,
        BackfillRequest("router", start=FIRST_ARRIVAL, end=FIRST_ARRIVAL + timedelta(hours=HOURS)),
        NOW,
    )
    backfill_run.publish_output(platform, installed.run, installed_plan)
    published = installed.sink
    ledger = Ledger.open(platform.resolved_ledger_url)
    versions = ledger.partition_versions("router")
    assert versions and all(v.status == "published" for v in versions)

    def new_filters(document: dict[str, Any]) -> None:
        routes = {route["name"]: route for route in document["pipeline"]["routes"]}
        routes["purchases"]["filter"] = "event_type = 'purchase' AND amount > 100"
        routes["eu_views"]["filter"] = (
            "event_type = 'view' AND country IN ('DE', 'FR', 'ES', 'IT', 'NL', 'GB')"
        )

    candidate_file = edited_job_file(
        platform, "router", new_filters, platform.runtime_root / "candidate.yaml"
    )

    exit_code = main(
        [
            "backfill",
            "router",
            "--from",
            FIRST_ARRIVAL.isoformat(),
            "--to",
            (FIRST_ARRIVAL + timedelta(hours=HOURS)).isoformat(),
            "--spec",
            str(candidate_file),
        ]
    )

    assert exit_code == 0
    output = capsys.readouterr().out
    [run_dir] = (platform.runtime_root / "backfill").glob("router-*-candidate-*")
    assert not (run_dir / "published.json").exists()
    diff = {entry["partition"]: entry for entry in json.loads((run_dir / "diff.json").read_text())}
    rows = spark.read.parquet(str(published))
    expected_removed = {
        f"route=purchases/event_date={row['event_date']}/event_hour={row['event_hour']}": row["count"]
        for row in rows.where("route = 'purchases' AND amount <= 100")
        .groupBy("event_date", "event_hour")
        .count()
        .collect()
    }
    side = spark.read.parquet(str(run_dir / "lake" / "router"))
    expected_added = {
        f"route=eu_views/event_date={row['event_date']}/event_hour={row['event_hour']}": row["count"]
        for row in side.where("route = 'eu_views' AND country = 'GB'")
        .groupBy("event_date", "event_hour")
        .count()
        .collect()
    }
    assert expected_removed and expected_added
    assert {k: v["removed"] for k, v in diff.items() if v["removed"]} == expected_removed
    assert {k: v["added"] for k, v in diff.items() if v["added"]} == expected_added
    assert all(entry["changed"] == 0 for entry in diff.values())
    assert "purchases" in output and "added" in output and "against warehouse.router" in output
    assert ledger.partition_versions("router") == versions  # nothing published


def test_a_range_covering_router_hours_that_late_arrivals_also_feed_is_refused_and_can_be_widened(
    platform: PlatformConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    write_input(platform, "router", seed=17)
    # Late arrivals: in the last arrival hour, events of the first arrival hour's event hour (22:00).
    first_event_hour = datetime(2025, 3, 1, 22, tzinfo=UTC)
    rng = random.Random(17)
    scratch = platform.runtime_root / "late"
    late = [json.dumps(make_event(rng, first_event_hour + timedelta(minutes=m))) for m in (5, 6)]
    land(platform, [write_json_lines(scratch / "events", "events-17-late-again.json", late)], scratch)
    archive.archive_landing(platform, ["events"], NOW)
    first_hour = [
        "router",
        "--from",
        FIRST_ARRIVAL.isoformat(),
        "--to",
        (FIRST_ARRIVAL + timedelta(hours=1)).isoformat(),
    ]

    assert main(["backfill", *first_hour]) == 2
    refused = capsys.readouterr().err
    assert "would replace 1 warehouse partitions it recomputes only in part" in refused
    assert (
        "REFUSED event_date=2025-03-01/event_hour=22: also fed by arrival hours 2026-11-20T08:00" in refused
    )
    assert "--from 2026-11-20T06:00 --to 2026-11-20T09:00; pass --whole-partitions" in refused
    assert not (platform.runtime_root / "backfill").exists() or not any(
        (platform.runtime_root / "backfill").glob("router-*")
    )

    assert main(["backfill", *first_hour, "--dry-run"]) == 0
    dry_run = capsys.readouterr().out
    assert "REFUSED event_date=2025-03-01/event_hour=22" in dry_run

    assert main(["backfill", *first_hour, "--whole-partitions", "--dry-run"]) == 0
    widened = capsys.readouterr().out
    assert "over arrival hours 2026-11-20T06:00 .. 2026-11-20T09:00: 3 partitions" in widened
    assert "replaces whole event_date=2025-03-01/event_hour=22: fed only by arrival hours" in widened
    assert "REFUSED" not in widened


def test_a_manifest_written_before_spans_were_recorded_gets_them_from_its_files(
    platform: PlatformConfig,
) -> None:
    write_input(platform, "router", seed=19)
    archive.archive_landing(platform, ["events"], NOW)
    partition = archive.partitions(platform, "events")[0]
    recorded = archive.read_manifest(platform, partition)
    assert recorded and all(entry.event_times for entry in recorded)
    # The same manifest as an older archiver wrote it: no spans.
    archive._write_manifest(
        platform,
        platform_client(platform, None, BackfillError),
        partition,
        [archive.ArchivedFile(entry.name, entry.size, entry.sha256) for entry in recorded],
    )
    time_field = find_job("router", platform.conf_dir).pipeline.inputs["events"].fields[1]

    spans = archive.event_time_spans(platform, partition, time_field)

    assert archive.read_manifest(platform, partition) == recorded
    key = time_key(time_field)
    assert spans == [stored_span(entry.event_times[key]) for entry in recorded]


# Backfills and publishes (in this session and the warehouse process) and readers, with the cores shared.
@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.usefixtures("backfill_in_session")
def test_backfills_over_part_of_a_days_arrival_hours_never_replace_its_published_sessions(
    spark: SparkSession, warehouse: PlatformConfig
) -> None:
    platform = warehouse
    write_input(platform, "sessionizer", seed=23)
    archive.archive_landing(platform, ["app_events", "web_events"], NOW)
    whole_range = BackfillRequest(
        "sessionizer", start=FIRST_ARRIVAL, end=FIRST_ARRIVAL + timedelta(hours=HOURS)
    )
    plan, staged = run_backfill(platform, whole_range, NOW)
    backfill_run.publish_output(platform, staged.run, plan)
    ledger = Ledger.open(platform.resolved_ledger_url)
    published = ledger.partition_versions("sessionizer")
    day = "SELECT output, event_date, count(*) AS n FROM warehouse.sessionizer GROUP BY output, event_date"
    before = {(row["output"], str(row["event_date"])): row["n"] for row in query_table(platform, day)}
    staged_rows = spark.read.parquet(str(staged.sink)).where("event_date IS NOT NULL")
    assert sum(before.values()) == staged_rows.count() > 0

    # The later, narrower backfills of the issue: each day they write is fed by hours outside them.
    for start, end in ((1, 2), (0, 1)):
        narrower = BackfillRequest(
            "sessionizer",
            start=FIRST_ARRIVAL + timedelta(hours=start),
            end=FIRST_ARRIVAL + timedelta(hours=end),
        )
        with pytest.raises(BackfillError, match="recomputes only in part") as refused:
            run_backfill(platform, narrower, NOW)
        assert "REFUSED event_date=" in str(refused.value)
        widened, _, _ = plan_backfill(platform, replace(narrower, whole_partitions=True), NOW)
        assert widened.root.name.startswith("sessionizer-20261120T06-20261120T09-job-")

    assert ledger.partition_versions("sessionizer") == published
    after = {(row["output"], str(row["event_date"])): row["n"] for row in query_table(platform, day)}
    assert after == before
