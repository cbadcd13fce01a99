"""The embedded SeaweedFS S3 server and the process supervision under it, against the real binary."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from ops.embedded.services import ManagedProcess, SeaweedS3, free_seaweed_ports
from ops.exceptions import ServiceError
from ops.ports import port_holder
from tests.support.s3 import S3Server, s3_platform


def listening_addresses(port: int) -> set[str]:
    """The local IPv4/IPv6 addresses (hex, as in /proc/net/tcp*) with a listener on `port`."""
    addresses = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, port_hex = local.rsplit(":", 1)
            if state == "0A" and int(port_hex, 16) == port:  # 0A = LISTEN
                addresses.add(address)
    return addresses


def test_s3_listens_on_loopback_only(s3_server: S3Server) -> None:
    port = s3_server.service.ports.s3
    # 127.0.0.1 in /proc's little-endian hex; 0.0.0.0 and :: would mean every interface.
    assert listening_addresses(port) == {"0100007F"}
    for internal_port in s3_server.service.ports.all():
        assert listening_addresses(internal_port) <= {"0100007F"}, internal_port


def test_put_and_get_an_object(s3_server: S3Server) -> None:
    s3_server.client.put_object(Bucket=s3_server.bucket, Key="probe/hello.txt", Body=b"hello")

    body = s3_server.client.get_object(Bucket=s3_server.bucket, Key="probe/hello.txt")["Body"].read()

    assert body == b"hello"
    assert s3_server.bucket in [b["Name"] for b in s3_server.client.list_buckets()["Buckets"]]


def test_outage_makes_readiness_fail_and_data_survives_restart(s3_server: S3Server) -> None:
    s3_server.client.put_object(Bucket=s3_server.bucket, Key="probe/durable.txt", Body=b"kept")

    with s3_server.outage():
        assert not s3_server.service.process.is_running()
        with pytest.raises(ServiceError, match=r"S3 at http://127\.0\.0\.1:\d+ does not answer"):
            s3_server.service.wait_until_ready(timeout=2)

    body = s3_server.client.get_object(Bucket=s3_server.bucket, Key="probe/durable.txt")["Body"].read()
    assert body == b"kept"


def test_two_servers_with_their_own_ports_run_side_by_side(s3_server: S3Server, tmp_path: Path) -> None:
    second = SeaweedS3.for_platform(s3_platform(tmp_path, free_seaweed_ports(), bucket="second-bucket"))
    assert second is not None
    second.start()
    try:
        assert s3_server.service.process.is_running()
        assert second.endpoint_url != s3_server.endpoint_url
    finally:
        assert second.stop() == "stopped"
    assert not second.process.is_running()


@pytest.mark.parametrize("role", ["s3", "admin gRPC (admin + 10000)"])
def test_a_taken_port_of_the_block_is_refused_naming_its_holder(tmp_path: Path, role: str) -> None:
    ports = free_seaweed_ports()
    server = SeaweedS3(s3_platform(tmp_path, ports), ports)
    port = ports.by_role()[role]
    # weed mini would fail on a taken S3 port, but silently move a taken admin gRPC port elsewhere.
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        with pytest.raises(ServiceError) as refused:
            server.start(timeout=20)
    assert f"{role} port {port} is held by pid {os.getpid()} (" in str(refused.value)
    assert not server.process.is_running() and not server.process.log_path.exists(), "nothing started"


def closing_socket_on(port: int) -> None:
    """Leave `port` held by a socket no process owns, as a stopped server's connections do: a
    listener without SO_REUSEADDR in a child process accepts a connection and is killed; the
    connection, closed from this side, waits out TIME_WAIT on the port (a minute)."""
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import socket, sys, time\n"
            "listener = socket.socket()\n"
            "listener.bind(('127.0.0.1', int(sys.argv[1])))\n"
            "listener.listen()\n"
            "print('ready', flush=True)\n"
            "connection, _ = listener.accept()\n"
            "time.sleep(600)\n",
            str(port),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    try:
        with child.stdout:
            assert child.stdout.readline().strip() == "ready"
        with socket.create_connection(("127.0.0.1", port)):
            time.sleep(0.3)
            child.kill()
            child.wait()
            time.sleep(0.3)
    finally:
        child.kill()
        child.wait()


@pytest.mark.slow
def test_a_restart_waits_for_the_closing_sockets_of_the_stopped_server_instead_of_refusing(
    tmp_path: Path,
) -> None:
    ports = free_seaweed_ports()
    server = SeaweedS3(s3_platform(tmp_path, ports), ports)
    closing_socket_on(ports.s3)
    holder = port_holder(ports.s3)
    assert holder is not None and holder.pid is None, "held by a socket no process owns"
    waited = time.monotonic()
    server.start(timeout=60)
    try:
        assert server.process.is_running() and time.monotonic() - waited > 1
    finally:
        server.stop()
    # A port some process holds is still refused at once (the test above), and a closing socket
    # that outlasts the wait is refused naming what is known of it.
    other = free_seaweed_ports()
    closing_socket_on(other.s3)
    with pytest.raises(ServiceError, match=f"s3 port {other.s3} is held by a process this user cannot see"):
        SeaweedS3(s3_platform(tmp_path / "other", other), other).refuse_taken_ports(closing_wait=1)


@dataclass(frozen=True)
class ExitingSeaweed(SeaweedS3):
    """A server whose process exits at once, as weed does on a bad flag or data directory."""

    def __post_init__(self) -> None:
        argv = [sys.executable, "-c", "print('weed: cannot start'); raise SystemExit(1)"]
        process = ManagedProcess.under(self.platform.runtime_root, "seaweedfs", argv, {})
        object.__setattr__(self, "process", process)


def test_start_failure_reports_the_log_tail(tmp_path: Path) -> None:
    ports = free_seaweed_ports()
    server = ExitingSeaweed(s3_platform(tmp_path, ports), ports)
    # The message ends with the log's last lines: the starting line, then what the process said.
    with pytest.raises(
        ServiceError, match=r"seaweedfs is not running .*seaweedfs\.log:\n.*\nweed: cannot start$"
    ):
        server.start(timeout=20)


def test_managed_process_stops_its_whole_group(tmp_path: Path) -> None:
    # The parent ignores SIGTERM and leaves a child behind: stop() must escalate and reach both.
    script = (
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        "print('arm' + 'ed', flush=True)\n"
        "time.sleep(600)\n"
    )
    process = ManagedProcess.under(tmp_path, "stubborn", [sys.executable, "-c", script], {})
    pid = process.start()
    assert process.start() == pid  # starting a running service is a no-op
    # The log's header line echoes argv, so the marker is built at run time to appear only once armed.
    deadline = time.monotonic() + 30
    while "armed" not in process.log_path.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)

    assert process.stop(timeout=1) == "killed after 1s stop timeout"

    assert not process.is_running()
    assert not process.pid_path.exists()
    assert process.stop() == "not running"


def test_a_stale_pid_file_is_not_running(tmp_path: Path) -> None:
    process = ManagedProcess.under(tmp_path, "gone", [sys.executable, "-c", "pass"], {})
    process.pid_path.parent.mkdir(parents=True)
    process.pid_path.write_text("1 0\n")  # pid 1 exists but started at another time

    assert not process.is_running()
    assert process.stop() == "not running"
