"""The job board's data (`ops.console`): rows from a real SQLite ledger and real driver files, and
the bottleneck diagnosis on progress records recorded from real Spark runs
(`tests/ops/fixtures/record_progress.py`)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from ops.cli import main
from ops.clock import utcnow
from ops.console.board import Console, as_json
from ops.console.diagnosis import diagnose, master_cores
from ops.driver.history import HISTORY_BATCHES, ProgressHistory, read_history, read_rates, write_history
from ops.driver.telemetry import BatchSample, Heartbeat, write_heartbeat
from ops.ledger.records import RunRecord, SavepointRecord
from ops.ledger.store import Ledger
from ops.spec.job import JobSpec, find_job
from ops.spec.platform import PlatformConfig
from tests.support.drivers import edit_job
from tests.support.platform import job_paths

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "progress"
NOW = datetime(2026, 11, 24, 10, 30, tzinfo=UTC)


def recorded(name: str) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = json.loads((FIXTURES / f"{name}.json").read_text())
    return records


def spec_with(platform: PlatformConfig, job: str, **trigger: Any) -> JobSpec:
    """The job's spec with its trigger section changed, as loaded from a rewritten job file."""

    def with_trigger(document: dict[str, Any]) -> None:
        document["operations"]["trigger"] = {**document["operations"].get("trigger", {}), **trigger}
        document["operations"]["resources"] = {
            **document["operations"].get("resources", {}),
            "master": "local[2]",
        }

    edit_job(platform, job, with_trigger)
    return find_job(job, platform.conf_dir)


# --- the bottleneck diagnosis, on real progress --------------------------------------------------


def test_a_batch_size_limit_far_too_small_is_named_with_its_lever(platform_conf: PlatformConfig) -> None:
    spec = spec_with(platform_conf, "router", interval_seconds=1, max_files_per_trigger=1)

    diagnosis = diagnose(recorded("tiny_batches"), spec)

    assert diagnosis.bottleneck == "batch_size"
    assert "max_files_per_trigger = 1" in diagnosis.summary
    assert "raise operations.trigger.max_files_per_trigger" in diagnosis.lever
    assert len(diagnosis.batches) == len(recorded("tiny_batches")) - 1, "the first batch carries start-up"
    assert sum(diagnosis.shares.values()) == pytest.approx(1.0)


def test_the_same_files_in_large_batches_are_not_called_too_small(platform_conf: PlatformConfig) -> None:
    spec = spec_with(platform_conf, "router", interval_seconds=1, max_files_per_trigger=100)

    diagnosis = diagnose(recorded("tiny_batches_healthy"), spec)

    assert diagnosis.bottleneck not in ("batch_size", "skewed_key", "state")


def test_a_hot_key_in_a_stateful_job_is_named_as_a_skewed_key(platform_conf: PlatformConfig) -> None:
    spec = spec_with(platform_conf, "sessionizer", interval_seconds=1, max_files_per_trigger=1)

    diagnosis = diagnose(recorded("hot_key"), spec)

    assert diagnosis.bottleneck == "skewed_key", diagnosis.summary
    assert "one task carried most of it" in diagnosis.summary
    assert "split it" in diagnosis.lever
    assert diagnosis.shares["state"] > diagnosis.shares["execution"]


def test_the_same_rows_over_many_keys_are_not_called_skewed(platform_conf: PlatformConfig) -> None:
    spec = spec_with(platform_conf, "sessionizer", interval_seconds=1, max_files_per_trigger=1)

    diagnosis = diagnose(recorded("hot_key_healthy"), spec)

    # State work (updates and RocksDB commits) is most of the batch, spread over the tasks.
    assert diagnosis.bottleneck == "state", diagnosis.summary
    assert "cores" in diagnosis.lever


def test_a_job_that_keeps_up_has_no_bottleneck(platform_conf: PlatformConfig) -> None:
    spec = spec_with(platform_conf, "router", interval_seconds=30)
    records = recorded("tiny_batches")
    # The same batches, 30 s apart: each ends long before the next trigger.
    spaced = [
        {**record, "timestamp": (NOW + timedelta(seconds=30 * index)).isoformat()}
        for index, record in enumerate(records)
    ]

    diagnosis = diagnose(spaced, spec)

    assert diagnosis.bottleneck == "keeping_up"
    assert diagnosis.lever == ""


def test_no_batches_is_said_plainly(platform_conf: PlatformConfig) -> None:
    idle = [{**recorded("tiny_batches")[0], "numInputRows": 0}]

    assert diagnose(idle, find_job("router", platform_conf.conf_dir)).bottleneck == "idle"


def test_a_growing_share_is_named(platform_conf: PlatformConfig) -> None:
    spec = spec_with(platform_conf, "router", interval_seconds=1)
    records = recorded("tiny_batches_healthy")
    # The listing of the later batches slows down by 5 s, as a landing directory that fills up would.
    slowed = [
        {
            **record,
            "durationMs": {
                **record["durationMs"],
                "latestOffset": record["durationMs"]["latestOffset"] + (5000 if index >= 2 else 0),
                "triggerExecution": record["durationMs"]["triggerExecution"] + (5000 if index >= 2 else 0),
            },
        }
        for index, record in enumerate(records)
    ]

    diagnosis = diagnose(slowed, spec)

    assert diagnosis.growth["listing"] > 0.3
    assert "The listing share grew" in diagnosis.summary


# --- the driver's history file --------------------------------------------------------------------


def test_history_keeps_an_hour_of_minutes_and_the_newest_batches(tmp_path: Path) -> None:
    history = ProgressHistory()
    start = NOW.timestamp()
    records = recorded("tiny_batches")
    for minute in range(70):
        history = history.with_batch(records[minute % len(records)], start + 60 * minute)
        history = history.with_batch(records[(minute + 1) % len(records)], start + 60 * minute + 10)
    heartbeat = tmp_path / "heartbeat.json"
    write_history(heartbeat, history)

    read = read_history(heartbeat)

    assert len(read.minutes) == 60, "an hour of minutes, the oldest dropped"
    assert read.minutes[-1].batches == 2
    assert len(read.batches) == HISTORY_BATCHES
    assert "sources" in read.batches[-1] and "description" not in read.batches[-1]["sources"][0]
    assert set(read.batches[-1]) >= {"durationMs", "stateOperators", "timestamp", "numInputRows"}
    assert read_rates(heartbeat).minutes == read.minutes and read_rates(heartbeat).batches == ()
    assert read.last_batch_end == start + 60 * 69 + 10
    (tmp_path / "rates.json").write_text("{not json")
    (tmp_path / "batches.json").write_text('{"a": 1}')
    assert read_history(heartbeat) == ProgressHistory(), "a broken history is an empty one"


# --- the board ---------------------------------------------------------------------------------------


def seed_job(platform: PlatformConfig, ledger: Ledger, job: str, state: str, *, batch: int = 41) -> None:
    ledger.ensure_job(job, desired_state="running", state=state, config_version="v1")
    ledger.update_job(job, state=state, backlog=3, last_batch_id=batch)
    paths = job_paths(platform, job)
    sample = BatchSample(batch, 100, 50.0, 80.0, 1200)
    write_heartbeat(
        paths.heartbeat,
        Heartbeat(
            job=job,
            run_id="run-1",
            pid=1,
            event="progress",
            at=(NOW - timedelta(seconds=5)).timestamp(),
            batch_id=batch,
            state_rows=10,
            state_memory_bytes=2048,
            watermark=(NOW - timedelta(minutes=2)).isoformat(),
            recent=(sample,),
        ),
    )
    history = ProgressHistory()
    for index, record in enumerate(recorded("tiny_batches")[:5]):
        at = NOW - timedelta(minutes=90 - 20 * index)
        history = history.with_batch({**record, "timestamp": at.isoformat()}, at.timestamp())
    write_history(paths.heartbeat, history)


def test_the_board_has_a_row_per_job_with_its_figures(platform_conf: PlatformConfig, ledger: Ledger) -> None:
    seed_job(platform_conf, ledger, "router", "RUNNING")
    seed_job(platform_conf, ledger, "sessionizer", "RESTARTING")
    for index, reason in enumerate(["failed: exit 137", "failed: exit 1", "stopped"]):
        ledger.start_run(
            RunRecord(
                f"r{index}",
                "sessionizer",
                "local",
                1,
                None,
                None,
                None,
                "v1",
                NOW - timedelta(hours=1),
                None,
                None,
            )
        )
        ledger.finish_run(f"r{index}", reason)
    ledger.start_run(
        RunRecord(
            "old", "sessionizer", "local", 1, None, None, None, "v1", NOW - timedelta(hours=30), None, None
        )
    )
    ledger.finish_run("old", "failed: long ago")
    ledger.enqueue_alert("sessionizer", "driver_dead", "sessionizer/driver_dead", "critical", {})
    ledger.enqueue_alert("router", "falling_behind", "router/falling_behind", "warning", {})
    ledger.enqueue_alert("router", "resolved", "router/falling_behind", "info", {})
    for savepoint_id, batch, minutes in (("sp-old", 10, 50), ("sp-new", 30, 20)):
        ledger.add_savepoint(
            SavepointRecord(
                savepoint_id, "router", batch, NOW - timedelta(minutes=minutes), "k", 9, 9, "complete", "v1"
            )
        )

    ledger.update_job("sessionizer", scale_cores=3, scale_pinned=True, recommended_cores=1)

    rows = {row.job: row for row in Console(platform_conf, ledger).board(NOW)}

    assert set(rows) == {spec.stem for spec in (platform_conf.conf_dir / "jobs").glob("*.yaml")}
    router, sessionizer = rows["router"], rows["sessionizer"]
    assert (router.state, router.down, router.desired_state) == ("RUNNING", False, "running")
    assert (sessionizer.state, sessionizer.down) == ("RESTARTING", True)
    assert rows["enricher"].state == "NEW" and not rows["enricher"].down
    assert (router.cores, router.cores_pinned, router.recommended_cores) == (2, False, None), "local[2]"
    assert (sessionizer.cores, sessionizer.cores_pinned, sessionizer.recommended_cores) == (3, True, 1)
    assert (router.cores_label, sessionizer.cores_label) == ("default", "3 pinned")
    assert router.last_batch_id == 41 and router.backlog_files == 3
    assert (router.input_rate, router.processed_rate) == (50.0, 80.0)
    assert router.watermark_lag_seconds == pytest.approx(120)
    assert router.state_bytes == 2048 and router.state_rows == 10
    assert sessionizer.restarts_24h == 2 and router.restarts_24h == 0
    assert sessionizer.open_alerts == ["driver_dead"] and router.open_alerts == []
    assert router.newest_savepoint is not None and router.newest_savepoint.id == "sp-new"
    assert router.newest_savepoint.age_seconds == pytest.approx(1200)
    assert len(router.rates.minutes) == len(router.rates.input_rates) == 3, "the last hour's minutes only"
    assert (
        router.last_batch_age_seconds is not None
        and 10 * 60 - 5 < router.last_batch_age_seconds < 10 * 60 + 5
    )
    json.dumps(as_json(rows["router"]))


def test_the_board_shows_a_job_s_cores_as_warden_status_does(
    platform_conf: PlatformConfig, ledger: Ledger, capsys: pytest.CaptureFixture[str]
) -> None:
    # A running router whose file and ledger name no cores (local[2] gives it 2): both say `default`.
    ledger.ensure_job("router", desired_state="running", state="RUNNING", config_version="v1")
    ledger.start_run(RunRecord("r1", "router", "local", None, None, None, None, "v1", NOW, None, None))

    assert main(["status"]) == 0
    header, *rows = capsys.readouterr().out.splitlines()
    status_cores = next(row for row in rows if row.startswith("router ")).split()[7]
    board_cores = {row.job: row for row in Console(platform_conf, ledger).board(NOW)}["router"].cores_label

    assert header.split()[9] == "cores" and status_cores == board_cores == "default"


def status_table(out: str) -> dict[str, dict[str, str]]:
    """`warden status`'s table by job and column, cut at the header's column starts (a cell may
    hold spaces: `3 pinned`, a standby's pid)."""
    header, *rows = out.splitlines()
    names = re.findall(r"\S+(?: \S+)*", header)
    starts = [header.index(name) for name in names]
    table = {}
    for row in rows:
        if row.startswith("INVALID  "):
            continue
        cells = [row[start:end].strip() for start, end in zip(starts, [*starts[1:], None], strict=True)]
        table[cells[0]] = dict(zip(names, cells, strict=True))
    return table


def test_warden_status_and_the_board_give_each_job_the_same_state_restarts_and_open_alerts(
    platform_conf: PlatformConfig, ledger: Ledger, capsys: pytest.CaptureFixture[str]
) -> None:
    now = utcnow()
    seed_job(platform_conf, ledger, "router", "RUNNING")
    ledger.ensure_job("sessionizer", desired_state="running", state="RESTARTING", config_version="v1")
    ledger.ensure_job("enricher", desired_state="suspended", state="SUSPENDED", config_version="v1")
    # Failed and clean runs inside the window, a failure outside it, a failure of another job.
    for run_id, job, hours_ago, reason in (
        ("s1", "sessionizer", 1, "failed: dead"),
        ("s2", "sessionizer", 2, "failed: stuck"),
        ("s3", "sessionizer", 3, "stopped: suspended"),
        ("s4", "sessionizer", 30, "failed: long ago"),
        ("e1", "enricher", 5, "failed: config error"),
    ):
        ledger.start_run(
            RunRecord(
                run_id, job, "local", 1, None, None, None, "v1", now - timedelta(hours=hours_ago), None, None
            )
        )
        ledger.finish_run(run_id, reason)
    # Open incidents, one resolved, and an info notice (opens none).
    ledger.enqueue_alert("sessionizer", "down", "sessionizer/down", "critical", {})
    ledger.enqueue_alert("sessionizer", "restart_storm", "sessionizer/restart_storm", "critical", {})
    ledger.enqueue_alert("router", "falling_behind", "router/falling_behind", "warning", {})
    ledger.enqueue_alert("router", "resolved", "router/falling_behind", "info", {})
    ledger.enqueue_alert("enricher", "rescaled", "notice/enricher/rescaled/1", "info", {})
    # A job file that does not validate, with a ledger record from when it did.
    ledger.ensure_job("device_health", desired_state="running", state="RUNNING", config_version="v1")
    (platform_conf.conf_dir / "jobs" / "device_health.yaml").write_text("name: device_health\nbad: 1\n")

    assert main(["status"]) == 0
    cli = status_table(capsys.readouterr().out)
    board = {row.job: row for row in Console(platform_conf, ledger).board(now)}

    assert set(cli) == set(board) == {path.stem for path in (platform_conf.conf_dir / "jobs").glob("*.yaml")}
    for job, row in board.items():
        shown = cli[job]
        assert shown["state"] == row.state, job
        assert int(shown["restarts 24h"]) == row.restarts_24h, job
        assert shown["open alerts"] == (",".join(row.open_alerts) or "-"), job
    assert (
        board["sessionizer"].restarts_24h,
        board["enricher"].restarts_24h,
        board["router"].restarts_24h,
    ) == (2, 1, 0)
    assert board["sessionizer"].open_alerts == ["down", "restart_storm"] and board["router"].open_alerts == []
    assert board["enricher"].open_alerts == [] and board["enricher"].state == "SUSPENDED"
    assert (board["device_health"].state, board["device_health"].down) == ("INVALID", True)
    assert board["campaign_uniques"].state == cli["campaign_uniques"]["state"] == "NEW"


def test_a_job_file_that_does_not_validate_is_a_red_row(
    platform_conf: PlatformConfig, ledger: Ledger
) -> None:
    (platform_conf.conf_dir / "jobs" / "router.yaml").write_text("name: router\nnot_a_field: 1\n")

    rows = {row.job: row for row in Console(platform_conf, ledger).board(NOW)}

    assert rows["router"].state == "INVALID" and rows["router"].down
    assert rows["router"].config_error and "router.yaml" in rows["router"].config_error


def test_the_job_page_has_decisions_savepoints_previews_and_a_diagnosis(
    platform_conf: PlatformConfig, ledger: Ledger
) -> None:
    seed_job(platform_conf, ledger, "router", "RUNNING")
    ledger.record_decision("router", "restart", "driver dead: exit 137", {"pid": 7})
    ledger.record_decision("router", "launch", "backoff over", {})
    ledger.record_decision("attack_chains", "launch", "another job's decision", {})
    ledger.add_savepoint(SavepointRecord("sp-1", "router", 12, NOW, "k", 9, 9, "complete", "v1"))
    preview_dir = job_paths(platform_conf, "router").preview
    preview_dir.mkdir(parents=True)
    (preview_dir / "parsed.json").write_text(
        json.dumps(
            {
                "job": "router",
                "stage": "parsed",
                "batch_id": 3,
                "captured_at": 0,
                "columns": ["a"],
                "records": [{"a": 1}],
            }
        )
    )

    def with_preview(document: dict[str, Any]) -> None:
        document["operations"]["preview"] = {"stages": ["parsed", "output"], "records": 10}

    edit_job(platform_conf, "router", with_preview)

    page = Console(platform_conf, ledger).job_page("router", NOW)

    assert page is not None
    assert [decision.action for decision in page.decisions] == ["launch", "restart"]
    assert page.actions == ["launch", "restart"]
    assert [savepoint.id for savepoint in page.savepoints] == ["sp-1"]
    assert [preview.stage for preview in page.previews] == ["parsed"] and page.previews[0].rows == [["1"]]
    assert page.missing_previews == ["output"]
    assert page.diagnosis.bottleneck != "idle" and page.diagnosis.batches
    assert Console(platform_conf, ledger).job_page("no_such_job", NOW) is None


def test_a_changed_job_file_is_read_again(platform_conf: PlatformConfig, ledger: Ledger) -> None:
    console = Console(platform_conf, ledger)
    assert {row.job: row.cores for row in console.board(NOW)}["router"] == 2
    spec_with(platform_conf, "router")  # local[2] written explicitly: same cores, a changed file
    path = platform_conf.conf_dir / "jobs" / "router.yaml"
    path.write_text(path.read_text().replace("local[2]", "local[3]"))

    assert {row.job: row.cores for row in console.board(NOW)}["router"] == 3


@pytest.mark.parametrize(
    ("master", "cores"),
    [("local", 1), ("local[4]", 4), ("local[2, 3]", 2), ("local[*]", None), ("spark://h:7077", None)],
)
def test_cores_of_a_master(master: str, cores: int | None) -> None:
    assert master_cores(master) == cores
