"""On-call alerting through the ledger's alert outbox, delivered to a Slack incoming webhook.

Raising an alert only writes a row to the outbox (`alerts` table); `AlertCenter.deliver_due()`
sends what is due, oldest first, and records every attempt. Nothing leaves the outbox silently:
a row ends "sent", "logged" (no webhook configured: written to the console) or "failed" (logged
loudly), and stays in the ledger either way.

Incidents. An incident is an alert of one job and kind (its dedup key, `job/kind`) that has not
been resolved: the newest outbox row of that key is an alert, not a "resolved" message.

- Raising the same job/kind again while its incident is open and the newest alert of it is younger
  than `dedup_window_seconds` is a duplicate: it is not enqueued (the caller's decision row says
  "deduplicated"; a "suppressed" outbox row would only repeat that). Once the window has passed,
  the alert is enqueued again as a reminder of the same incident.
- `resolve()` enqueues one "resolved" message (kind "resolved", same dedup key) naming the alert
  it closes and how long the incident lasted; that row closes the incident, so the next failure of
  the same kind opens a new one and pages again.

Message identity. Every message of an incident carries the incident's id (the outbox id of the
alert that opened it) and its sequence within the incident (1 the first page, 2, 3, ... each
reminder, the last one the resolution), in the Block Kit context line and in the plain text the
console line shows, beside the message's own outbox id. A receiver tells a reminder (same
incident, higher sequence) from a resend of the same message (the outbox delivers at least once:
same incident, same sequence, same body).

Delivery from several processes (the supervisor pass, the platform DAG, the CLI) is safe: a
process claims a row (status "sending", with a lease) before sending it and stops at the first row
it cannot claim, so each alert is sent by one process and the queue keeps its order. A claim whose
process died runs out after `CLAIM_LEASE` and the row is sent again (at least once, never lost).
Raising and resolving read and then write in two steps; the supervisor holds a per-job lock around
its pass, so the only race left is two processes paging the same job/kind at the same instant,
which costs one duplicate message, never a lost one.

One module of about 590 lines on purpose: the outbox, the incident rules and the Slack message of
each step are one contract (what an incident is, what each of its messages says, how delivery
retries), tested together (`tests/ops/test_alerts.py`).
"""

from __future__ import annotations

import dataclasses
import sys
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cached_property
from http.client import HTTPException
from typing import TYPE_CHECKING, Any

import structlog

from ops.clock import utcnow
from ops.exceptions import AlertDeliveryError, SecretNotFoundError
from ops.ledger.records import AlertRecord
from ops.ledger.store import Ledger
from ops.secrets import MASK, lookup_secret
from ops.spec.job import AlertRouting
from ops.spec.platform import SlackConfig

# slack_sdk is imported where a message is sent: the DAG processor imports this module on every
# parse, and `warden status` and most reconcile passes send nothing.
if TYPE_CHECKING:
    from slack_sdk.webhook import WebhookClient

log = structlog.get_logger("streamwarden.alerts")

RESOLVED_KIND = "resolved"
# Outbox rows of notices (`AlertCenter.notify`) have dedup keys under this prefix.
NOTICE_KEY_PREFIX = "notice/"
SEVERITY_EMOJI = {"critical": "🔴", "warning": "🟠", "info": "🔵"}
# Far longer than one send can take (SEND_TIMEOUT_SECONDS), so a live sender never loses its claim.
CLAIM_LEASE = timedelta(minutes=5)
SEND_TIMEOUT_SECONDS = 10
MAX_BACKOFF_SECONDS = 60.0
# Slack's limits: header text 150 characters, a section field 2,000.
HEADER_LIMIT = 150
FIELD_LIMIT = 2000
TEXT_REASON_LIMIT = 3000


def _escape(text: str) -> str:
    # Slack reads &, < and > in mrkdwn as markup (links, mentions); "<lambda>" in a reason must stay text.
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _field(label: str, value: str) -> dict[str, str]:
    return {"type": "mrkdwn", "text": _clip(f"*{label}*\n{_escape(value)}", FIELD_LIMIT)}


def _header(text: str) -> dict[str, Any]:
    return {
        "type": "header",
        "text": {"type": "plain_text", "text": _clip(text, HEADER_LIMIT), "emoji": True},
    }


def _links(runbook: str, run_url: str | None, prefix: str = "") -> str:
    """The runbook and the Airflow run as one mrkdwn line."""
    shown_runbook = (
        f"<{runbook}|runbook>" if runbook.startswith(("http://", "https://")) else f"`{_escape(runbook)}`"
    )
    shown_run = f"<{run_url}|Airflow run>" if run_url else "no Airflow run"
    return f"{prefix}📖 Runbook: {shown_runbook}  ·  🔗 {shown_run}"


def _title(kind: str) -> str:
    return kind.replace("_", " ")


def format_duration(seconds: float) -> str:
    """A short human duration: `45s`, `12m 30s`, `3h 05m`, `2d 4h`."""
    total = int(round(seconds))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


@dataclass(frozen=True)
class MessageRef:
    """Where one outbox message sits: its own outbox id, its incident and its place in it.

    `incident` is the outbox id of the alert that opened the incident; `sequence` counts the
    incident's messages from 1 (the first page), so a reminder has a higher sequence than the page
    before it while a resend of one message repeats its sequence.
    """

    message_id: int
    incident: int
    sequence: int
    opened_at: datetime

    @classmethod
    def of(cls, record: AlertRecord) -> MessageRef:
        """The reference of an outbox row (rows from before incident ids open their own incident)."""
        payload = record.payload
        opened_at = payload.get("opened_at")
        return cls(
            message_id=record.id,
            incident=int(payload.get("incident", record.id)),
            sequence=int(payload.get("sequence", 1)),
            opened_at=datetime.fromisoformat(opened_at) if opened_at else record.created_at,
        )

    def label(self, role: str | None = None) -> str:
        """`Incident #17, message 2 (reminder, alert #23)`: what a receiver keys on."""
        role = role or ("first page" if self.sequence == 1 else "reminder")
        return f"Incident #{self.incident}, message {self.sequence} ({role}, alert #{self.message_id})"


@dataclass(frozen=True)
class Alert:
    """One page about one job: what went wrong, the state it left the job in, where to look."""

    job: str
    kind: str
    severity: str
    state: str
    reason: str
    last_batch: int | None
    run_url: str | None
    runbook: str = AlertRouting().runbook
    channel: str = AlertRouting().channel

    def __post_init__(self) -> None:
        if self.severity not in SEVERITY_EMOJI:
            raise ValueError(f"alert severity must be one of {sorted(SEVERITY_EMOJI)}, got {self.severity!r}")
        if self.kind == RESOLVED_KIND:
            raise ValueError(f"alert kind {RESOLVED_KIND!r} is reserved for resolution messages")

    @property
    def dedup_key(self) -> str:
        """Alerts with the same key belong to the same incident."""
        return f"{self.job}/{self.kind}"

    def to_payload(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> Alert:
        return cls(**{f.name: payload[f.name] for f in dataclasses.fields(cls)})

    def slack_message(self, ref: MessageRef | None = None) -> dict[str, Any]:
        """The webhook body: Block Kit blocks plus the plain `text` notifications show; with `ref`,
        both name the message's incident and sequence (notices pass none)."""
        emoji = SEVERITY_EMOJI[self.severity]
        last_batch = "none yet" if self.last_batch is None else str(self.last_batch)
        incident = "" if ref is None else f"{ref.label()}, open since {ref.opened_at:%Y-%m-%d %H:%M:%S} UTC"
        text = (
            f"{emoji} [{self.severity.upper()}] {self.job} {_title(self.kind)}: {self.state}. "
            f"Reason: {_escape(_clip(self.reason, TEXT_REASON_LIMIT))}. Last batch: {last_batch}. "
            f"{incident + '. ' if incident else ''}"
            f"Runbook: {self.runbook}. Airflow run: {self.run_url or 'none'}"
        )
        prefix = f"🆔 {incident}  ·  " if incident else ""
        blocks = [
            _header(f"{emoji} {self.job} {_title(self.kind)}: {self.state}"),
            {
                "type": "section",
                "fields": [
                    _field("Job", self.job),
                    _field("State", self.state),
                    _field("Reason", self.reason),
                    _field("Last batch", last_batch),
                ],
            },
            {
                "type": "context",
                "elements": [{"type": "mrkdwn", "text": _links(self.runbook, self.run_url, prefix=prefix)}],
            },
        ]
        # Legacy webhooks route by "channel"; app webhooks post to their own channel and ignore it.
        return {"text": text, "blocks": blocks, "channel": self.channel}


@dataclass(frozen=True)
class Resolution:
    """The message that closes an incident: what it was and how long it lasted."""

    alert: Alert
    resolves: int
    detail: str
    opened_at: datetime
    resolved_at: datetime

    @property
    def lasted(self) -> timedelta:
        return self.resolved_at - self.opened_at

    def to_payload(self) -> dict[str, Any]:
        return {
            "alert": self.alert.to_payload(),
            "resolves": self.resolves,
            "detail": self.detail,
            "opened_at": self.opened_at.isoformat(),
            "resolved_at": self.resolved_at.isoformat(),
        }

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> Resolution:
        return cls(
            alert=Alert.from_payload(payload["alert"]),
            resolves=int(payload["resolves"]),
            detail=payload["detail"],
            opened_at=datetime.fromisoformat(payload["opened_at"]),
            resolved_at=datetime.fromisoformat(payload["resolved_at"]),
        )

    def slack_message(self, ref: MessageRef | None = None) -> dict[str, Any]:
        """The webhook body, marked ✅ so it never reads like a new page; with `ref` it names the
        incident it closes and its place in it, like every message of the incident."""
        alert = self.alert
        lasted = format_duration(self.lasted.total_seconds())
        incident = "" if ref is None else ref.label("resolution")
        text = (
            f"✅ resolved: {alert.job} {_title(alert.kind)} after {lasted}: "
            f"{_escape(_clip(self.detail, TEXT_REASON_LIMIT))}. "
            f"It was {alert.state}: {_escape(_clip(alert.reason, TEXT_REASON_LIMIT))}"
            f"{'. ' + incident if incident else ''}"
        )
        prefix = f"🆔 {incident}  ·  " if incident else ""
        blocks = [
            _header(f"✅ {alert.job} {_title(alert.kind)} resolved"),
            {
                "type": "section",
                "fields": [
                    _field("Job", alert.job),
                    _field("Was", f"{alert.state}: {alert.reason}"),
                    _field("Lasted", f"{lasted} (since {self.opened_at:%Y-%m-%d %H:%M:%S} UTC)"),
                    _field("Resolved", self.detail),
                ],
            },
            {
                "type": "context",
                "elements": [
                    {
                        "type": "mrkdwn",
                        "text": _links(
                            alert.runbook, alert.run_url, prefix=f"{prefix}Closes alert #{self.resolves}  ·  "
                        ),
                    }
                ],
            },
        ]
        return {"text": text, "blocks": blocks, "channel": alert.channel}


@dataclass(frozen=True)
class Incident:
    """An open incident. `alert_id` is its newest alert row (raised at `raised_at`; reminders after
    the dedup window add rows), `delivery` that row's outbox status; `incident_id` is the id of the
    alert that opened it and `sequence` the newest row's place in it (1, 2, ...)."""

    alert: Alert
    alert_id: int
    opened_at: datetime
    raised_at: datetime
    delivery: str
    incident_id: int
    sequence: int

    @property
    def job(self) -> str:
        return self.alert.job

    @property
    def kind(self) -> str:
        return self.alert.kind


@dataclass(frozen=True)
class DeliveryReport:
    """What one `deliver_due()` pass did, by outbox id; `retry_at` is set when a refusal stopped it."""

    sent: tuple[int, ...] = ()
    logged: tuple[int, ...] = ()
    failed: tuple[int, ...] = ()
    retry_at: datetime | None = None

    def line(self) -> str:
        waiting = f", next attempt at {self.retry_at:%H:%M:%S}" if self.retry_at else ""
        return f"{len(self.sent)} sent, {len(self.logged)} logged, {len(self.failed)} failed{waiting}"


def is_open_incident(newest: AlertRecord) -> bool:
    """Whether the newest outbox row of a dedup key leaves its incident open: not a resolution,
    and not an info notice (those open none)."""
    return newest.kind != RESOLVED_KIND and not newest.dedup_key.startswith(NOTICE_KEY_PREFIX)


def slack_message(record: AlertRecord) -> dict[str, Any]:
    """The webhook body of an outbox row, an alert or a resolution, naming its incident and sequence
    (a notice belongs to no incident)."""
    if record.kind == RESOLVED_KIND:
        return Resolution.from_payload(record.payload).slack_message(MessageRef.of(record))
    notice = record.dedup_key.startswith(NOTICE_KEY_PREFIX)
    return Alert.from_payload(record.payload["alert"]).slack_message(
        None if notice else MessageRef.of(record)
    )


def backoff_seconds(attempts: int) -> float:
    """The wait after failed attempt number `attempts` (1, 2, 4, ... seconds, at most a minute)."""
    return float(min(2 ** max(attempts - 1, 0), MAX_BACKOFF_SECONDS))


def _retry_after(headers: Mapping[str, Any]) -> float | None:
    value = headers.get("Retry-After") or headers.get("retry-after")
    try:
        return max(float(value), 0.0) if value is not None else None
    except ValueError:
        return None


def _transient(refusal: AlertDeliveryError) -> bool:
    """Unreachable, rate limited or a server error: the same request can succeed later."""
    return refusal.status is None or refusal.status == 429 or refusal.status >= 500


class AlertCenter:
    """Raises and resolves incidents in the ledger's outbox and delivers the outbox to Slack."""

    def __init__(self, ledger: Ledger, slack: SlackConfig, clock: Callable[[], datetime] = utcnow) -> None:
        self.ledger = ledger
        self.slack = slack
        self.clock = clock

    @cached_property
    def webhook(self) -> WebhookClient | None:
        """The client of the webhook `slack.webhook_url` refers to; None when none is configured
        (console + ledger). SecretNotFoundError (not cached) when a `file:` or `airflow:`
        reference gives nothing."""
        from slack_sdk.webhook import WebhookClient

        url = lookup_secret(self.slack.webhook_url)
        if url is None:
            return None
        # The outbox is the only retry layer. slack_sdk's default handler resends a POST after a
        # connection reset, which Slack may already have accepted, and any retry inside send()
        # would deliver twice alongside the outbox's own retry and hide attempts from the ledger.
        return WebhookClient(url.reveal(), timeout=SEND_TIMEOUT_SECONDS, retry_handlers=[])

    # incidents ----------------------------------------------------------------------------------

    def open_incidents(self, job: str) -> list[Incident]:
        """The job's open incidents, oldest first."""
        incidents = []
        for record in self.ledger.newest_alerts(job):
            if not is_open_incident(record):
                continue
            ref = MessageRef.of(record)
            incidents.append(
                Incident(
                    alert=Alert.from_payload(record.payload["alert"]),
                    alert_id=record.id,
                    opened_at=ref.opened_at,
                    raised_at=record.created_at,
                    delivery=record.status,
                    incident_id=ref.incident,
                    sequence=ref.sequence,
                )
            )
        return incidents

    def _open_incident(self, job: str, kind: str) -> Incident | None:
        return next((incident for incident in self.open_incidents(job) if incident.kind == kind), None)

    def raise_alert(self, alert: Alert) -> int | None:
        """Queue `alert`; None when it duplicates an open incident's alert inside the dedup window."""
        now = self.clock()
        incident = self._open_incident(alert.job, alert.kind)
        if incident is not None and now - incident.raised_at < timedelta(
            seconds=self.slack.dedup_window_seconds
        ):
            log.info("alert deduplicated", job=alert.job, kind=alert.kind, open_alert=incident.alert_id)
            return None
        payload: dict[str, Any] = {"alert": alert.to_payload(), "opened_at": now.isoformat()}
        if incident is not None:
            # A reminder: the same incident, one message further. A new incident's id is the id of
            # the row that opens it, so it needs no entry (see `MessageRef.of`).
            payload |= {
                "opened_at": incident.opened_at.isoformat(),
                "incident": incident.incident_id,
                "sequence": incident.sequence + 1,
            }
        alert_id = self.ledger.enqueue_alert(
            alert.job, alert.kind, alert.dedup_key, alert.severity, payload, at=now
        )
        log.info(
            "alert queued",
            job=alert.job,
            kind=alert.kind,
            severity=alert.severity,
            alert_id=alert_id,
            incident=payload.get("incident", alert_id),
            sequence=payload.get("sequence", 1),
        )
        return alert_id

    def notify(self, alert: Alert) -> int:
        """Queue a one-off message (a restatement's summary, say): never deduplicated, never an incident."""
        now = self.clock()
        payload = {"alert": alert.to_payload(), "opened_at": now.isoformat()}
        dedup_key = f"{NOTICE_KEY_PREFIX}{alert.dedup_key}/{uuid.uuid4().hex}"
        alert_id = self.ledger.enqueue_alert(
            alert.job, alert.kind, dedup_key, alert.severity, payload, at=now
        )
        log.info("notice queued", job=alert.job, kind=alert.kind, alert_id=alert_id)
        return alert_id

    def resolve(self, job: str, kind: str, detail: str) -> int | None:
        """Close the open incident of `job`/`kind` with one "resolved" message; None when none is open."""
        incident = self._open_incident(job, kind)
        if incident is None:
            return None
        resolution = Resolution(
            alert=incident.alert,
            resolves=incident.alert_id,
            detail=detail,
            opened_at=incident.opened_at,
            resolved_at=self.clock(),
        )
        resolution_id = self.ledger.enqueue_alert(
            job,
            RESOLVED_KIND,
            incident.alert.dedup_key,
            "info",
            resolution.to_payload() | {"incident": incident.incident_id, "sequence": incident.sequence + 1},
            at=resolution.resolved_at,
        )
        log.info(
            "incident resolved", job=job, kind=kind, alert_id=incident.alert_id, resolution_id=resolution_id
        )
        return resolution_id

    # delivery -----------------------------------------------------------------------------------

    def deliver_due(self) -> DeliveryReport:
        """Send due outbox rows oldest first; stop at the first one Slack refuses for now."""
        sent: list[int] = []
        logged: list[int] = []
        failed: list[int] = []
        retry_at: datetime | None = None
        now = self.clock()
        due = self.ledger.due_alerts(now)
        try:
            webhook = self.webhook if due else None
        except SecretNotFoundError as missing:
            # Not Slack's refusal: no attempt is counted, and the alerts wait until it resolves.
            log.error("ALERTS WAIT IN THE OUTBOX: the Slack webhook cannot be read", error=str(missing))
            return DeliveryReport((), (), (), None)
        for record in due:
            if not self.ledger.claim_alert(record.id, now, lease_until=now + CLAIM_LEASE):
                # Another process is working through the queue; it keeps the order.
                break
            message = slack_message(record)
            if webhook is None:
                self._to_console(record, message)
                self.ledger.update_alert(
                    record.id, status="logged", attempts=record.attempts + 1, sent_at=self.clock()
                )
                logged.append(record.id)
                continue
            try:
                self._post(webhook, message)
            except AlertDeliveryError as refusal:
                retry_at = self._after_refusal(record, refusal, message)
                if retry_at is None:
                    failed.append(record.id)
                if _transient(refusal):
                    # Slack (or the way to it) is struggling: the rows behind wait their turn.
                    break
            else:
                self.ledger.update_alert(
                    record.id, status="sent", attempts=record.attempts + 1, sent_at=self.clock()
                )
                sent.append(record.id)
        report = DeliveryReport(tuple(sent), tuple(logged), tuple(failed), retry_at)
        if sent or logged or failed or retry_at:
            log.info("alert delivery pass", summary=report.line())
        return report

    @staticmethod
    def _post(webhook: WebhookClient, message: dict[str, Any]) -> None:
        from slack_sdk.errors import SlackRequestError

        try:
            response = webhook.send_dict(message)
        # ValueError: urllib's refusal of a URL without a scheme.
        except (OSError, HTTPException, SlackRequestError, ValueError) as error:
            # The errors about a bad URL quote it ("Invalid URL detected: ..."): the ledger and the
            # logs get them without it.
            problem = str(error).replace(webhook.url, MASK)
            raise AlertDeliveryError(None, f"Slack unreachable: {problem}") from error
        if not 200 <= response.status_code < 300:
            raise AlertDeliveryError(
                response.status_code, response.body or "", _retry_after(response.headers or {})
            )

    def _after_refusal(
        self, record: AlertRecord, refusal: AlertDeliveryError, message: dict[str, Any]
    ) -> datetime | None:
        """Schedule the next attempt and return its time, or mark the row failed and return None."""
        attempts = record.attempts + 1
        error = str(refusal) if refusal.status is not None else refusal.detail
        if not _transient(refusal) or attempts >= self.slack.max_attempts:
            # Other 4xx: Slack rejects this request itself (bad payload, revoked webhook); no resend helps.
            self.ledger.update_alert(record.id, status="failed", attempts=attempts, last_error=error)
            log.error(
                "ALERT NOT DELIVERED: giving up; the alert stays in the ledger as failed",
                alert_id=record.id,
                job=record.job,
                kind=record.kind,
                attempts=attempts,
                error=error,
                text=message["text"],
            )
            return None
        wait = (
            refusal.retry_after
            if refusal.status == 429 and refusal.retry_after is not None
            else backoff_seconds(attempts)
        )
        retry_at = self.clock() + timedelta(seconds=wait)
        self.ledger.update_alert(
            record.id, status="pending", attempts=attempts, last_error=error, next_attempt_at=retry_at
        )
        log.warning(
            "alert delivery deferred",
            alert_id=record.id,
            job=record.job,
            attempts=attempts,
            error=error,
            retry_in=wait,
        )
        return retry_at

    def _to_console(self, record: AlertRecord, message: dict[str, Any]) -> None:
        # With no webhook the console is the delivery channel, so the whole text goes there as is.
        print(
            f"[streamwarden alert #{record.id}, no Slack webhook in {self.slack.webhook_url or 'null'}] "
            f"{message['text']}",
            file=sys.stderr,
            flush=True,
        )
