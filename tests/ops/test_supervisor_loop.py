"""The supervisor's whole loop over a driver's lifecycle: the real `Supervisor`, the real SQLite
ledger and alert outbox, a real Slack stand-in on loopback, and a fake launch backend and clock.

`decide()` alone is tested in test_supervisor_policy.py; these tests check what the passes add up
to: which runs the ledger holds and how they ended, the decisions and their outcomes, the time
between a failure and the relaunch, and what reached Slack. No Spark, no processes: a pass takes
milliseconds, so time moves one fake second per pass.
"""

from __future__ import annotations

from datetime import timedelta
from itertools import groupby, pairwise

import pytest

import ops.ledger.store as ledger_module
from ops.alerts import AlertCenter
from ops.control.policy import backoff_seconds
from ops.control.supervisor import Supervisor
from ops.ledger.store import Ledger
from ops.spec.job import Operations, find_job
from ops.spec.platform import PlatformConfig
from ops.states import CONFIG_FAILURE, FAILURE
from tests.support.clock import FakeClock
from tests.support.drivers import edit_job
from tests.support.fake_backend import FakeBackend
from tests.support.slack import SlackReceiver

JOB = "router"


@pytest.fixture
def supervisor(
    platform_conf: PlatformConfig,
    ledger: Ledger,
    fake_backend: FakeBackend,
    fake_clock: FakeClock,
    slack_webhook: SlackReceiver,
    monkeypatch: pytest.MonkeyPatch,
) -> Supervisor:
    """The real supervisor of the throwaway platform on the fake backend and clock, paging Slack."""
    # Periodic savepoints need S3, which these tests leave out; they are tested in test_savepoints.
    edit_job(platform_conf, JOB, lambda spec: spec["operations"]["savepoints"].update(interval_minutes=None))
    # The ledger stamps run ends, decisions and state changes with its own `utcnow`: on the fake
    # clock too, so a run's stop and the backoff measured from it are on the supervisor's time line.
    monkeypatch.setattr(ledger_module, "utcnow", fake_clock)
    alerts = AlertCenter(ledger, platform_conf.slack, fake_clock)
    return Supervisor(platform_conf, ledger, fake_backend, alerts, clock=fake_clock)


@pytest.fixture
def operations(platform_conf: PlatformConfig) -> Operations:
    """The router's operations settings: trigger interval, health graces, restart policy."""
    return find_job(JOB, platform_conf.conf_dir).operations


def reconcile_until(supervisor: Supervisor, clock: FakeClock, state: str, passes: int = 300) -> list[str]:
    """Run a pass every fake second until one reports `state`; the states reported, repeats collapsed."""
    seen = []
    for _ in range(passes):
        seen.append(supervisor.reconcile(JOB).state)
        if seen[-1] == state:
            return [name for name, _ in groupby(seen)]
        clock.advance(1)
    raise AssertionError(f"no pass reported {state} in {passes} passes: {[n for n, _ in groupby(seen)]}")


def start_running(supervisor: Supervisor, backend: FakeBackend) -> None:
    """Launch the router, let its driver commit a batch and run the pass that sees it RUNNING."""
    assert supervisor.reconcile(JOB).state == "SUBMITTED"
    backend.commit(JOB)
    assert supervisor.reconcile(JOB).state == "RUNNING"


def decided(ledger: Ledger) -> list[str]:
    """The actions of the router's decision rows, oldest first."""
    return [decision.action for decision in reversed(ledger.decisions(JOB))]


def paged(ledger: Ledger) -> list[str]:
    """The kinds of the router's alert outbox rows, oldest first ("resolved" closes an incident)."""
    return [alert.kind for alert in reversed(ledger.alerts(JOB))]


def texts(receiver: SlackReceiver) -> list[str]:
    return [message["text"] for message in receiver.messages]


def test_a_launched_driver_is_submitted_until_its_first_batch_then_running(
    supervisor: Supervisor,
    fake_backend: FakeBackend,
    fake_clock: FakeClock,
    ledger: Ledger,
    slack_webhook: SlackReceiver,
) -> None:
    first = supervisor.reconcile(JOB)
    driver = fake_backend.driver(JOB)
    assert (first.state, first.actions) == ("SUBMITTED", (f"launch: run {driver.run_id} pid {driver.pid}",))
    run = ledger.current_run(JOB)
    assert (run.run_id, run.backend, run.pid, run.app_id) == (
        driver.run_id,
        "fake",
        driver.pid,
        f"fake-{driver.pid}",
    )

    fake_clock.advance(10)
    assert supervisor.reconcile(JOB).state == "SUBMITTED", "no heartbeat yet, inside the startup grace"

    fake_backend.commit(JOB)
    fake_clock.advance(1)
    running = supervisor.reconcile(JOB)
    assert (running.state, running.reason, running.actions) == ("RUNNING", "progress at batch 0", ())
    fake_backend.commit(JOB, batches=2)
    fake_clock.advance(5)
    assert supervisor.reconcile(JOB).reason == "progress at batch 2"
    fake_backend.idle(JOB)
    fake_clock.advance(4)
    assert supervisor.reconcile(JOB).reason == "idle at batch 2"

    job = ledger.job(JOB)
    assert (job.state, job.desired_state, job.last_batch_id) == ("RUNNING", "running", 2)
    assert job.heartbeat_at == fake_clock.now - timedelta(seconds=4)
    run = ledger.current_run(JOB)
    assert (run.first_batch_id, run.last_batch_id, run.stopped_at) == (0, 2, None)
    # What the graces learn from: launch -> first heartbeat, and the longest batch so far.
    assert (run.start_seconds, run.longest_batch_seconds) == (10.0, 0.1)
    assert decided(ledger) == ["launch"]
    assert (fake_backend.launches, fake_backend.stops, fake_backend.kills) == (1, 0, 0)
    assert paged(ledger) == [] and slack_webhook.requests == []


def test_a_crashed_driver_is_closed_paged_and_relaunched_after_the_backoff(
    supervisor: Supervisor,
    fake_backend: FakeBackend,
    fake_clock: FakeClock,
    ledger: Ledger,
    slack_webhook: SlackReceiver,
    operations: Operations,
) -> None:
    start_running(supervisor, fake_backend)
    fake_backend.commit(JOB, batches=2)
    crashed = fake_backend.driver(JOB)
    fake_backend.crash(JOB)
    fake_clock.advance(1)

    closing = supervisor.reconcile(JOB)
    assert closing.state == "RESTARTING"
    assert [action.split(":")[0] for action in closing.actions] == ["close_run", "alert"]
    (closed,) = ledger.runs(JOB)
    assert closed.exit_reason == f"{FAILURE}driver process {crashed.pid} is gone"
    assert closed.stopped_at == fake_clock.now
    assert fake_backend.kills == 1, "closing a dead run kills what it may have left behind"
    (page,) = texts(slack_webhook)
    assert page.startswith("🔴 [CRITICAL] router down: RESTARTING. Reason: driver process")
    assert "Last batch: 2." in page

    backoff = operations.restart.initial_backoff_seconds
    fake_clock.advance(backoff - 1)
    waiting = supervisor.reconcile(JOB)
    assert (waiting.state, waiting.actions) == ("RESTARTING", ())
    assert fake_backend.launches == 1

    fake_clock.advance(1)
    relaunch = supervisor.reconcile(JOB)
    assert relaunch.state == "SUBMITTED" and relaunch.actions[0].startswith("launch: run ")
    assert ledger.decisions(JOB, action="launch")[0].reason == f"restart 1 after {backoff:g}s backoff"
    second, first = ledger.runs(JOB)
    assert second.started_at - first.stopped_at == timedelta(seconds=backoff)

    # The new driver goes on from the checkpoint: its first batch follows the crashed run's last.
    assert fake_backend.commit(JOB) == 3
    recovered = supervisor.reconcile(JOB)
    assert (recovered.state, recovered.actions) == ("RUNNING", ("resolve_alert: resolved",))
    assert ledger.current_run(JOB).first_batch_id == 3
    assert paged(ledger) == ["down", "resolved"]
    assert texts(slack_webhook)[1].startswith(f"✅ resolved: router down after {backoff:g}s")
    assert decided(ledger) == ["launch", "close_run", "alert", "launch", "resolve_alert"]


@pytest.mark.parametrize(
    ("knob", "exit_reason", "pages"),
    [
        pytest.param("crash_next", FAILURE + "driver process", ["down", "restart_storm"], id="crashes"),
        # A launch that fails leaves no driver to be down: only the storm pages.
        pytest.param(
            "fail_launch_next", FAILURE + "launch: cannot start driver", ["restart_storm"], id="launch-fails"
        ),
    ],
)
def test_failing_runs_back_off_exponentially_then_suspend_as_a_restart_storm(
    knob: str,
    exit_reason: str,
    pages: list[str],
    supervisor: Supervisor,
    fake_backend: FakeBackend,
    fake_clock: FakeClock,
    ledger: Ledger,
    operations: Operations,
) -> None:
    policy = operations.restart
    getattr(fake_backend, knob)(policy.budget + 1)

    states = reconcile_until(supervisor, fake_clock, "SUSPENDED")

    # Every failed run but the last is relaunched after its backoff; the one past the budget is not.
    assert states == ["SUBMITTED", "RESTARTING"] * policy.budget + ["SUBMITTED", "SUSPENDED"]
    runs = ledger.runs(JOB)[::-1]
    assert len(runs) == fake_backend.launches == policy.budget + 1
    assert all(run.exit_reason.startswith(exit_reason) for run in runs), [r.exit_reason for r in runs]
    gaps = [(later.started_at - earlier.stopped_at).total_seconds() for earlier, later in pairwise(runs)]
    assert (
        gaps
        == [backoff_seconds(streak, policy) for streak in range(1, policy.budget + 1)]
        == [2, 4, 8, 16, 32]
    )
    job = ledger.job(JOB)
    assert (job.state, job.desired_state) == ("SUSPENDED", "suspended")
    assert job.state_reason.startswith(
        f"restart storm: {policy.budget + 1} failed runs in a row exceed the budget of {policy.budget} "
        f"(newest first: {runs[-1].run_id} failed: "
    )
    assert paged(ledger) == pages

    # Suspended stays suspended, however long nobody looks.
    fake_clock.advance(6 * 3600)
    later = supervisor.reconcile(JOB)
    assert (later.state, later.actions) == ("SUSPENDED", ())
    assert fake_backend.launches == policy.budget + 1
    assert paged(ledger) == pages


def test_resume_after_a_storm_resets_the_restart_budget(
    supervisor: Supervisor,
    fake_backend: FakeBackend,
    fake_clock: FakeClock,
    ledger: Ledger,
    slack_webhook: SlackReceiver,
    operations: Operations,
) -> None:
    policy = operations.restart
    fake_backend.crash_next(policy.budget + 1)
    reconcile_until(supervisor, fake_clock, "SUSPENDED")
    fake_clock.advance(60)

    supervisor.request(JOB, "resume", "input fixed")
    resumed = supervisor.reconcile(JOB)
    # No backoff after a resume, although the streak before it would now wait 64 s.
    assert resumed.state == "SUBMITTED" and resumed.actions[0].startswith("launch: run ")
    fake_backend.crash(JOB)
    fake_clock.advance(1)
    again = supervisor.reconcile(JOB)
    assert again.state == "RESTARTING"
    assert ledger.decisions(JOB, action="close_run")[0].inputs["restart_streak"] == 1
    assert (
        ledger.decisions(JOB, action="close_run")[0].inputs["backoff_seconds"]
        == policy.initial_backoff_seconds
    )

    fake_clock.advance(policy.initial_backoff_seconds)
    assert supervisor.reconcile(JOB).state == "SUBMITTED"
    fake_backend.commit(JOB)
    recovered = supervisor.reconcile(JOB)
    assert recovered.state == "RUNNING"
    assert recovered.actions == ("resolve_alert: resolved", "resolve_alert: resolved")
    assert paged(ledger) == ["down", "restart_storm", "resolved", "resolved"]
    assert [text.split(" after ")[0] for text in texts(slack_webhook)[2:]] == [
        "✅ resolved: router down",
        "✅ resolved: router restart storm",
    ]


def test_a_driver_that_never_heartbeats_is_killed_as_stuck_and_relaunched(
    supervisor: Supervisor,
    fake_backend: FakeBackend,
    fake_clock: FakeClock,
    ledger: Ledger,
    operations: Operations,
) -> None:
    fake_backend.hang_next()
    assert supervisor.reconcile(JOB).state == "SUBMITTED"
    grace = operations.health.startup_grace_seconds
    fake_clock.advance(grace)
    assert supervisor.reconcile(JOB).state == "SUBMITTED", "still inside the startup grace"

    fake_clock.advance(1)
    stuck = supervisor.reconcile(JOB)
    assert stuck.state == "RESTARTING"
    assert [action.split(":")[0] for action in stuck.actions] == ["stop", "alert"]
    assert stuck.actions[0] == "stop: killed"
    (run,) = ledger.runs(JOB)
    assert (
        run.exit_reason == f"{FAILURE}no heartbeat {grace + 1:.0f}s after launch (startup grace {grace:g}s)"
    )
    assert (fake_backend.kills, fake_backend.stops) == (1, 0)
    assert fake_backend.driver(JOB).ended == "killed"

    states = reconcile_until(supervisor, fake_clock, "SUBMITTED")
    assert states == ["RESTARTING", "SUBMITTED"] and fake_backend.launches == 2
    fake_backend.commit(JOB)
    assert supervisor.reconcile(JOB).actions == ("resolve_alert: resolved",)
    assert paged(ledger) == ["down", "resolved"]


def test_a_driver_whose_heartbeats_stop_is_killed_as_stuck(
    supervisor: Supervisor,
    fake_backend: FakeBackend,
    fake_clock: FakeClock,
    ledger: Ledger,
    operations: Operations,
) -> None:
    start_running(supervisor, fake_backend)
    fake_backend.hang(JOB)
    limit = operations.trigger.interval_seconds + operations.health.stuck_grace_seconds
    fake_clock.advance(limit)
    assert supervisor.reconcile(JOB).state == "RUNNING", "the last heartbeat is just within the limit"

    fake_clock.advance(1)
    stuck = supervisor.reconcile(JOB)
    assert (stuck.state, stuck.actions[0]) == ("RESTARTING", "stop: killed")
    (run,) = ledger.runs(JOB)
    assert run.exit_reason == f"{FAILURE}last heartbeat {limit + 1:.0f}s ago (limit {limit:g}s)"
    assert fake_backend.kills == 1 and paged(ledger) == ["down"]


def test_suspend_request_stops_the_driver_gracefully_and_it_stays_down(
    supervisor: Supervisor,
    fake_backend: FakeBackend,
    fake_clock: FakeClock,
    ledger: Ledger,
    slack_webhook: SlackReceiver,
) -> None:
    start_running(supervisor, fake_backend)
    supervisor.request(JOB, "suspend", "maintenance window")

    suspended = supervisor.reconcile(JOB)
    assert (suspended.state, suspended.actions) == ("SUSPENDED", ("stop: stopped gracefully",))
    (run,) = ledger.runs(JOB)
    assert run.exit_reason == "stopped: suspended" and run.stopped_at == fake_clock.now
    assert (fake_backend.stops, fake_backend.kills) == (1, 0)

    fake_clock.advance(24 * 3600)
    later = supervisor.reconcile(JOB)
    assert (later.state, later.actions) == ("SUSPENDED", ())
    assert fake_backend.launches == 1
    assert decided(ledger) == ["launch", "request_suspend", "stop"]
    assert paged(ledger) == [] and slack_webhook.requests == [], "a requested stop pages nobody"


def test_restart_request_stops_gracefully_and_relaunches_in_one_pass(
    supervisor: Supervisor, fake_backend: FakeBackend, fake_clock: FakeClock, ledger: Ledger
) -> None:
    start_running(supervisor, fake_backend)
    fake_clock.advance(30)
    supervisor.request(JOB, "restart", "new reference data")

    restarted = supervisor.reconcile(JOB)
    assert restarted.state == "SUBMITTED"
    assert restarted.actions[0] == "stop: stopped gracefully" and restarted.actions[1].startswith(
        "launch: run "
    )
    new, old = ledger.runs(JOB)
    assert old.exit_reason == "stopped: restart requested" and new.stopped_at is None
    assert (fake_backend.launches, fake_backend.stops, fake_backend.kills) == (2, 1, 0)
    # A requested restart is no failure: the next crash backs off as the first one.
    fake_backend.crash(JOB)
    fake_clock.advance(1)
    supervisor.reconcile(JOB)
    assert ledger.decisions(JOB, action="close_run")[0].inputs["restart_streak"] == 1


def test_a_failed_launch_is_a_failed_run_that_backs_off(
    supervisor: Supervisor,
    fake_backend: FakeBackend,
    fake_clock: FakeClock,
    ledger: Ledger,
    operations: Operations,
) -> None:
    fake_backend.fail_launch_next()
    first = supervisor.reconcile(JOB)
    assert first.actions == (
        "launch: failed: launch: cannot start driver for job 'router': [Errno 28] No space left on device",
    )
    (failed,) = ledger.runs(JOB)
    assert (failed.pid, failed.stopped_at) == (None, fake_clock.now)
    assert ledger.current_run(JOB) is None

    states = reconcile_until(supervisor, fake_clock, "SUBMITTED")
    assert states == ["RESTARTING", "SUBMITTED"]
    assert fake_clock.now - failed.stopped_at == timedelta(seconds=operations.restart.initial_backoff_seconds)
    fake_backend.commit(JOB)
    assert supervisor.reconcile(JOB).state == "RUNNING"
    assert fake_backend.launches == 2 and len(ledger.runs(JOB)) == 2


def test_a_spec_the_driver_rejects_is_not_relaunched_until_the_file_changes(
    supervisor: Supervisor,
    fake_backend: FakeBackend,
    fake_clock: FakeClock,
    ledger: Ledger,
    platform_conf: PlatformConfig,
) -> None:
    assert supervisor.reconcile(JOB).state == "SUBMITTED"
    fake_backend.crash(JOB, error_class="ConfigError", error_message="route 'purchases': bad filter")
    fake_clock.advance(1)

    failed = supervisor.reconcile(JOB)
    assert failed.state == "FAILED"
    assert [action.split(":")[0] for action in failed.actions] == ["close_run", "alert", "alert"]
    (run,) = ledger.runs(JOB)
    assert run.exit_reason == CONFIG_FAILURE + "query terminated (ConfigError: route 'purchases': bad filter)"
    fake_clock.advance(3600)
    assert supervisor.reconcile(JOB).actions == ()
    assert fake_backend.launches == 1 and paged(ledger) == ["down", "spec_rejected"]

    # A changed file is a new config version: launched (its backoff ran out long ago), and once it
    # runs, both pages resolve.
    edit_job(platform_conf, JOB, lambda spec: spec["operations"]["trigger"].update(interval_seconds=10))
    relaunched = supervisor.reconcile(JOB)
    assert relaunched.state == "SUBMITTED" and relaunched.actions[0].startswith("launch: run ")
    assert ledger.current_run(JOB).config_version != run.config_version
    fake_backend.commit(JOB)
    assert supervisor.reconcile(JOB).state == "RUNNING"
    assert paged(ledger) == ["down", "spec_rejected", "resolved", "resolved"]
