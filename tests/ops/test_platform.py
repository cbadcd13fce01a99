"""The embedded platform end to end: `up()` starts real SeaweedFS, Airflow and the generator."""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path

import pytest
import yaml

from ops.driver.telemetry import read_heartbeat
from ops.embedded import platform as embedded
from ops.embedded.services import free_seaweed_ports, process_group_members
from ops.ledger.store import Ledger
from ops.spec.job import find_job
from ops.spec.platform import PlatformConfig, load_platform
from tests.support.drivers import wait_for
from tests.support.platform import job_paths
from tests.support.ports import free_test_port
from tests.support.sockets import listening_sockets, process_trees


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
    """The throwaway platform with Airflow and S3 moved to free loopback ports."""
    path = platform_conf.conf_dir / "platform.yaml"
    settings = yaml.safe_load(path.read_text())
    settings["airflow"] = {"host": "127.0.0.1", "port": free_test_port()}
    settings["s3"] = {
        "endpoint_url": f"http://127.0.0.1:{free_seaweed_ports().s3}",
        "bucket": "warden-platform",
    }
    path.write_text(yaml.safe_dump(settings))
    return load_platform(platform_conf.conf_dir)


# One start of the whole platform serves both checks: each start is minutes of a busy machine's CPU.
@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_up_status_every_socket_on_loopback_and_down(embedded_platform: PlatformConfig) -> None:
    platform = embedded_platform
    progress: list[str] = []
    heartbeat = job_paths(platform, "router").heartbeat
    try:
        embedded.up(platform, timeout=600, echo=progress.append)

        with urllib.request.urlopen(
            f"{platform.airflow.base_url}/api/v2/monitor/health", timeout=10
        ) as answer:
            health = json.load(answer)
        assert health["scheduler"]["status"] == "healthy"
        assert health["triggerer"]["status"] == "healthy"
        with urllib.request.urlopen(
            f"{platform.airflow.base_url}/api/v2/dags/warden_supervise_router"
        ) as answer:
            assert json.load(answer)["is_paused"] is False
        # Only the autostart jobs run; the others' DAGs wait, paused, in the UI.
        with urllib.request.urlopen(
            f"{platform.airflow.base_url}/api/v2/dags/warden_supervise_impressions_plays"
        ) as answer:
            assert json.load(answer)["is_paused"] is True
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

        # The router's supervision DAG launches its driver; a committed batch means its JVM, block
        # manager and metrics endpoint are all up.
        wait_for(
            lambda: (hb := read_heartbeat(heartbeat)) is not None and hb.batch_id is not None,
            900,
            "the router driver's first committed batch",
        )
        ledger = Ledger.open(platform.resolved_ledger_url)
        drivers = [run.pid for job in ledger.jobs() if (run := ledger.current_run(job.name)) and run.pid]
        services = [row.pid for row in embedded.status(platform) if row.pid is not None]
        # Drivers outlive the Airflow task that launched them, so they are roots of their own; any
        # process that carries the platform's conf dir in its environment counts too.
        marked = [int(line.split(":", 1)[0]) for line in processes_of(platform.conf_dir)]
        sockets = listening_sockets(process_trees([*services, *drivers, *marked]))
    finally:
        embedded.down(platform, echo=progress.append)

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
