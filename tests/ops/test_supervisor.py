"""The supervisor with real drivers: a sessionizer whose state and watermark cross the job's health
limits. Its loop over a driver's lifecycle is tested on a fake backend in test_supervisor_loop.py."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from ops.clock import utcnow
from ops.control.alerts import AlertCenter
from ops.control.launcher import LaunchedDriver, LocalProcessBackend
from ops.control.policy import FAILURE
from ops.control.supervisor import Supervisor, stop_all_jobs
from ops.driver.telemetry import read_heartbeat
from ops.ledger.store import Ledger
from ops.spec.job import JobSpec, find_job
from ops.spec.platform import PlatformConfig
from synthetic.generator import write_batch
from tests.support.drivers import caught_up, edit_job, fast_trigger, wait_for, write_sessions_input
from tests.support.fake_backend import FakeBackend
from tests.support.platform import job_paths
from tests.support.slack import SlackReceiver


def test_a_metrics_port_held_by_another_process_fails_the_job_once_and_it_launches_when_free(
    platform_conf: PlatformConfig, ledger: Ledger, slack_webhook: SlackReceiver
) -> None:
    port = find_job("router", platform_conf.conf_dir).operations.metrics_port
    backend = FakeBackend(platform_conf, utcnow)
    supervisor = Supervisor(platform_conf, ledger, backend, AlertCenter(ledger, platform_conf.slack))
    squatter = socket.create_server(("127.0.0.1", port))
    try:
        passes = [supervisor.reconcile("router") for _ in range(4)]
        assert [p.state for p in passes] == ["FAILED"] * 4
        assert backend.launches == 0 and ledger.runs("router") == []
        # Nothing for the watcher to react to while the port stays taken: no restart loop.
        assert supervisor.attention("router") is None
        [page] = [message["text"] for message in slack_webhook.messages]
        assert "router port in use: FAILED" in page
        assert (
            f"field 'operations.metrics_port': port {port} of job 'router' is in use by another process"
            in page
        )
    finally:
        squatter.close()

    assert (supervisor.attention("router") or "").startswith("launch")
    supervisor.reconcile("router")
    assert backend.launches == 1


def tight_limits(spec: dict[str, Any]) -> None:
    spec["operations"]["trigger"] = {"interval_seconds": 1, "max_files_per_trigger": 1}
    # Any RocksDB state is above 0.001 MB; the scenario's event times are in 2025.
    spec["operations"]["health"].update(max_state_memory_mb=0.001, max_watermark_lag_seconds=3600)


# Supervisor.for_platform launches real drivers through the local backend.
@pytest.mark.spark
def test_state_pressure_and_watermark_lag_of_a_running_driver_degrade_it_and_page(
    platform_conf: PlatformConfig, ledger: Ledger, slack_webhook: SlackReceiver
) -> None:
    platform = platform_conf
    edit_job(platform, "sessionizer", tight_limits)
    for seed in range(2):
        write_sessions_input(platform, seed)
    supervisor = Supervisor.for_platform(platform)
    try:
        supervisor.reconcile("sessionizer")
        wait_for(lambda: caught_up(platform, "sessionizer", files=2), 240, "the sessionizer's batches")

        def pages() -> list[str]:
            return [message["text"] for message in slack_webhook.messages]

        # The heartbeat of the last batch can land a moment after its commit: until it does, a pass
        # sees batch 0, whose watermark is still the epoch, so only the state pressure holds.
        wait_for(
            lambda: supervisor.reconcile("sessionizer").state == "DEGRADED" and len(pages()) >= 2,
            30,
            "DEGRADED with two pages",
        )
        (run,) = ledger.runs("sessionizer")
        assert run.stopped_at is None, "a degraded job keeps running"
        texts = pages()
        assert any("state holds" in text and "limit 0.001 MB" in text for text in texts), texts
        assert any("behind the wall clock (limit 3600s)" in text for text in texts), texts
    finally:
        stop_all_jobs(platform)


class FileChangingBackend(LocalProcessBackend):
    """Real local drivers; the first launch edits the job file after the supervisor loaded it."""

    def __init__(self, platform: PlatformConfig) -> None:
        super().__init__(platform)
        self.edited = False

    def launch(self, spec: JobSpec, run_id: str) -> LaunchedDriver:
        if not self.edited:
            edit_job(self.platform, spec.name, fast_trigger)
            self.edited = True
        return super().launch(spec, run_id)


@pytest.mark.spark  # starts a Spark driver without the fixtures that mark it
def test_a_driver_whose_job_file_changed_after_launch_refuses_and_the_next_run_has_the_new_file(
    platform_conf: PlatformConfig, ledger: Ledger
) -> None:
    launched = find_job("router", platform_conf.conf_dir)
    backend = FileChangingBackend(platform_conf)
    supervisor = Supervisor(platform_conf, ledger, backend, AlertCenter(ledger, platform_conf.slack))
    supervisor.reconcile("router")
    (stale,) = ledger.runs("router")
    assert stale.config_version == launched.config_version
    wait_for(lambda: not backend.is_alive(stale), 120, "the driver of the changed file to exit")
    heartbeat = read_heartbeat(job_paths(platform_conf, "router").heartbeat)
    assert (
        heartbeat is not None and heartbeat.event == "terminated" and heartbeat.error_class == "ConfigError"
    )
    message = heartbeat.error_message or ""
    assert "changed on disk" in message and f"launched with config {launched.config_version}" in message

    # The refused run is closed; the relaunch (after the first backoff) carries the file's version.
    current = find_job("router", platform_conf.conf_dir)

    def relaunched() -> bool:
        supervisor.reconcile("router")
        return len(ledger.runs("router")) == 2

    wait_for(relaunched, 60, "a relaunch")
    newest = ledger.runs("router")[0]
    assert newest.config_version == current.config_version != launched.config_version
    assert (ledger.runs("router")[1].exit_reason or "").startswith(FAILURE + "config: ")
    backend.kill(newest)


# Seconds: far below any driver's start here (the interpreter, the JVM, the session, the query),
# and above the liveness file's 2 s between reports, which a driver that moves always beats.
SHORT_STARTUP_GRACE = 5


@pytest.mark.spark  # starts a Spark driver without the fixtures that mark it
def test_a_driver_slower_to_start_than_its_grace_is_left_to_start_with_one_warning(
    platform_conf: PlatformConfig, ledger: Ledger, slack_webhook: SlackReceiver
) -> None:
    platform = platform_conf

    def slow_to_start(spec: dict[str, Any]) -> None:
        fast_trigger(spec)
        spec["operations"]["health"]["startup_grace_seconds"] = SHORT_STARTUP_GRACE

    edit_job(platform, "router", slow_to_start)
    write_batch(platform.landing_root / "events", 50, 0.0, seed=1)
    supervisor = Supervisor.for_platform(platform)
    try:
        states = []

        def committed() -> bool:
            states.append(supervisor.reconcile("router").state)
            heartbeat = read_heartbeat(job_paths(platform, "router").heartbeat)
            return heartbeat is not None and heartbeat.batch_id is not None

        wait_for(committed, 300, "the router's first committed batch")
        # Every pass past the grace saw a slow start, not a stuck driver: one run, never stopped.
        (run,) = ledger.runs("router")
        assert run.stopped_at is None
        assert "RESTARTING" not in states
        slow = [d for d in ledger.decisions("router", limit=200) if d.reason.startswith("slow start")]
        assert slow, "no pass saw the start as slow"
        assert all(f"(startup grace {SHORT_STARTUP_GRACE}s)" in d.reason for d in slow)
        assert any("starting for" in d.reason or "planning for" in d.reason for d in slow)
        # One warning, resolved once the driver ran: its first page and its resolution.
        messages = [m["text"] for m in slack_webhook.messages if "router slow start" in m["text"]]
        assert ["first page" in m for m in messages] == [True, False], messages
        assert "(resolution" in messages[1]
    finally:
        stop_all_jobs(platform)
