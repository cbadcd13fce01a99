"""A real HTTP server on loopback standing in for Slack's incoming-webhook endpoint.

It answers each POST with the next scripted response (`respond_with(429, retry_after=1)`,
`respond_with(500)`), or with Slack's `200 ok` when the script is empty. It records every request
and, separately, the messages it accepted (answered 2xx) with their parsed JSON body.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from ops.secrets import SecretReference
from ops.spec.platform import SlackConfig

# The variable the default `slack.webhook_url` reference (`env:...`) reads.
WEBHOOK_ENV = SecretReference.parse(SlackConfig().webhook_url).locator
WEBHOOK_PATH = "/services/T0000TEST/B0000TEST/streamwardentestsecret"


@dataclass(frozen=True)
class ScriptedResponse:
    status: int
    body: str
    retry_after: float | None = None


@dataclass(frozen=True)
class ReceivedRequest:
    path: str
    headers: dict[str, str]
    body: bytes
    status: int

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class SlackReceiver:
    """Slack's webhook endpoint on 127.0.0.1; port 0 picks a free port."""

    port: int = 0
    requests: list[ReceivedRequest] = field(default_factory=list)
    _script: deque[ScriptedResponse] = field(default_factory=deque)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{WEBHOOK_PATH}"

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The JSON bodies of the requests answered 2xx, in arrival order."""
        with self._lock:
            return [request.json() for request in self.requests if 200 <= request.status < 300]

    def respond_with(self, status: int, body: str | None = None, *, retry_after: float | None = None) -> None:
        """Queue the answer to the next unanswered request (Slack-like bodies by default)."""
        default_body = {429: "rate_limited", 400: "invalid_payload", 404: "no_service"}.get(
            status, "internal_error"
        )
        with self._lock:
            self._script.append(
                ScriptedResponse(status, body if body is not None else default_body, retry_after)
            )

    def _answer(self, path: str, headers: dict[str, str], body: bytes) -> ScriptedResponse:
        with self._lock:
            response = self._script.popleft() if self._script else ScriptedResponse(200, "ok")
            self.requests.append(ReceivedRequest(path, headers, body, response.status))
        return response

    def start(self) -> SlackReceiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                response = receiver._answer(self.path, dict(self.headers.items()), body)
                payload = response.body.encode()
                self.send_response(response.status)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(payload)))
                if response.retry_after is not None:
                    self.send_header("Retry-After", f"{response.retry_after:g}")
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                # Every request is recorded on the receiver; stderr stays free for what tests assert on.
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="slack-receiver",
            daemon=True,
        )
        self._thread.start()
        return self

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> SlackReceiver:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def use_webhook(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    """Point the platform's Slack webhook setting at `url` for this test."""
    monkeypatch.setenv(WEBHOOK_ENV, url)


@pytest.fixture
def slack_receiver() -> Iterator[SlackReceiver]:
    """A running Slack stand-in, shut down after the test."""
    with SlackReceiver() as receiver:
        yield receiver


@pytest.fixture
def slack_webhook(slack_receiver: SlackReceiver, monkeypatch: pytest.MonkeyPatch) -> SlackReceiver:
    """The Slack stand-in, configured as the platform's webhook."""
    use_webhook(monkeypatch, slack_receiver.url)
    return slack_receiver
