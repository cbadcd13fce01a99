"""The supervisor with real drivers: a sessionizer whose state and watermark cross the job's health
limits. Its loop over a driver's lifecycle is tested on a fake backend in test_supervisor_loop.py."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from ops.alerts import AlertCenter
from ops.clock import utcnow
from ops.control.launcher import LaunchedDriver, LocalProcessBackend
from ops.control.supervisor import Supervisor, stop_all_jobs
from ops.driver.telemetry import read_heartbeat
from ops.ledger.store import Ledger
from ops.spec.job import JobSpec, find_job
from ops.spec.platform import PlatformConfig
from ops.states import FAILURE
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


# Seconds: far below any driver's start here (the interpreter, the JVM, the session, the query:
# 5-6 s on a quiet machine with the class-data archive, when a grace of 5 s let a start pass
# unwarned between two passes), and above the liveness file's 2 s between reports, which a driver
# that moves always beats.
SHORT_STARTUP_GRACE = 3
# The running limit: the 1 s trigger + this grace, just above the 10 s a job file must exceed (an
# idle query reports every 10 s).
SHORT_STUCK_GRACE = 11
# One route's filter sleeps this long per row in Spark's own `reflect` (Thread.sleep). The first
# batch reads four files of these many rows, one task each on four local threads: the tasks end 4 s
# apart and the batch takes 16 s, longer than the limit, while its tasks keep completing. A row
# whose page is `hang` sleeps 10 minutes: its task never completes, and nothing else moves.
SLEEP_PER_ROW_MS = 100
FILE_ROWS = (40, 80, 120, 160)
HANG_MS = 600_000


def sleepy(filter_sql: str) -> str:
    delay = f"CASE WHEN page = 'hang' THEN {HANG_MS} ELSE {SLEEP_PER_ROW_MS} END"
    return f"length(reflect('java.lang.Thread', 'sleep', CAST({delay} AS BIGINT))) >= 0 AND ({filter_sql})"


def hang_file(landing: Path) -> None:
    event = {"event_id": "hang-1", "event_time": "2025-01-01T00:00:00Z", "user_id": "u", "event_type": "view"}
    (landing / "events-hang.json").write_text(json.dumps({**event, "page": "hang"}) + "\n")


@pytest.mark.spark  # starts a Spark driver without the fixtures that mark it
@pytest.mark.slow
@pytest.mark.xdist_group("waiting")  # a driver sleeping in its batch (tests/conftest.py)
def test_a_slow_start_and_a_slow_batch_are_left_to_run_with_a_warning_each_and_a_hung_batch_is_killed(
    platform_conf: PlatformConfig, ledger: Ledger, slack_webhook: SlackReceiver
) -> None:
    platform = platform_conf

    def slow(spec: dict[str, Any]) -> None:
        spec["operations"]["trigger"] = {"interval_seconds": 1, "max_files_per_trigger": len(FILE_ROWS)}
        spec["operations"]["resources"]["cores"] = len(FILE_ROWS)
        spec["operations"]["health"].update(
            startup_grace_seconds=SHORT_STARTUP_GRACE, stuck_grace_seconds=SHORT_STUCK_GRACE
        )
        # Every valid row takes the first route's filter: each file's task sleeps its rows x 100 ms.
        route = spec["pipeline"]["routes"][0]
        route["filter"] = sleepy(route["filter"])

    edit_job(platform, "router", slow)
    landing = platform.landing_root / "events"
    for seed, rows in enumerate(FILE_ROWS):
        write_batch(landing, rows, 0.0, seed=seed)
    supervisor = Supervisor.for_platform(platform)
    heartbeat_file = job_paths(platform, "router").heartbeat
    try:
        states = []

        def committed() -> bool:
            # Read before the pass: the pass that ends the wait has seen the commit, and resolved
            # the slow batch's warning.
            heartbeat = read_heartbeat(heartbeat_file)
            states.append(supervisor.reconcile("router").state)
            return heartbeat is not None and heartbeat.batch_id is not None and heartbeat.event == "progress"

        wait_for(committed, 300, "the router's first committed batch")
        # Every pass past the grace saw a slow start, then a slow batch, never a stuck driver: one
        # run, never stopped.
        (run,) = ledger.runs("router")
        assert run.stopped_at is None
        assert "RESTARTING" not in states and "DEGRADED" in states, states
        reasons = [d.reason for d in ledger.decisions("router", limit=200)]
        slow_start = [r for r in reasons if r.startswith("slow start")]
        assert slow_start and all(f"(startup grace {SHORT_STARTUP_GRACE}s)" in r for r in slow_start)
        assert any("starting for" in r or "planning for" in r for r in slow_start)
        slow_batch = [r for r in reasons if r.startswith("slow batch")]
        assert slow_batch and all(f"(limit {1 + SHORT_STUCK_GRACE}s)" in r for r in slow_batch), reasons
        assert any("running for" in r and "stages active" in r for r in slow_batch)
        # One warning each, resolved once the driver ran or committed: first page, resolution.
        for kind in ("slow start", "slow batch"):
            messages = [m["text"] for m in slack_webhook.messages if f"router {kind}" in m["text"]]
            assert ["first page" in m for m in messages] == [True, False], messages
            assert "(resolution" in messages[1]

        # A batch whose task blocks: nothing moves, and the supervisor kills it as stuck once the
        # limit (learned from the slow batch it measured, the file's as its floor) has passed.
        hang_file(landing)

        def stopped() -> bool:
            supervisor.reconcile("router")
            return ledger.runs("router")[-1].stopped_at is not None

        wait_for(stopped, 300, "the hung driver stopped")
        hung = ledger.runs("router")[-1]
        assert hung.run_id == run.run_id and hung.exit_reason is not None
        assert hung.exit_reason.startswith(f"{FAILURE}last heartbeat "), hung.exit_reason
        assert "while running" in hung.exit_reason and "no move for" in hung.exit_reason
        measured = ledger.runs("router")[-1].longest_batch_seconds
        assert measured is not None and measured > 1 + SHORT_STUCK_GRACE, "the slow batch was measured"
    finally:
        stop_all_jobs(platform)
