"""The job board's layout in real headless Chromium (Debian's, driven by Playwright), with no
platform: Chromium opens the page with the console's answers on a seeded ledger (served by request
interception, as the plugin's app serves them) in a 1600-pixel window; and the New job form's SQL
side, its requests answered by the plugin's own app. The board against the running platform,
through an incident and a router job made and edited on it, is walked in tests/ops/test_platform.py.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from ops.clock import utcnow
from ops.console.board import Console, as_json
from ops.ledger.records import SavepointRecord
from ops.ledger.store import Ledger
from ops.spec.platform import PlatformConfig
from tests.support.browser import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS

REPO = Path(__file__).resolve().parents[2]
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


def forward_to_app(route: Any, client: Any) -> None:
    """Answer an intercepted request to /streamwarden/... with the plugin's app (a TestClient)."""
    request, url = route.request, urllib.parse.urlsplit(route.request.url)
    served = client.request(
        request.method,
        f"{url.path.removeprefix('/streamwarden')}?{url.query}",
        content=request.post_data,
        headers=request.headers,
    )
    route.fulfill(status=served.status_code, content_type=served.headers["content-type"], body=served.content)


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


@pytest.mark.browser
def test_the_new_job_form_sends_a_sql_jobs_pipeline_as_its_file_says_and_shows_what_is_wrong(
    platform_conf: PlatformConfig,
) -> None:
    """The SQL form's sources, watermarks, query and partition columns, edited with its buttons,
    reach the plugin's real app (its routes in process, without Airflow's auth in front) as the job
    file's `pipeline`; a problem of the pipeline as a whole is listed above the form."""
    from fastapi.testclient import TestClient
    from playwright.sync_api import expect, sync_playwright

    from streamwarden_airflow.console_app import app, authenticated, console

    console.cache_clear()
    app.dependency_overrides[authenticated] = lambda: None
    checks: list[Any] = []
    with TestClient(app) as client, sync_playwright() as playwright:

        def answer(route: Any) -> None:
            if route.request.method == "POST":
                checks.append(json.loads(route.request.post_data))
            forward_to_app(route, client)

        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        try:
            page.route(f"{BOARD_ORIGIN}/streamwarden/**", answer)
            page.goto(f"{BOARD_ORIGIN}/streamwarden/board")
            page.locator("#new-job").click()
            form = page.locator("#job-form")
            expect(form.locator(".route-filter")).to_be_visible(timeout=30_000)
            form.locator(".job-name").fill("purchase_counts")
            form.locator(".job-kind").select_option("sql")
            expect(form).to_have_attribute("data-kind", "sql")
            form.locator(".sink-path").fill("purchase_counts")
            form.locator("fieldset.source").first.locator(".source-watermark").fill("10")
            form.locator('button[data-edit="add-source"]').click()
            clicks = form.locator("fieldset.source").nth(1)
            clicks.locator(".source-name").fill("clicks")
            clicks.locator(".source-path").fill("clicks")
            clicks.locator('button[data-edit="add-field"]').click()
            clicks.locator('tr[data-field-row="1"] .field-name').fill("page")
            events = form.locator("fieldset.source").first
            events.locator('tr[data-field-row="4"] button[data-edit="remove-field"]').click()
            form.locator(".sql-query").fill(
                "SELECT e.event_id, e.event_date FROM events e JOIN clicks c ON true"
            )
            form.locator(".partition-columns").fill("event_id")
            form.locator(".job-stateful").check()
            form.locator('button[type="submit"]').click()

            expect(page.locator("#job-form-refused")).to_be_visible(timeout=30_000)
            problem = page.locator('#job-form-problems li[data-field="pipeline"]')
            expect(problem).to_contain_text("partition_columns ['event_id'] must end in 'event_date'")
            page.screenshot(path=str(ARTIFACTS / "new-sql-job-refused.png"), full_page=True)
        finally:
            browser.close()
            app.dependency_overrides.clear()
            console.cache_clear()

    [sent] = checks
    assert (sent["name"], sent["stateful"]) == ("purchase_counts", True)
    pipeline = sent["pipeline"]
    assert set(pipeline) == {"kind", "sources", "watermarks", "query", "partition_columns", "sink"}
    assert pipeline["watermarks"] == {"events": 10}
    assert [field["name"] for field in pipeline["sources"]["events"]["fields"]] == [
        "event_id",
        "event_time",
        "user_id",
        "event_type",
        "amount",
    ]
    assert pipeline["sources"]["clicks"] == {
        "path": "clicks",
        "event_time_field": "event_time",
        "fields": [
            {"name": "event_time", "type": "timestamp", "required": True},
            {"name": "page", "type": "string"},
        ],
    }
    assert pipeline["partition_columns"] == ["event_id"] and pipeline["sink"] == {"path": "purchase_counts"}
    assert not (platform_conf.conf_dir / "jobs" / "purchase_counts.yaml").exists()


@pytest.mark.browser
def test_start_under_the_fleet_watch_asks_warden_resume_to_run_the_new_job(
    platform_conf: PlatformConfig,
) -> None:
    """On a platform supervised by `warden_fleet`, the New job form's Start triggers `warden_resume`
    for the job instead of unpausing its supervision DAG (which has no watch there). The plugin's
    real app answers the page, except the draft's analyzer verdict (the file is drafted by the
    app's own `draft_text`, its check taken as passed); Airflow's REST API is a stand-in that
    records what the page sends: the runs of `warden_new_job` and `warden_resume` and the DAGs
    the page asks about."""
    from fastapi.testclient import TestClient
    from playwright.sync_api import expect, sync_playwright

    from ops.console.job_form import DraftRequest, draft_text
    from streamwarden_airflow.console_app import app, authenticated, console

    console.cache_clear()
    app.dependency_overrides[authenticated] = lambda: None
    sent: list[tuple[str, str, Any]] = []
    airflow = {
        ("POST", "/api/v2/dags/warden_new_job/dagRuns"): {"dag_run_id": "manual__new"},
        ("GET", "/api/v2/dags/warden_new_job/dagRuns/manual__new"): {"state": "success"},
        ("GET", "/api/v2/dags/warden_supervise_fleet_job"): {"is_paused": True},
        ("GET", "/api/v2/dags/warden_fleet"): {"is_paused": False},
        ("POST", "/api/v2/dags/warden_resume/dagRuns"): {"dag_run_id": "manual__resume"},
    }
    with TestClient(app) as client, sync_playwright() as playwright:

        def plugin(route: Any) -> None:
            request, url = route.request, urllib.parse.urlsplit(route.request.url)
            path = url.path.removeprefix("/streamwarden")
            if (request.method, path) == ("POST", "/api/drafts"):
                values = DraftRequest.model_validate(json.loads(request.post_data))
                text = draft_text(console().platform, values, None)
                body = {"job": values.name, "text": text, "problems": {}}
                route.fulfill(status=200, content_type="application/json", body=json.dumps(body))
                return
            forward_to_app(route, client)

        def stand_in_airflow(route: Any) -> None:
            request, path = route.request, urllib.parse.urlsplit(route.request.url).path
            sent.append((request.method, path, json.loads(request.post_data) if request.post_data else None))
            answer = airflow.get((request.method, path))
            route.fulfill(
                status=404 if answer is None else 200,
                content_type="application/json",
                body=json.dumps(answer or {"detail": "not found"}),
            )

        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        try:
            page.route(f"{BOARD_ORIGIN}/streamwarden/**", plugin)
            page.route(f"{BOARD_ORIGIN}/api/v2/**", stand_in_airflow)
            page.goto(f"{BOARD_ORIGIN}/streamwarden/board")
            page.locator("#new-job").click()
            form = page.locator("#job-form")
            expect(form.locator(".route-filter")).to_be_visible(timeout=30_000)
            form.locator(".job-name").fill("fleet_job")
            form.locator(".sink-path").fill("fleet_job")
            route = form.locator('tr[data-route-row="0"]')
            route.locator(".route-name").fill("big")
            route.locator(".route-filter").fill("amount > 100")
            route.locator(".route-columns").fill("event_id, amount")
            form.locator('button[type="submit"]').click()
            expect(page.locator("#job-dag")).to_have_attribute("data-paused", "true", timeout=30_000)
            page.locator("#start-job").click()
            expect(page.locator("#job-dag")).to_have_text(
                re.compile(r"^Started: warden_fleet runs the job"), timeout=30_000
            )
        finally:
            browser.close()
            app.dependency_overrides.clear()
            console.cache_clear()

    [new_job] = [body for method, path, body in sent if path.endswith("warden_new_job/dagRuns")]
    assert "name: fleet_job" in new_job["conf"]["job_file"]
    [resume] = [body for method, path, body in sent if path.endswith("warden_resume/dagRuns")]
    assert resume["conf"] == {"job": "fleet_job", "reason": "started from the job board"}
    # Nothing unpaused: under the fleet a job's own DAG is a pass run by hand.
    assert not [path for method, path, _ in sent if method == "PATCH"]
    assert not (platform_conf.conf_dir / "jobs" / "fleet_job.yaml").exists()
