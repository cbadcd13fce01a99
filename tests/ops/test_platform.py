"""The embedded platform end to end, started once: `up()` starts real SeaweedFS, Airflow's four
components and the generator, and the router runs under its supervision DAG. Each start is minutes
of a busy machine's CPU, so one test walks what a user meets, in order:

1. up on a busy machine (a load of two processes per core: a CPU hog spins what the rest of the
   suite does not already run): Airflow healthy, only the autostart jobs' DAGs unpaused, `warden
   platform status`'s rows, and the router RUNNING with a committed batch in its first run (slow,
   never killed as stuck, no restart storm);
2. every listening socket of the platform's services and drivers on loopback;
3. the job board in real headless Chromium (Debian's, driven by Playwright) through an incident:
   the board lists every job with its state; a killed driver's row turns red within seconds and
   back after the supervisor relaunched it; the job page shows that incident's decisions; "restate
   from here" opens the restate form with the job and savepoint filled in, and its confirmation
   triggers `warden_restate` through Airflow's REST API. Screenshots of each step go to
   `.runtime/test-artifacts/ui/` (gitignored);
4. a router job made with the board's New job form: a filter Spark cannot resolve is refused with
   Spark's message beside it and no file written; fixed, the `warden_new_job` DAG writes the job,
   whose supervision DAG appears paused; started from the form, its driver routes rows into its
   sink; then the job's Edit form changes the filter, deployed through `warden upgrade` by
   `warden_edit_job`, and the rows its new version writes pass the new filter;
5. down: nothing of the platform is left, and down again is a no-op.

The board's layout, which needs no platform, is tests/ui/test_board_browser.py.
"""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.request
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml

from ops.clock import utcnow
from ops.control.supervisor import Supervisor
from ops.driver.checkpoint import sink_files
from ops.driver.telemetry import read_heartbeat
from ops.embedded import platform as embedded
from ops.embedded.platform import ServiceStatus
from ops.embedded.services import free_seaweed_ports, process_group_members
from ops.ledger.store import Ledger
from ops.spec.job import find_job, job_file
from ops.spec.platform import PlatformConfig, load_platform
from tests.support.browser import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS
from tests.support.cpu_hog import cpu_hog
from tests.support.drivers import edit_job, wait_for
from tests.support.platform import job_paths
from tests.support.ports import free_test_port
from tests.support.sockets import ListeningSocket, listening_sockets, process_trees

# Long enough for the board, which polls every 2 s, to show the driver down before the relaunch.
BACKOFF_SECONDS = 8
# The CPU hog: a load average of 2x the cores besides the platform's own (spinning processes
# topped up over what already runs), stopped once the router has committed, or after this long.
HOG_PER_CORE = 2
HOG_SECONDS = 600
# The job made on the board: a route its first filter names a column of wrongly (`event_typ`).
NEW_JOB = "big_purchases"
WRONG_FILTER = "event_typ = 'purchase' AND amount > 3"
RIGHT_FILTER = "event_type = 'purchase' AND amount > 3"
EDITED_FILTER = "event_type = 'purchase' AND amount > 50"
# A working driver's states: on a loaded machine the router's 2 s trigger can fall behind
# (DEGRADED, a warning) between the ledger's RUNNING and the board's next refresh.
WORKING = ("RUNNING", "DEGRADED")
ROUTER_WORKING = 'tr[data-job="router"]:is([data-state="RUNNING"], [data-state="DEGRADED"])'


def processes_of(conf_dir: Path) -> list[str]:
    """Command lines of live processes started for the platform whose conf dir is `conf_dir`."""
    marker = f"STREAMWARDEN_CONF_DIR={conf_dir}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        if marker in environ.split(b"\0") and state not in ("Z", "X"):
            found.append(f"{entry.name}: {cmdline}")
    return found


@pytest.fixture
def embedded_platform(platform_conf: PlatformConfig) -> PlatformConfig:
    """The throwaway platform with Airflow and S3 moved to free loopback ports; the router's
    relaunch backoff long enough for the board to show it down."""
    path = platform_conf.conf_dir / "platform.yaml"
    settings = yaml.safe_load(path.read_text())
    settings["airflow"] = {"host": "127.0.0.1", "port": free_test_port()}
    settings["s3"] = {
        "endpoint_url": f"http://127.0.0.1:{free_seaweed_ports().s3}",
        "bucket": "warden-platform",
    }
    path.write_text(yaml.safe_dump(settings))
    platform = load_platform(platform_conf.conf_dir)

    def router(spec: dict[str, Any]) -> None:
        spec["operations"]["trigger"] = {"interval_seconds": 2, "max_files_per_trigger": 2}
        spec["operations"]["restart"]["initial_backoff_seconds"] = BACKOFF_SECONDS

    edit_job(platform, "router", router)
    return platform


@pytest.mark.slow
@pytest.mark.browser
@pytest.mark.timeout(3600)
def test_up_on_loopback_an_incident_on_the_board_and_down(embedded_platform: PlatformConfig) -> None:
    platform = embedded_platform
    progress: list[str] = []
    try:
        # Up on a busy machine: a load of two processes per core until the router has committed
        # a batch, with no restart and no storm. Slow is not dead.
        with cpu_hog(seconds=HOG_SECONDS, per_core=HOG_PER_CORE) as spinning:
            progress.append(f"CPU hog: {spinning} spinning processes at load {os.getloadavg()[0]:.1f}")
            embedded.up(platform, timeout=900, echo=progress.append)
            rows = assert_up(platform, progress)
            assert_running_without_a_restart(platform)
        sockets = sockets_of_the_running_platform(platform)
        walk_an_incident_on_the_board(platform)
        make_and_edit_a_job_on_the_board(platform)
    finally:
        embedded.down(platform, echo=progress.append)
        print("\n".join(progress))

    assert not any(row.running for row in embedded.status(platform))
    assert all(not process_group_members(row.pid) for row in rows if row.pid is not None)
    # Nothing of this platform is left: not Airflow's children, the generator or a streaming driver.
    assert processes_of(platform.conf_dir) == []
    # Down again is a no-op.
    embedded.down(platform, echo=progress.append)

    report = "\n".join(s.line() for s in sockets)
    print(f"listening sockets of the running platform:\n{report}")
    # Not vacuous: S3, the Airflow API, a driver, its metrics endpoint and its JVM were all seen.
    ports = {s.port for s in sockets}
    assert {platform.airflow.port, int(platform.s3.endpoint_url.rsplit(":", 1)[1])} <= ports, report
    router = find_job("router", platform.conf_dir).operations.metrics_port
    assert router in ports and any("java" in s.command for s in sockets), report
    assert [s.line() for s in sockets if not s.loopback] == [], report


def assert_running_without_a_restart(platform: PlatformConfig) -> None:
    """The router RUNNING with a committed batch in its first run: nothing killed it, no storm."""
    ledger = Ledger.open(platform.resolved_ledger_url)
    heartbeat_file = job_paths(platform, "router").heartbeat

    def committed() -> bool:
        job, heartbeat = ledger.job("router"), read_heartbeat(heartbeat_file)
        return (
            job is not None
            and job.state == "RUNNING"
            and heartbeat is not None
            and heartbeat.batch_id is not None
        )

    wait_for(committed, HOG_SECONDS, "the router RUNNING with a committed batch under the CPU hog")
    runs = ledger.runs("router")
    assert [run.stopped_at for run in runs] == [None], [run.exit_reason for run in runs]
    kinds = [alert.kind for alert in ledger.alerts("router")]
    assert "restart_storm" not in kinds and "down" not in kinds, kinds
    print(
        f"under the CPU hog (load {os.getloadavg()[0]:.1f}): the router's first run started its query "
        f"{runs[0].start_seconds}s after launch; alerts {kinds}"
    )


def assert_up(platform: PlatformConfig, progress: list[str]) -> list[ServiceStatus]:
    """Airflow healthy, only the autostart jobs' DAGs unpaused, every service running at its URL."""
    health = airflow_get(platform, "/api/v2/monitor/health")
    assert health["scheduler"]["status"] == "healthy"
    assert health["triggerer"]["status"] == "healthy"
    assert airflow_get(platform, "/api/v2/dags/warden_supervise_router")["is_paused"] is False
    # Only the autostart jobs run; the others' DAGs wait, paused, in the UI.
    assert airflow_get(platform, "/api/v2/dags/warden_supervise_impressions_plays")["is_paused"] is True
    rows = embedded.status(platform)
    assert [(row.name, row.running) for row in rows] == [
        ("seaweedfs", True),
        ("airflow-scheduler", True),
        ("airflow-dag-processor", True),
        ("airflow-triggerer", True),
        ("airflow-api-server", True),
        ("generator", True),
    ]
    urls = {row.name: row.url for row in rows}
    assert urls["seaweedfs"] == platform.s3.endpoint_url
    assert urls["airflow-api-server"] == platform.airflow.base_url
    assert any("Airflow UI:  " + platform.airflow.base_url in line for line in progress)
    return rows


def sockets_of_the_running_platform(platform: PlatformConfig) -> list[ListeningSocket]:
    """Every listening socket of the services, the drivers and whatever carries the platform's
    conf dir, once the router has committed a batch (its JVM, block manager and metrics endpoint
    are all up then)."""
    wait_for(lambda: committed(platform), 900, "the router driver's first committed batch")
    ledger = Ledger.open(platform.resolved_ledger_url)
    drivers = [run.pid for job in ledger.jobs() if (run := ledger.current_run(job.name)) and run.pid]
    services = [row.pid for row in embedded.status(platform) if row.pid is not None]
    # Drivers outlive the Airflow task that launched them, so they are roots of their own.
    marked = [int(line.split(":", 1)[0]) for line in processes_of(platform.conf_dir)]
    return listening_sockets(process_trees([*services, *drivers, *marked]))


def walk_an_incident_on_the_board(platform: PlatformConfig) -> None:
    """The board, a killed driver's row red and back, the incident on the job page, and a dry-run
    restatement triggered from a savepoint's row."""
    from playwright.sync_api import expect, sync_playwright

    ledger = Ledger.open(platform.resolved_ledger_url)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    wait_for(
        lambda: (job := ledger.job("router")) is not None and job.state in WORKING, 120, "router RUNNING"
    )
    board_url = f"{platform.airflow.base_url}/streamwarden/board"

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        try:
            # Every job, with the state the ledger records (NEW: no pass has recorded it yet).
            page.goto(board_url)
            expect(page.locator(ROUTER_WORKING)).to_be_visible(timeout=30_000)
            jobs = sorted(path.stem for path in (platform.conf_dir / "jobs").glob("*.yaml"))
            recorded = {job.name: job.state for job in ledger.jobs()}
            states = row_states(page)
            assert sorted(states) == jobs
            assert states == {name: recorded.get(name, "NEW") for name in jobs}
            expect(page.locator('tr[data-job="router"]')).not_to_have_class("down")
            page.screenshot(path=str(ARTIFACTS / "1-board.png"), full_page=True)

            # Inside Airflow's UI: the "Job board" navigation entry shows the same page.
            page.goto(f"{platform.airflow.base_url}/plugin/job-board")
            frame = page.frame_locator("iframe")
            expect(frame.locator('tr[data-job="router"]')).to_be_visible(timeout=60_000)
            page.screenshot(path=str(ARTIFACTS / "2-board-in-airflow.png"), full_page=True)

            # Kill the driver: its row turns red within seconds, then back once it is relaunched.
            page.goto(board_url)
            expect(page.locator('tr[data-job="router"]')).to_be_visible(timeout=30_000)
            run = ledger.current_run("router")
            assert run is not None and run.pid is not None
            last_batch = read_heartbeat(job_paths(platform, "router").heartbeat).batch_id  # type: ignore[union-attr]
            killed_at = utcnow()
            os.kill(run.pid, signal.SIGKILL)
            started = time.monotonic()
            expect(page.locator('tr[data-job="router"].down')).to_be_visible(
                timeout=BACKOFF_SECONDS * 1000 + 20_000
            )
            red_after = time.monotonic() - started
            print(f"row red {red_after:.1f} s after the kill")
            page.screenshot(path=str(ARTIFACTS / "3-driver-killed.png"), full_page=True)
            wait_for(
                lambda: committed(platform, after=last_batch),
                600,
                "a batch committed by the relaunched driver",
            )
            expect(page.locator(ROUTER_WORKING)).to_be_visible(timeout=120_000)
            expect(page.locator('tr[data-job="router"]')).not_to_have_class("down")
            page.screenshot(path=str(ARTIFACTS / "4-recovered.png"), full_page=True)

            # The job page: the incident's decisions, newest first, and the filter.
            savepoint = Supervisor.for_platform(platform).savepoint("router", "board test")
            assert savepoint.savepoint.status == "complete"
            page.locator('tr[data-job="router"] a').click()
            expect(page.locator("#diagnosis")).to_be_visible(timeout=30_000)
            incident = [
                decision
                for decision in ledger.decisions("router", limit=100)
                if decision.at >= killed_at and decision.action in ("detect", "restart", "launch")
            ]
            assert {"detect", "launch"} <= {decision.action for decision in incident}
            for decision in incident:
                expect(page.locator(f'#decisions tr[data-action="{decision.action}"]').first).to_be_visible()
            # The death itself is on the page, whichever pass saw it first: the watcher (a detect
            # row) or a reconcile pass already under way (then only its close_run row says it).
            texts = page.locator("#decisions tbody tr").all_inner_texts()
            assert any("dead" in text or "gone" in text for text in texts), texts
            page.locator("#decision-action").select_option("detect")
            shown = page.locator("#decisions tbody tr")
            assert {row.get_attribute("data-action") for row in shown.all()} == {"detect"}
            page.screenshot(path=str(ARTIFACTS / "5-job-page.png"), full_page=True)

            # "restate from here": the restate form with the job and the savepoint filled in.
            page.locator("#decision-action").select_option("")
            chosen = page.locator(f'tr[data-savepoint="{savepoint.savepoint.id}"]')
            expect(chosen).to_be_visible(timeout=30_000)
            chosen.locator("button.restate").click()
            form = page.locator("#restate-form")
            expect(form).to_be_visible()
            expect(form.locator('input[name="job"]')).to_have_value("router")
            expect(form.locator('select[name="savepoint"]')).to_have_value(savepoint.savepoint.id)
            expect(form.locator('input[name="dry_run"]')).not_to_be_checked()
            page.screenshot(path=str(ARTIFACTS / "6-restate-form.png"), full_page=True)
            page.locator("#restate-cancel").click()
            chosen.locator("button.dry-run").click()
            expect(form.locator('input[name="dry_run"]')).to_be_checked()
            form.locator('input[name="reason"]').fill("board test: what would a restatement redo")
            form.locator('button[type="submit"]').click()
            expect(page.locator("#restate-run")).to_be_visible(timeout=30_000)
            run_id = page.locator("#restate-run").inner_text()
            page.screenshot(path=str(ARTIFACTS / "7-restate-triggered.png"), full_page=True)
        finally:
            browser.close()

    dag_run = airflow_get(platform, f"/api/v2/dags/warden_restate/dagRuns/{run_id}")
    assert dag_run["conf"]["job"] == "router" and dag_run["conf"]["savepoint"] == savepoint.savepoint.id
    assert dag_run["conf"]["dry_run"] is True

    def finished() -> bool:
        return airflow_get(platform, f"/api/v2/dags/warden_restate/dagRuns/{run_id}")["state"] in (
            "success",
            "failed",
        )

    wait_for(finished, 600, "the dry-run restatement")
    assert airflow_get(platform, f"/api/v2/dags/warden_restate/dagRuns/{run_id}")["state"] == "success"
    assert red_after < BACKOFF_SECONDS + 15


def make_and_edit_a_job_on_the_board(platform: PlatformConfig) -> None:
    """A router job from the New job form (a filter Spark refuses first), started from the form,
    routing rows; then an edit of its filter through the Edit form and `warden upgrade`."""
    from playwright.sync_api import expect, sync_playwright

    path = job_file(NEW_JOB, platform.conf_dir)
    started = time.monotonic()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        try:
            page.goto(f"{platform.airflow.base_url}/streamwarden/board")
            page.locator("#new-job").click()
            form = page.locator("#job-form")
            expect(form.locator(".route-filter")).to_be_visible(timeout=30_000)
            form.locator(".job-name").fill(NEW_JOB)
            form.locator(".sink-path").fill(NEW_JOB)
            route = form.locator('tr[data-route-row="0"]')
            route.locator(".route-name").fill("big")
            route.locator(".route-filter").fill(WRONG_FILTER)
            route.locator(".route-columns").fill("event_id, event_type, amount")
            form.locator('button[type="submit"]').click()

            # Refused with Spark's message beside the filter, and nothing written.
            expect(page.locator("#job-form-refused")).to_be_visible(timeout=300_000)
            problem = form.locator('[data-problem="pipeline.routes.0.filter"]')
            expect(problem).to_contain_text("[UNRESOLVED_COLUMN.WITH_SUGGESTION]")
            expect(problem).to_contain_text("`event_typ` cannot be resolved")
            assert not path.exists() and not platform.job_runtime_dir(NEW_JOB).exists()
            page.screenshot(path=str(ARTIFACTS / "8-new-job-refused.png"), full_page=True)

            form.locator(".route-filter").fill(RIGHT_FILTER)
            form.locator('button[type="submit"]').click()
            expect(page.locator("#job-form-run-state")).to_have_text("success", timeout=300_000)
            [written] = find_job(NEW_JOB, platform.conf_dir).pipeline.routes  # type: ignore[union-attr]
            assert written.filter == RIGHT_FILTER
            # Its supervision DAG appears at the next parse, paused until started.
            expect(page.locator('#job-dag[data-paused="true"]')).to_be_visible(timeout=300_000)
            assert airflow_get(platform, f"/api/v2/dags/warden_supervise_{NEW_JOB}")["is_paused"] is True
            page.screenshot(path=str(ARTIFACTS / "9-new-job-created.png"), full_page=True)
            page.locator("#start-job").click()
            expect(page.locator('#job-dag[data-paused="false"]')).to_be_visible(timeout=30_000)
            wait_for(lambda: bool(routed_rows(platform)), 900, f"rows routed by {NEW_JOB}")
            rows = routed_rows(platform)
            assert all(row["event_type"] == "purchase" and row["amount"] > 3 for row in rows), rows
            created_in = time.monotonic() - started

            # The Edit form, from the file as written, deployed through `warden upgrade`.
            page.goto(f"{platform.airflow.base_url}/streamwarden/jobs/{NEW_JOB}")
            page.locator("#edit-job").click()
            expect(form.locator(".route-filter")).to_have_value(RIGHT_FILTER, timeout=30_000)
            form.locator(".route-filter").fill(EDITED_FILTER)
            form.locator(".job-reason").fill("board test: only the big purchases")
            form.locator('button[type="submit"]').click()
            expect(page.locator("#job-form-run-state")).to_have_text("success", timeout=900_000)
            page.screenshot(path=str(ARTIFACTS / "10-job-edited.png"), full_page=True)
        finally:
            browser.close()

    ledger = Ledger.open(platform.resolved_ledger_url)
    edited = find_job(NEW_JOB, platform.conf_dir)
    assert edited.pipeline.routes[0].filter == EDITED_FILTER  # type: ignore[union-attr]
    [request] = ledger.decisions(NEW_JOB, action="upgrade")
    assert request.outcome is not None and request.outcome.endswith(f"-> {edited.config_version}")
    assert "board test: only the big purchases (via " in request.reason
    # Once upgraded, only the new version writes: its rows pass the new filter.
    before = len(routed_rows(platform))
    wait_for(lambda: len(routed_rows(platform)) > before, 600, "rows of the edited version")
    assert all(row["amount"] > 50 for row in routed_rows(platform)[before:])
    current = ledger.current_run(NEW_JOB)
    assert current is not None and current.config_version == edited.config_version
    edited_in = time.monotonic() - started - created_in
    print(f"{NEW_JOB}: created and routing rows in {created_in:.0f} s, edited in {edited_in:.0f} s")


def routed_rows(platform: PlatformConfig) -> list[dict[str, Any]]:
    """The big purchases the new job's committed batches routed, oldest batch first."""
    paths = job_paths(platform, NEW_JOB)
    if not paths.sink_log.is_dir():
        return []
    files = sorted(
        (file for file in sink_files(paths.sink_log) if "route=big" in file.parts[-4]),
        key=lambda file: file.stat().st_mtime_ns,
    )
    return [row for file in files for row in pq.read_table(file).to_pylist()]


def airflow_get(platform: PlatformConfig, path: str) -> Any:
    with urllib.request.urlopen(f"{platform.airflow.base_url}{path}", timeout=30) as answer:
        return json.load(answer)


def row_states(page: Any) -> dict[str, str]:
    return {
        str(row.get_attribute("data-job")): str(row.get_attribute("data-state"))
        for row in page.locator("#board tbody tr").all()
    }


def committed(platform: PlatformConfig, after: int | None = None) -> bool:
    heartbeat = read_heartbeat(job_paths(platform, "router").heartbeat)
    return (
        heartbeat is not None
        and heartbeat.batch_id is not None
        and (after is None or heartbeat.batch_id > after)
    )
