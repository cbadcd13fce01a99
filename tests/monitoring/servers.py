"""The real Prometheus and Pushgateway (Debian's binaries, from `make system-deps`) on loopback.

Each runs as a child process on a port from `free_test_port`, with its data under a temporary
directory, and is stopped (SIGTERM, then SIGKILL) when its context closes.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from ops.pushgateway import PUSH_GROUP_JOB
from tests.support.ports import free_test_port

PROMETHEUS = "/usr/bin/prometheus"
PUSHGATEWAY = "/usr/bin/prometheus-pushgateway"
PROMTOOL = "/usr/bin/promtool"
READY_TIMEOUT = 60.0


@dataclass(frozen=True)
class Server:
    """A running server: its base URL, process and log file."""

    url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-5000:]

    def get(self, path: str, **params: str) -> Any:
        """GET `path` (JSON answers are decoded, others returned as text)."""
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.url}{path}{query}", timeout=10) as response:
            body = response.read().decode()
            if response.headers.get_content_type() == "application/json":
                return json.loads(body)
            return body


@contextmanager
def running(command: list[str], port: int, log_path: Path) -> Iterator[Server]:
    """Start `command` (which listens on 127.0.0.1:`port`) and wait until `/-/ready` answers."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT)
    server = Server(f"http://127.0.0.1:{port}", process, log_path)
    try:
        deadline = time.monotonic() + READY_TIMEOUT
        while True:
            try:
                server.get("/-/ready")
                break
            except (urllib.error.URLError, ConnectionError):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"{command[0]} did not get ready; log:\n{server.log()}") from None
                time.sleep(0.2)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextmanager
def pushgateway(directory: Path) -> Iterator[Server]:
    """A Pushgateway on loopback that keeps its metrics in memory only: Debian's build persists them
    to /var/lib/prometheus/pushgateway.data by default, shared by every run on the machine."""
    port = free_test_port()
    command = [PUSHGATEWAY, f"--web.listen-address=127.0.0.1:{port}", "--persistence.file="]
    with running(command, port, directory / "pushgateway.log") as server:
        yield server


def pushed(gateway: Server, job: str, task: str) -> dict[str, float]:
    """The series the gateway holds for the job and task, by name."""
    wanted = {"job": PUSH_GROUP_JOB, "job_name": job, "task": task}
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(gateway.get("/metrics"))
        for sample in family.samples
        if all(sample.labels.get(label) == value for label, value in wanted.items())
        and sample.name.startswith("streamwarden_")
    }


@contextmanager
def prometheus(config: Path, directory: Path) -> Iterator[Server]:
    """Prometheus with `config` on loopback, its storage under `directory`."""
    port = free_test_port()
    command = [
        PROMETHEUS,
        f"--config.file={config}",
        f"--storage.tsdb.path={directory / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    with running(command, port, directory / "prometheus.log") as server:
        yield server


def query(server: Server, expr: str) -> list[dict[str, Any]]:
    """An instant query's result vector; a query Prometheus refuses fails the test with its error."""
    try:
        answer = server.get("/api/v1/query", query=expr)
    except urllib.error.HTTPError as error:
        raise AssertionError(f"Prometheus refused {expr!r}: {error.read().decode()}") from None
    assert answer["status"] == "success", (expr, answer)
    result: list[dict[str, Any]] = answer["data"]["result"]
    return result


def exposition_names(text: str) -> set[str]:
    """The sample names in a Prometheus text exposition (`name{labels} value`)."""
    names = set()
    for line in text.splitlines():
        if line and not line.startswith("#"):
            names.add(line.split("{", 1)[0].split(" ", 1)[0])
    return names
