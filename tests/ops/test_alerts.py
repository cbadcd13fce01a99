"""The alert outbox against a real ledger (each test on SQLite and on PostgreSQL) and a real Slack
stand-in on loopback.

Time moves through a fake clock; only the HTTP exchanges and the database are real.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from ops.alerts import CLAIM_LEASE, Alert, AlertCenter
from ops.ledger.store import Ledger
from ops.spec.platform import PlatformConfig, SlackConfig
from tests.support.platform import on_both_ledgers
from tests.support.ports import free_test_port
from tests.support.slack import WEBHOOK_ENV, SlackReceiver, use_webhook

pytestmark = on_both_ledgers

RUN_URL = "http://127.0.0.1:8080/dags/warden_router/runs/scheduled__2031-05-04T12:00:00+00:00"


@dataclass
class FakeClock:
    now: datetime

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(datetime(2031, 5, 4, 12, 0, tzinfo=UTC))


@pytest.fixture
def center(ledger: Ledger, platform_conf: PlatformConfig, clock: FakeClock) -> AlertCenter:
    return AlertCenter(ledger, platform_conf.slack, clock)


def page(job: str = "router", kind: str = "down", **changes: object) -> Alert:
    values: dict[str, object] = {
        "job": job,
        "kind": kind,
        "severity": "critical",
        "state": "RESTARTING",
        "reason": "driver exited with code 1 (Py4JJavaError)",
        "last_batch": 41,
        "run_url": RUN_URL,
        "runbook": "ops/runbooks/router.md",
        "channel": "#streams-oncall",
    }
    values.update(changes)
    return Alert(**values)  # type: ignore[arg-type]


def headers(receiver: SlackReceiver) -> list[str]:
    return [message["blocks"][0]["text"]["text"] for message in receiver.messages]


def test_rate_limit_then_server_error_then_success_delivers_once_and_keeps_order(
    center: AlertCenter, ledger: Ledger, clock: FakeClock, slack_webhook: SlackReceiver
) -> None:
    slack_webhook.respond_with(429, retry_after=1)
    slack_webhook.respond_with(500)
    first = center.raise_alert(page("router", "down"))
    second = center.raise_alert(page("router", "falling_behind", severity="warning", state="DEGRADED"))
    third = center.raise_alert(page("enricher", "down"))

    rate_limited = center.deliver_due()
    assert rate_limited.sent == () and rate_limited.retry_at == clock.now + timedelta(seconds=1)
    assert center.deliver_due().sent == ()  # Retry-After not over: the head waits, the rest wait behind it

    clock.advance(1)
    server_error = center.deliver_due()
    assert server_error.sent == () and server_error.retry_at == clock.now + timedelta(seconds=2)
    waiting = ledger.alerts("router", status="pending")[-1]
    assert (waiting.id, waiting.attempts) == (first, 2)
    assert waiting.last_error is not None and "500" in waiting.last_error

    clock.advance(2)
    assert center.deliver_due().sent == (first, second, third)

    assert len(slack_webhook.requests) == 5
    assert headers(slack_webhook) == [
        "🔴 router down: RESTARTING",
        "🟠 router falling behind: DEGRADED",
        "🔴 enricher down: RESTARTING",
    ]
    delivered = {record.id: record for record in ledger.alerts()}
    assert (delivered[first].status, delivered[first].attempts, delivered[first].sent_at) == (
        "sent",
        3,
        clock.now,
    )
    assert [delivered[i].attempts for i in (second, third)] == [1, 1]


def test_same_job_and_kind_within_the_window_is_enqueued_once(
    center: AlertCenter, ledger: Ledger, clock: FakeClock
) -> None:
    first = center.raise_alert(page())
    clock.advance(center.slack.dedup_window_seconds - 1)

    assert center.raise_alert(page(reason="still down")) is None
    assert center.raise_alert(page("router", "stuck")) is not None  # another kind is another incident
    assert [a.kind for a in ledger.alerts("router")] == ["stuck", "down"]
    assert [(i.kind, i.alert_id) for i in center.open_incidents("router")] == [
        ("down", first),
        ("stuck", first + 1),
    ]


def test_an_incident_still_open_after_the_window_is_paged_again_as_the_same_incident(
    center: AlertCenter, clock: FakeClock
) -> None:
    opened_at = clock.now
    center.raise_alert(page())
    clock.advance(center.slack.dedup_window_seconds)

    reminder = center.raise_alert(page(reason="still down"))

    [incident] = center.open_incidents("router")
    assert (incident.alert_id, incident.opened_at, incident.alert.reason) == (
        reminder,
        opened_at,
        "still down",
    )


def test_after_resolve_the_next_failure_pages_again(
    center: AlertCenter, ledger: Ledger, clock: FakeClock
) -> None:
    first = center.raise_alert(page())
    clock.advance(30)
    center.resolve("router", "down", "running again")
    clock.advance(5)

    again = center.raise_alert(page(reason="driver exited again"))

    assert again is not None and again != first
    assert [a.kind for a in ledger.alerts("router")] == ["down", "resolved", "down"]
    [incident] = center.open_incidents("router")
    assert (incident.alert_id, incident.opened_at) == (again, clock.now)


def test_resolve_sends_exactly_one_resolved_message(
    center: AlertCenter, ledger: Ledger, clock: FakeClock, slack_webhook: SlackReceiver
) -> None:
    down = center.raise_alert(page())
    clock.advance(750)

    resolution = center.resolve("router", "down", "running again: batch 42 committed")
    assert center.resolve("router", "down", "running again") is None
    assert center.resolve("router", "falling_behind", "caught up") is None
    assert center.resolve("enricher", "down", "running again") is None
    center.deliver_due()

    assert [a.id for a in ledger.alerts()] == [resolution, down]
    assert center.open_incidents("router") == []
    alerted, resolved = slack_webhook.messages
    assert resolved["blocks"][0]["text"]["text"] == "✅ router down resolved"
    fields = [field["text"] for field in resolved["blocks"][1]["fields"]]
    assert fields == [
        "*Job*\nrouter",
        "*Was*\nRESTARTING: driver exited with code 1 (Py4JJavaError)",
        "*Lasted*\n12m 30s (since 2031-05-04 12:00:00 UTC)",
        "*Resolved*\nrunning again: batch 42 committed",
    ]
    assert f"Closes alert #{down}" in resolved["blocks"][2]["elements"][0]["text"]
    assert resolved["text"].startswith("✅ resolved: router down after 12m 30s")


def test_unreachable_slack_keeps_the_alert_pending_until_it_answers(
    center: AlertCenter, ledger: Ledger, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    receiver = SlackReceiver(port=free_test_port())
    use_webhook(monkeypatch, receiver.url)
    alert_id = center.raise_alert(page())

    report = center.deliver_due()

    [waiting] = ledger.alerts()
    assert report.retry_at == clock.now + timedelta(seconds=1)
    assert (waiting.id, waiting.status, waiting.attempts) == (alert_id, "pending", 1)
    assert waiting.last_error is not None and "Slack unreachable" in waiting.last_error
    clock.advance(1)
    with receiver:
        assert center.deliver_due().sent == (alert_id,)
        assert headers(receiver) == ["🔴 router down: RESTARTING"]
    assert ledger.alerts()[0].status == "sent"


def test_max_attempts_marks_the_alert_failed_and_keeps_it(
    ledger: Ledger, clock: FakeClock, slack_webhook: SlackReceiver
) -> None:
    center = AlertCenter(ledger, SlackConfig(max_attempts=3), clock)
    for _ in range(3):
        slack_webhook.respond_with(503)
    doomed = center.raise_alert(page())
    behind = center.raise_alert(page("enricher", "down"))

    reports = []
    for _ in range(4):
        reports.append(center.deliver_due())
        clock.advance(60)

    assert [r.failed for r in reports] == [(), (), (doomed,), ()]
    assert reports[3].sent == (behind,)
    records = {record.id: record for record in ledger.alerts()}
    assert (records[doomed].status, records[doomed].attempts) == ("failed", 3)
    assert "503" in (records[doomed].last_error or "")
    assert headers(slack_webhook) == ["🔴 enricher down: RESTARTING"]


def test_slack_rejecting_a_request_fails_it_at_once_and_the_queue_moves_on(
    center: AlertCenter, ledger: Ledger, slack_webhook: SlackReceiver
) -> None:
    slack_webhook.respond_with(400, "invalid_blocks")
    rejected = center.raise_alert(page())
    behind = center.raise_alert(page("enricher", "down"))

    report = center.deliver_due()

    assert (report.failed, report.sent) == ((rejected,), (behind,))
    records = {record.id: record for record in ledger.alerts()}
    assert (records[rejected].status, records[rejected].attempts) == ("failed", 1)
    assert "invalid_blocks" in (records[rejected].last_error or "")


def test_without_a_webhook_alerts_are_written_to_the_console(
    center: AlertCenter, ledger: Ledger, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv(WEBHOOK_ENV, raising=False)
    alert_id = center.raise_alert(page())

    report = center.deliver_due()

    assert report.logged == (alert_id,)
    [record] = ledger.alerts()
    assert (record.status, record.attempts) == ("logged", 1)
    console = capsys.readouterr().err
    assert f"alert #{alert_id}" in console
    assert "router down: RESTARTING" in console and "driver exited with code 1 (Py4JJavaError)" in console


def test_block_kit_message_names_job_state_reason_batch_runbook_and_run(
    center: AlertCenter, slack_webhook: SlackReceiver
) -> None:
    center.raise_alert(page(reason="query failed in <lambda> & gave up"))
    center.deliver_due()

    [message] = slack_webhook.messages
    header, section, context = message["blocks"]
    assert header == {
        "type": "header",
        "text": {"type": "plain_text", "text": "🔴 router down: RESTARTING", "emoji": True},
    }
    assert [field["text"] for field in section["fields"]] == [
        "*Job*\nrouter",
        "*State*\nRESTARTING",
        "*Reason*\nquery failed in &lt;lambda&gt; &amp; gave up",
        "*Last batch*\n41",
    ]
    line = context["elements"][0]["text"]
    assert "`ops/runbooks/router.md`" in line and f"<{RUN_URL}|Airflow run>" in line
    assert message["text"].startswith(
        "🔴 [CRITICAL] router down: RESTARTING. Reason: query failed in &lt;lambda&gt;"
    )
    assert message["channel"] == "#streams-oncall"


def test_a_claimed_alert_is_left_alone_until_its_lease_runs_out(
    center: AlertCenter, ledger: Ledger, clock: FakeClock, slack_webhook: SlackReceiver
) -> None:
    alert_id = center.raise_alert(page())
    # Another process claimed it and died before recording the outcome.
    assert ledger.claim_alert(alert_id, clock.now, lease_until=clock.now + CLAIM_LEASE)
    assert not ledger.claim_alert(alert_id, clock.now, lease_until=clock.now + CLAIM_LEASE)

    assert center.deliver_due().sent == ()
    clock.advance(CLAIM_LEASE.total_seconds())
    assert center.deliver_due().sent == (alert_id,)
    assert len(slack_webhook.messages) == 1


def test_two_deliverers_send_each_alert_once_in_order(
    ledger: Ledger, platform_conf: PlatformConfig, clock: FakeClock, slack_webhook: SlackReceiver
) -> None:
    # Separate engines on the same database, as two processes would have.
    centers = [
        AlertCenter(Ledger.open(platform_conf.resolved_ledger_url), platform_conf.slack, clock)
        for _ in range(2)
    ]
    ids = [centers[0].raise_alert(page(f"job_{n:02d}")) for n in range(12)]

    def drain(center: AlertCenter) -> None:
        while center.ledger.alerts(status="pending") or center.ledger.alerts(status="sending"):
            center.deliver_due()

    workers = [threading.Thread(target=drain, args=(center,)) for center in centers]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)

    assert headers(slack_webhook) == [f"🔴 job_{n:02d} down: RESTARTING" for n in range(12)]
    assert {(record.id, record.status, record.attempts) for record in ledger.alerts()} == {
        (i, "sent", 1) for i in ids
    }


def context_line(message: dict) -> str:
    return message["blocks"][-1]["elements"][0]["text"]


def test_reminders_resends_and_the_resolution_name_their_incident_and_sequence(
    center: AlertCenter, clock: FakeClock, slack_webhook: SlackReceiver
) -> None:
    first = center.raise_alert(page())
    # Slack answers the first attempt with a 500: the outbox sends the same message again.
    slack_webhook.respond_with(500)
    center.deliver_due()
    clock.advance(1)
    center.deliver_due()
    clock.advance(center.slack.dedup_window_seconds)
    reminder = center.raise_alert(page(reason="still down"))
    center.deliver_due()
    other = center.raise_alert(page("router", "stuck"))
    clock.advance(60)
    resolution = center.resolve("router", "down", "running again")
    center.deliver_due()

    failed_attempt, resent, reminded, stuck, resolved = (request.json() for request in slack_webhook.requests)
    # A resend is the same message: same incident, same sequence, same body.
    assert resent == failed_attempt
    assert f"🆔 Incident #{first}, message 1 (first page, alert #{first})" in context_line(resent)
    assert (
        f"Incident #{first}, message 1 (first page, alert #{first}), open since 2031-05-04 12:00:00 UTC"
        in (resent["text"])
    )
    # A reminder is a new message of the same incident.
    assert f"🆔 Incident #{first}, message 2 (reminder, alert #{reminder})" in context_line(reminded)
    assert f"Incident #{first}, message 2 (reminder, alert #{reminder})" in reminded["text"]
    # Another kind is another incident, numbered from 1.
    assert f"🆔 Incident #{other}, message 1 (first page, alert #{other})" in context_line(stuck)
    # The resolution is the incident's last message and still says which alert it closes.
    line = context_line(resolved)
    assert f"🆔 Incident #{first}, message 3 (resolution, alert #{resolution})" in line
    assert f"Closes alert #{reminder}" in line
    assert resolved["text"].endswith(f"Incident #{first}, message 3 (resolution, alert #{resolution})")


def test_the_console_line_names_the_incident_and_sequence(
    center: AlertCenter, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv(WEBHOOK_ENV, raising=False)
    first = center.raise_alert(page())
    center.deliver_due()
    clock.advance(center.slack.dedup_window_seconds)
    reminder = center.raise_alert(page(reason="still down"))
    center.deliver_due()

    first_line, reminder_line = capsys.readouterr().err.splitlines()
    assert f"alert #{first}," in first_line and f"Incident #{first}, message 1 (first page" in first_line
    assert f"alert #{reminder}," in reminder_line
    assert f"Incident #{first}, message 2 (reminder, alert #{reminder})" in reminder_line
