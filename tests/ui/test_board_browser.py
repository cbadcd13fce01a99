"""The job board in real headless Chromium (Debian's, driven by Playwright) against the running
embedded platform: SeaweedFS, Airflow's four components and the router under its supervision DAG.

One platform for the module (it takes minutes to start and most of a core). The test walks an
incident: the board lists every job with its state; a killed driver's row turns red within
seconds and back after the supervisor relaunched it; the job page shows that incident's decisions;
"restate from here" opens the restate form with the job and savepoint filled in, and its
confirmation triggers `warden_restate` through Airflow's REST API. Screenshots of each step go
to `.runtime/test-artifacts/ui/` (gitignored).

The layout test needs no platform: Chromium opens the page with the console's answers on a seeded
ledger (served by request interception, as the plugin's app serves them) in a 1600-pixel window.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ops.clock import utcnow
from ops.console.board import Console, as_json
from ops.control.supervisor import Supervisor
from ops.driver.telemetry import read_heartbeat
from ops.embedded import platform as embedded
from ops.embedded.services import free_seaweed_ports
from ops.ledger.store import Ledger, SavepointRecord
from ops.spec.platform import CONF_DIR_ENV, PlatformConfig, load_platform
from tests.support.drivers import edit_job, wait_for
from tests.support.platform import job_paths, write_conf
from tests.support.ports import free_test_port

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / ".runtime" / "test-artifacts" / "ui"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
# Long enough for the board, which polls every 2 s, to show the driver down before the relaunch.
BACKOFF_SECONDS = 8


@pytest.fixture(scope="module")
def running_platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PlatformConfig]:
    """The embedded platform on free loopback ports, the router supervised, for the whole module."""
    root = tmp_path_factory.mktemp("board-platform")
    conf = root / "conf"
    write_conf(conf, root / "runtime")
    settings = yaml.safe_load((conf / "platform.yaml").read_text())
    settings["airflow"] = {"host": "127.0.0.1", "port": free_test_port()}
    settings["s3"] = {"endpoint_url": f"http://127.0.0.1:{free_seaweed_ports().s3}", "bucket": "warden-board"}
    (conf / "platform.yaml").write_text(yaml.safe_dump(settings))
    previous = os.environ.get(CONF_DIR_ENV)
    os.environ[CONF_DIR_ENV] = str(conf)
    platform = load_platform(conf)

    def router(spec: dict[str, Any]) -> None:
        spec["operations"]["trigger"] = {"interval_seconds": 2, "max_files_per_trigger": 2}
        spec["operations"]["restart"]["initial_backoff_seconds"] = BACKOFF_SECONDS

    edit_job(platform, "router", router)
    try:
        embedded.up(platform, timeout=900, echo=print)
        yield platform
    finally:
        embedded.down(platform, echo=print)
        if previous is None:
            os.environ.pop(CONF_DIR_ENV, None)
        else:
            os.environ[CONF_DIR_ENV] = previous


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


@pytest.mark.slow
@pytest.mark.browser
@pytest.mark.timeout(2400)
def test_the_board_follows_an_incident_and_restates_from_a_savepoint(
    running_platform: PlatformConfig,
) -> None:
    from playwright.sync_api import expect, sync_playwright

    platform = running_platform
    ledger = Ledger.open(platform.resolved_ledger_url)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    wait_for(lambda: committed(platform), 900, "the router driver's first committed batch")
    wait_for(
        lambda: (job := ledger.job("router")) is not None and job.state == "RUNNING", 120, "router RUNNING"
    )
    board_url = f"{platform.airflow.base_url}/streamwarden/board"

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        try:
            # Every job, with the state the ledger records (NEW: no pass has recorded it yet).
            page.goto(board_url)
            expect(page.locator('tr[data-job="router"][data-state="RUNNING"]')).to_be_visible(timeout=30_000)
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
            expect(page.locator('tr[data-job="router"][data-state="RUNNING"]')).to_be_visible(timeout=120_000)
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


PAGE = REPO / "plugins" / "streamwarden_airflow" / "console_page.html"
# Where the page believes it is served; every request to it is answered here, none leaves Chromium.
BOARD_ORIGIN = "http://127.0.0.1:9"
ISO_WITH_MICROSECONDS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+")


def serve_console(page: Any, console: Console) -> None:
    """Answer the page's requests as the plugin's app does: the static page, and the console's
    board and job pages as JSON (the app's routes without Airflow's auth in front)."""

    def answer(route: Any) -> None:
        path = urllib.parse.urlsplit(route.request.url).path.removeprefix("/streamwarden")
        now = utcnow()
        if path == "/api/board":
            body: Any = {"generated_at": now.isoformat(), "jobs": as_json(console.board(now))}
        elif path.startswith("/api/jobs/"):
            body = {"generated_at": now.isoformat(), **as_json(console.job_page(path.split("/")[3], now))}
        else:
            route.fulfill(status=200, content_type="text/html", body=PAGE.read_text())
            return
        route.fulfill(status=200, content_type="application/json", body=json.dumps(body))

    page.route(f"{BOARD_ORIGIN}/streamwarden/**", answer)


def _settled_box(page: Any, cell: Any) -> Any:
    """The cell's bounding box, measured again while the board's refresh is re-rendering the table
    (an element it just replaced has no box)."""
    for _ in range(20):
        box = cell.bounding_box()
        if box is not None:
            return box
        page.wait_for_timeout(250)
    raise AssertionError(f"{cell} never had a bounding box")


@pytest.mark.browser
def test_the_board_fits_a_1600_pixel_window_and_reads_plainly(platform_conf: PlatformConfig) -> None:
    from playwright.sync_api import expect, sync_playwright

    ledger = Ledger.open(platform_conf.resolved_ledger_url)
    now = utcnow()
    for name in sorted(path.stem for path in (platform_conf.conf_dir / "jobs").glob("*.yaml")):
        ledger.ensure_job(name, desired_state="running", state="RESTARTING", config_version="v1")
        ledger.update_job(name, backlog=1234, last_batch_id=123456, recommended_cores=4)
        ledger.enqueue_alert(name, "falling_behind", f"{name}/falling_behind", "warning", {})
        ledger.enqueue_alert(name, "restart_storm", f"{name}/restart_storm", "critical", {})
        ledger.add_savepoint(SavepointRecord(f"sp-{name}", name, 123456, now, "k", 9, 9, "complete", "v1"))
    ledger.update_job("router", state="RUNNING", state_reason="progress at batch 56")
    ledger.update_job("sessionizer", scale_cores=3, scale_pinned=True)
    ledger.record_decision("router", "launch", "backoff over", {})

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        try:
            serve_console(page, Console(platform_conf, ledger))
            page.goto(f"{BOARD_ORIGIN}/streamwarden/board")
            expect(page.locator('tr[data-job="router"][data-state="RUNNING"]')).to_be_visible(timeout=30_000)
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "board-1600.png"), full_page=True)
            # Every column, the newest savepoint's last, inside the window: no sideways scrolling.
            for cell in (page.locator("#board th").last, page.locator('tr[data-job="router"] td').last):
                box = _settled_box(page, cell)
                assert box["x"] >= 0 and box["x"] + box["width"] <= 1600, box
            assert page.evaluate("document.documentElement.scrollWidth") <= 1600
            # The board's cores are `warden status`'s: `default` where neither file nor ledger names them.
            cores = page.locator('tr[data-job="router"] td.cores')
            expect(cores).to_have_text("default")
            expect(page.locator('tr[data-job="sessionizer"] td.cores')).to_have_text("3 pinned")
            # Times as a person reads them, in UTC, without microseconds.
            assert not ISO_WITH_MICROSECONDS.search(page.locator("main").inner_text())
            expect(page.locator("#refreshed")).to_have_text(
                re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$")
            )

            page.locator('tr[data-job="router"] a').click()
            expect(page.locator("#state-line")).to_have_text(
                "Batches commit or the query idles on time. Reason: progress at batch 56."
            )
            expect(page.locator("#decisions tbody td").first).to_have_text(
                re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$")
            )
            assert not ISO_WITH_MICROSECONDS.search(page.locator("main").inner_text())
            page.screenshot(path=str(ARTIFACTS / "job-page-1600.png"), full_page=True)
        finally:
            browser.close()
