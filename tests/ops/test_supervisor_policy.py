"""The supervisor's pure policy: decide() on plain values, no processes, no Spark."""

from __future__ import annotations

import math
import random
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from ops.control.health import MeasuredSpeed, Observation, Signal, assess
from ops.control.policy import (
    DRY_RUN_TIMEOUT_SECONDS,
    CloseRun,
    EndDryRun,
    FinishOperation,
    InstallSpec,
    JobView,
    Launch,
    RaiseAlert,
    RecoveryProgress,
    ResolveAlert,
    Restore,
    RollBack,
    StartDryRun,
    StopAfterCheck,
    StopDriver,
    SuspendJob,
    TakeSavepoint,
    TakeUpgradeSavepoint,
    backoff_seconds,
    decide,
    restart_streak,
)
from ops.driver.liveness import Liveness, Phase
from ops.driver.telemetry import BatchSample, Heartbeat
from ops.ledger.records import JobRecord, OperationRecord, RunRecord
from ops.spec.job import JobSpec, SavepointPolicy, find_job
from ops.spec.platform import DEFAULT_CONF_DIR
from ops.states import CONFIG_FAILURE, FAILURE, Lifecycle, Result, Step

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
SPEC = find_job("router", DEFAULT_CONF_DIR)
POLICY = SPEC.operations.restart
NO_PROGRESS = RecoveryProgress()
NOTHING_MEASURED = MeasuredSpeed()


def job_record(
    desired: str = "running", state: str = "RUNNING", restart_requested_at: datetime | None = None
) -> JobRecord:
    return JobRecord(
        name="router",
        desired_state=desired,
        state=state,
        state_reason="",
        state_since=NOW - timedelta(hours=1),
        restart_requested_at=restart_requested_at,
        config_version=SPEC.config_version,
        last_batch_id=None,
        input_rate=None,
        processed_rate=None,
        backlog=None,
        heartbeat_at=None,
        updated_at=NOW,
    )


def run(
    started: float, stopped: float | None = None, exit_reason: str | None = None, batches: int = 0
) -> RunRecord:
    """A run that started `started` seconds before NOW (and stopped `stopped` seconds before NOW)."""
    return RunRecord(
        run_id=f"router-{started}",
        job="router",
        backend="local",
        pid=4242,
        app_id="local-4242-1",
        metrics_port=9401,
        log_path=None,
        config_version=SPEC.config_version,
        started_at=NOW - timedelta(seconds=started),
        stopped_at=None if stopped is None else NOW - timedelta(seconds=stopped),
        exit_reason=exit_reason,
        first_batch_id=0 if batches else None,
        last_batch_id=batches - 1 if batches else None,
    )


def heartbeat(
    open_run: RunRecord, event: str = "progress", age: float = 1.0, error_class: str | None = None, samples=()
) -> Heartbeat:
    return Heartbeat(
        job="router",
        run_id=open_run.run_id,
        pid=4242,
        event=event,  # type: ignore[arg-type]
        at=(NOW - timedelta(seconds=age)).timestamp(),
        batch_id=7,
        error_class=error_class,
        recent=tuple(samples),
    )


def view(
    job: JobRecord,
    open_run: RunRecord | None = None,
    alive: bool = True,
    beat: Heartbeat | None = None,
    closed: tuple[RunRecord, ...] = (),
    open_alerts: frozenset[str] = frozenset(),
    last_savepoint: datetime | None = None,
    spec: JobSpec = SPEC,
    port_free: bool | None = None,
    operation: OperationRecord | None = None,
    progress: RecoveryProgress = NO_PROGRESS,
    liveness: Liveness | None = None,
    measured: MeasuredSpeed = NOTHING_MEASURED,
) -> JobView:
    observation = Observation(
        at=NOW,
        run=open_run,
        process_alive=alive and open_run is not None,
        heartbeat=beat,
        metrics_port_free=port_free,
        liveness=liveness,
        measured=measured,
    )
    return JobView(
        job,
        spec,
        observation,
        assess(observation, spec.operations),
        closed,
        open_alerts,
        last_savepoint,
        operation,
        progress,
    )


def kinds(plan) -> list[type]:
    return [type(action) for action in plan.actions]


def test_new_job_is_launched() -> None:
    plan = decide(view(job_record(state="SUSPENDED")), NOW)
    assert plan.state is Lifecycle.SUBMITTED
    assert kinds(plan) == [Launch]


def test_healthy_run_needs_nothing() -> None:
    current = run(started=600)
    plan = decide(view(job_record(), current, beat=heartbeat(current)), NOW)
    assert (plan.state, plan.actions) == (Lifecycle.RUNNING, ())


def test_dead_driver_is_closed_paged_and_relaunched_after_backoff() -> None:
    current = run(started=600)
    plan = decide(view(job_record(), current, alive=False, beat=heartbeat(current)), NOW)
    assert plan.state is Lifecycle.RESTARTING
    assert kinds(plan) == [CloseRun, RaiseAlert]
    assert plan.actions[0].exit_reason.startswith(FAILURE)
    assert plan.inputs["backoff_seconds"] == POLICY.initial_backoff_seconds

    died = run(started=600, stopped=POLICY.initial_backoff_seconds + 0.5, exit_reason=FAILURE + "gone")
    plan = decide(view(job_record(state="RESTARTING"), closed=(died,), open_alerts=frozenset({"down"})), NOW)
    assert plan.state is Lifecycle.SUBMITTED
    assert kinds(plan) == [Launch]


def test_down_alert_is_not_raised_twice_and_resolves_on_recovery() -> None:
    current = run(started=600)
    plan = decide(
        view(job_record(), current, alive=False, beat=heartbeat(current), open_alerts=frozenset({"down"})),
        NOW,
    )
    assert RaiseAlert not in kinds(plan)

    recovered = run(started=5)
    plan = decide(
        view(
            job_record(state="SUBMITTED"),
            recovered,
            beat=heartbeat(recovered),
            open_alerts=frozenset({"down"}),
        ),
        NOW,
    )
    assert plan.state is Lifecycle.RUNNING
    assert plan.actions == (ResolveAlert("down", plan.actions[0].reason),)


def test_stuck_driver_is_killed() -> None:
    current = run(started=600)
    stale = SPEC.operations.trigger.interval_seconds + SPEC.operations.health.stuck_grace_seconds + 1
    plan = decide(view(job_record(), current, beat=heartbeat(current, age=stale)), NOW)
    assert isinstance(plan.actions[0], StopDriver) and plan.actions[0].graceful is False
    assert "last heartbeat" in plan.actions[0].reason


def test_no_heartbeat_after_startup_grace_is_stuck() -> None:
    current = run(started=SPEC.operations.health.startup_grace_seconds + 5)
    plan = decide(view(job_record(state="SUBMITTED"), current), NOW)
    assert isinstance(plan.actions[0], StopDriver)
    young = run(started=3)
    assert decide(view(job_record(state="SUBMITTED"), young), NOW).state is Lifecycle.SUBMITTED


def liveness(open_run: RunRecord, phase: Phase, still: float, in_phase: float = 300.0) -> Liveness:
    """The run's liveness record, written just now: in `phase` for `in_phase` seconds, its last move
    `still` seconds ago."""
    return Liveness(
        run_id=open_run.run_id,
        pid=4242,
        phase=phase,
        phase_since=(NOW - timedelta(seconds=in_phase)).timestamp(),
        moved_at=(NOW - timedelta(seconds=still)).timestamp(),
        at=NOW.timestamp(),
        tasks_completed=37,
        active_stages=1,
        cpu_seconds=120.0,
    )


def test_a_slow_start_that_still_moves_warns_and_is_left_to_start() -> None:
    grace = SPEC.operations.health.startup_grace_seconds
    current = run(started=grace + 100)
    moving = liveness(current, "starting", still=1.0, in_phase=grace + 99)
    plan = decide(view(job_record(state="SUBMITTED"), current, liveness=moving), NOW)
    assert plan.state is Lifecycle.SUBMITTED
    assert kinds(plan) == [RaiseAlert] and plan.actions[0].alert_kind == "slow_start"
    assert plan.reason.startswith(f"slow start: no heartbeat {grace + 100:.0f}s after launch")
    assert "starting for" in plan.reason and "last moved 1s ago" in plan.reason
    # Warned once: while the warning is open, the pass only waits.
    plan = decide(
        view(job_record(state="SUBMITTED"), current, liveness=moving, open_alerts=frozenset({"slow_start"})),
        NOW,
    )
    assert plan.actions == ()


def test_a_start_that_stopped_moving_is_stuck_and_says_for_how_long() -> None:
    grace = SPEC.operations.health.startup_grace_seconds
    current = run(started=grace + 100)
    still = liveness(current, "planning", still=grace + 1)
    plan = decide(view(job_record(state="SUBMITTED"), current, liveness=still), NOW)
    assert isinstance(plan.actions[0], StopDriver) and plan.actions[0].graceful is False
    assert f"no move for {grace + 1:.0f}s while planning" in plan.actions[0].reason


def test_a_long_batch_whose_tasks_complete_is_slow_not_stuck() -> None:
    limit = SPEC.operations.trigger.interval_seconds + SPEC.operations.health.stuck_grace_seconds
    current = run(started=600)
    beat = heartbeat(current, age=limit + 60)
    plan = decide(view(job_record(), current, beat=beat, liveness=liveness(current, "running", still=3)), NOW)
    assert plan.state is Lifecycle.DEGRADED
    assert kinds(plan) == [RaiseAlert] and plan.actions[0].alert_kind == "slow_batch"
    assert "37 tasks done, 1 stages active" in plan.actions[0].reason
    # Its tasks stop completing: stuck once the limit has passed without a move.
    hung = liveness(current, "running", still=limit + 1)
    plan = decide(view(job_record(), current, beat=beat, liveness=hung), NOW)
    assert isinstance(plan.actions[0], StopDriver)
    assert f"no move for {limit + 1:.0f}s while running" in plan.actions[0].reason
    # Back to committing: the warning resolves.
    plan = decide(
        view(job_record(), current, beat=heartbeat(current), open_alerts=frozenset({"slow_batch"})), NOW
    )
    assert plan.state is Lifecycle.RUNNING and kinds(plan) == [ResolveAlert]


def test_graces_learn_from_the_jobs_slowest_recent_start_and_batch_the_file_stays_the_floor() -> None:
    startup = SPEC.operations.health.startup_grace_seconds
    interval = SPEC.operations.trigger.interval_seconds
    limit = interval + SPEC.operations.health.stuck_grace_seconds
    # This job's recent starts took up to 2x the file's grace: 1.5x that is its grace now.
    slow_machine = MeasuredSpeed(start_seconds=2 * startup, batch_seconds=limit)
    current = run(started=2.5 * startup)
    plan = decide(view(job_record(state="SUBMITTED"), current, measured=slow_machine), NOW)
    assert plan.state is Lifecycle.SUBMITTED and plan.actions == ()
    current = run(started=3 * startup + 1)
    plan = decide(view(job_record(state="SUBMITTED"), current, measured=slow_machine), NOW)
    assert isinstance(plan.actions[0], StopDriver)
    assert plan.actions[0].reason.endswith(
        f"(startup grace {3 * startup:g}s: 1.5 x the slowest recent start ({2 * startup:.0f}s), "
        f"above the job file's {startup:g}s)"
    )
    # A batch as long as the slowest recent one, 1.5x the file's limit, is on time.
    current = run(started=600)
    on_time = decide(
        view(job_record(), current, beat=heartbeat(current, age=limit + 10), measured=slow_machine), NOW
    )
    assert on_time.state is Lifecycle.RUNNING
    late = decide(
        view(
            job_record(),
            current,
            beat=heartbeat(current, age=interval + 1.5 * limit + 1),
            measured=slow_machine,
        ),
        NOW,
    )
    assert isinstance(late.actions[0], StopDriver)
    # Learned graces are whole seconds.
    learned = interval + math.ceil(1.5 * limit)
    assert f"(limit {learned:g}s: the {interval:g}s trigger + 1.5 x the slowest" in late.actions[0].reason
    # Faster than the file's graces: the file's values hold.
    fast = MeasuredSpeed(start_seconds=1.0, batch_seconds=0.1)
    plan = decide(view(job_record(state="SUBMITTED"), run(started=startup + 1), measured=fast), NOW)
    assert plan.actions[0].reason.endswith(f"(startup grace {startup:g}s)")


def test_backoff_doubles_up_to_the_cap() -> None:
    assert [backoff_seconds(n, POLICY) for n in (1, 2, 3)] == [2.0, 4.0, 8.0]
    assert backoff_seconds(50, POLICY) == POLICY.max_backoff_seconds


def test_streak_stops_at_a_stable_run_or_an_operator_reset() -> None:
    failed = [run(started=100 * i + 50, stopped=100 * i, exit_reason=FAILURE + "x") for i in range(1, 4)]
    stable = run(started=10_000, stopped=400, exit_reason=FAILURE + "x", batches=POLICY.stable_batches)
    assert restart_streak((*failed, stable), POLICY, None, NOW) == 3
    assert restart_streak((*failed, stable), POLICY, NOW - timedelta(seconds=300), NOW) == 2
    graceful = run(started=10_000, stopped=400, exit_reason="stopped: suspended")
    assert restart_streak((failed[0], graceful, *failed[1:]), POLICY, None, NOW) == 1


def test_restart_storm_suspends_and_pages() -> None:
    failures = tuple(
        run(started=10 * i + 5, stopped=10 * i, exit_reason=FAILURE + "boom")
        for i in range(POLICY.budget + 1)
    )
    plan = decide(view(job_record(state="RESTARTING"), closed=failures), NOW)
    assert plan.state is Lifecycle.SUSPENDED
    assert kinds(plan) == [SuspendJob, RaiseAlert]
    assert plan.actions[1].alert_kind == "restart_storm"


def test_the_storm_page_names_the_runs_judged_hung_and_why() -> None:
    limit = SPEC.operations.trigger.interval_seconds + SPEC.operations.health.stuck_grace_seconds
    hung = f"last heartbeat 50s ago, no move for 48s while running (limit {limit:g}s)"
    reasons = [hung, "driver process 4242 is gone", "no heartbeat 400s after launch (startup grace 90s)"]
    reasons += ["query terminated (Boom: " + "x" * 500 + ")"] * (POLICY.budget + 1 - len(reasons))
    streak = tuple(
        run(started=10 * i + 5, stopped=10 * i, exit_reason=FAILURE + why) for i, why in enumerate(reasons)
    )
    plan = decide(view(job_record(state="RESTARTING"), closed=streak), NOW)
    page = plan.actions[1].reason
    assert page.startswith(
        f"restart storm: {POLICY.budget + 1} failed runs in a row exceed the budget of {POLICY.budget} "
        f"(newest first: {streak[0].run_id} judged hung: {hung}; {streak[1].run_id} failed: driver process"
    )
    assert f"{streak[2].run_id} judged hung: no heartbeat 400s after launch" in page
    # A long error is cut: the page stays readable.
    assert "x" * 200 not in page and page.endswith(")")


def test_spec_rejected_by_the_driver_is_not_restarted() -> None:
    current = run(started=30)
    beat = heartbeat(current, event="terminated", error_class="ConfigError")
    plan = decide(view(job_record(), current, beat=beat), NOW)
    assert plan.actions[0].exit_reason.startswith(CONFIG_FAILURE)

    rejected = run(started=30, stopped=1, exit_reason=CONFIG_FAILURE + "bad filter")
    plan = decide(view(job_record(), closed=(rejected,)), NOW)
    assert plan.state is Lifecycle.FAILED
    assert [a.alert_kind for a in plan.actions] == ["spec_rejected"]
    retried = decide(view(job_record(restart_requested_at=NOW), closed=(rejected,)), NOW)
    assert kinds(retried) == [Launch]


PORT_TAKEN = (
    f"field 'operations.metrics_port': port {SPEC.operations.metrics_port} of job 'router' is in use by "
    "another process on 127.0.0.1"
)


def test_a_taken_metrics_port_holds_the_job_failed_pages_once_and_launches_when_free() -> None:
    held = decide(view(job_record(state="SUSPENDED"), port_free=False), NOW)
    assert held.state is Lifecycle.FAILED and held.reason.startswith(PORT_TAKEN)
    assert kinds(held) == [RaiseAlert]
    assert (held.actions[0].alert_kind, held.actions[0].severity) == ("port_in_use", "critical")
    assert held.actions[0].reason.startswith(PORT_TAKEN)

    # Waiting is not a failed run: pass after pass, nothing is launched, nobody is paged again.
    for _ in range(3 * POLICY.budget):
        still = decide(
            view(job_record(state="FAILED"), open_alerts=frozenset({"port_in_use"}), port_free=False), NOW
        )
        assert (still.state, still.actions) == (Lifecycle.FAILED, ())

    freed = decide(
        view(job_record(state="FAILED"), open_alerts=frozenset({"port_in_use"}), port_free=True), NOW
    )
    assert kinds(freed) == [Launch]
    # The job file naming another port is looked at under that port: free, so it launches.
    moved = SPEC.model_copy(
        update={
            "operations": SPEC.operations.model_copy(update={"metrics_port": 9999}),
            "config_version": "moved",
        }
    )
    assert kinds(decide(view(job_record(state="FAILED"), spec=moved, port_free=True), NOW)) == [Launch]


def test_a_driver_that_found_its_port_taken_is_held_until_the_port_is_free() -> None:
    current = run(started=30)
    message = f"{PORT_TAKEN}; the job is not launched until the port is free or the job file names another"
    beat = replace(heartbeat(current, event="terminated", error_class="ConfigError"), error_message=message)

    closing = decide(view(job_record(), current, beat=beat), NOW)

    assert closing.state is Lifecycle.FAILED
    assert kinds(closing) == [CloseRun, RaiseAlert]
    assert closing.actions[0].exit_reason.startswith(CONFIG_FAILURE)
    assert [a.alert_kind for a in closing.actions if isinstance(a, RaiseAlert)] == ["port_in_use"]
    lost = run(started=60, stopped=10, exit_reason=closing.actions[0].exit_reason)
    open_alerts = frozenset({"port_in_use"})
    busy = decide(
        view(job_record(state="FAILED"), closed=(lost,), open_alerts=open_alerts, port_free=False), NOW
    )
    assert (busy.state, busy.actions) == (Lifecycle.FAILED, ())
    freed = decide(
        view(job_record(state="FAILED"), closed=(lost,), open_alerts=open_alerts, port_free=True), NOW
    )
    assert kinds(freed) == [Launch]


def test_running_again_resolves_the_port_page() -> None:
    current = run(started=600)
    plan = decide(
        view(job_record(), current, beat=heartbeat(current), open_alerts=frozenset({"port_in_use"})), NOW
    )
    assert [(type(a), a.alert_kind) for a in plan.actions] == [(ResolveAlert, "port_in_use")]


@pytest.mark.parametrize("state", ["RUNNING", "SUSPENDED"])
def test_suspend_stops_gracefully_then_stays_suspended(state: str) -> None:
    current = run(started=600)
    plan = decide(view(job_record(desired="suspended", state=state), current, beat=heartbeat(current)), NOW)
    assert plan.actions == (StopDriver("desired state is suspended", "stopped: suspended", graceful=True),)
    assert decide(view(job_record(desired="suspended", state="SUSPENDED")), NOW).actions == ()


def test_restart_request_stops_then_launches() -> None:
    current = run(started=600)
    plan = decide(
        view(job_record(restart_requested_at=NOW - timedelta(seconds=1)), current, beat=heartbeat(current)),
        NOW,
    )
    assert kinds(plan) == [StopDriver, Launch]
    assert plan.actions[0].exit_reason == "stopped: restart requested"


def test_a_changed_config_restarts_the_driver_only_when_the_job_file_says_so() -> None:
    current = run(started=600)
    edited = SPEC.model_copy(update={"config_version": "0123456789ab"})
    assert decide(view(job_record(), current, beat=heartbeat(current), spec=edited), NOW).actions == ()

    restart = edited.operations.restart.model_copy(update={"on_change": True})
    on_change = edited.model_copy(
        update={"operations": edited.operations.model_copy(update={"restart": restart})}
    )
    plan = decide(view(job_record(), current, beat=heartbeat(current), spec=on_change), NOW)

    assert kinds(plan) == [StopDriver, Launch]
    assert plan.actions[0].exit_reason == "stopped: config changed"
    assert plan.reason == f"restarting: config {SPEC.config_version} changed to 0123456789ab"


def test_falling_behind_degrades_and_warns_once() -> None:
    current = run(started=600)
    slow = [
        BatchSample(i, 1000, 500.0, 100.0, 9000)
        for i in range(SPEC.operations.health.falling_behind_window_batches)
    ]
    plan = decide(view(job_record(), current, beat=heartbeat(current, samples=slow)), NOW)
    assert plan.state is Lifecycle.DEGRADED
    assert [a.alert_kind for a in plan.actions] == ["falling_behind"]
    again = decide(
        view(
            job_record(),
            current,
            beat=heartbeat(current, samples=slow),
            open_alerts=frozenset({"falling_behind"}),
        ),
        NOW,
    )
    assert again.actions == ()


def test_a_draining_backlog_is_caught_up_not_falling_behind_and_a_growing_one_is() -> None:
    """Ten minutes of a backlog draining then growing again, a batch per 5 s trigger or longer:
    one assessment per batch over the window of the newest five."""
    rng = random.Random(3)
    current = run(started=600)
    series, backlog, at = [], 120.0, 1_000.0
    for i in range(120):
        draining = i < 80
        rows = rng.randint(800, 2400) if draining else 2400
        # 1.5 s fixed plus 3 ms a row: the larger batches overrun the trigger, the smaller do not.
        seconds = 1.5 + 0.003 * rows
        backlog = max(0.0, backlog - 1.2) if draining else backlog + 1
        series.append(
            BatchSample(i, rows, rows / 5, rows / seconds, round(seconds * 1000), round(backlog), at)
        )
        at += max(seconds, 5.0)
    window = SPEC.operations.health.falling_behind_window_batches
    warned = []
    for end in range(window, len(series) + 1):
        beat = heartbeat(current, samples=series[end - window : end])
        assessment = assess(view(job_record(), current, beat=beat).observation, SPEC.operations)
        warned.append(Signal.FALLING_BEHIND in assessment.signals)
    drain, growth = warned[: 80 - window], warned[80:]
    assert not any(drain), "a backlog draining is catching up"
    assert all(growth), "back-to-back batches and a growing backlog"
    # The old rule (every batch of the window longer than the trigger) came and went while it drained.
    overran = [all(s.duration_ms > 5000 for s in series[e - window : e]) for e in range(window, 80)]
    assert 0 < sum(overran) < len(overran)
    reason = assess(
        view(job_record(), current, beat=heartbeat(current, samples=series[-window:])).observation,
        SPEC.operations,
    ).reasons[Signal.FALLING_BEHIND]
    assert reason == (
        "at the 276 rows/s it read, a 5s trigger needs 1.00 of its interval (0.00 s + 3.625 ms/row "
        "over the last 5 batches); the landing backlog grew from 60 to 64 files"
    )


def with_health(**thresholds: float) -> JobSpec:
    health = SPEC.operations.health.model_copy(update=thresholds)
    return SPEC.model_copy(update={"operations": SPEC.operations.model_copy(update={"health": health})})


def test_state_pressure_and_watermark_lag_each_warn_once_and_resolve_on_their_own() -> None:
    spec = with_health(max_state_memory_mb=100, max_watermark_lag_seconds=600)
    current = run(started=600)
    beat = heartbeat(current)
    heavy = replace(beat, state_memory_bytes=250_000_000, watermark="2026-11-22T11:00:00.000Z")
    plan = decide(view(job_record(), current, beat=heavy, spec=spec), NOW)
    assert plan.state is Lifecycle.DEGRADED
    assert [(a.alert_kind, a.reason) for a in plan.actions] == [
        ("state_pressure", "state holds 250.0 MB in memory (limit 100 MB)"),
        ("watermark_lag", "watermark 2026-11-22T11:00:00.000Z is 3600s behind the wall clock (limit 600s)"),
    ]
    both = frozenset({"state_pressure", "watermark_lag"})
    assert decide(view(job_record(), current, beat=heavy, spec=spec, open_alerts=both), NOW).actions == ()

    # The watermark catches up while the state stays heavy: only the lag resolves.
    caught_up = replace(heavy, watermark="2026-11-22T11:55:00.000Z")
    plan = decide(view(job_record(), current, beat=caught_up, spec=spec, open_alerts=both), NOW)
    assert plan.state is Lifecycle.DEGRADED
    assert [(type(a), a.alert_kind) for a in plan.actions] == [(ResolveAlert, "watermark_lag")]


@pytest.mark.parametrize(
    "fields",
    [
        {"state_memory_bytes": None, "watermark": None},  # a stateless query without event time
        {"state_memory_bytes": 1_000_000, "watermark": "1970-01-01T00:00:00.000Z"},  # no event yet
    ],
)
def test_no_state_or_no_watermark_yet_is_no_pressure_and_no_lag(fields: dict[str, object]) -> None:
    spec = with_health(max_state_memory_mb=100, max_watermark_lag_seconds=600)
    current = run(started=600)
    beat = replace(heartbeat(current), **fields)
    plan = decide(view(job_record(), current, beat=beat, spec=spec), NOW)
    assert (plan.state, plan.actions) == (Lifecycle.RUNNING, ())


def test_limits_are_off_by_default() -> None:
    current = run(started=600)
    beat = replace(heartbeat(current), state_memory_bytes=10**12, watermark="2025-01-01T00:00:00.000Z")
    assert decide(view(job_record(), current, beat=beat), NOW).state is Lifecycle.RUNNING


def test_failed_launches_back_off_like_crashes() -> None:
    failed_launch = run(started=1, stopped=1, exit_reason=FAILURE + "launch: cannot start driver")
    plan = decide(view(job_record(state="SUBMITTED"), closed=(failed_launch,)), NOW)
    assert plan.state is Lifecycle.RESTARTING
    assert plan.actions == ()


def test_periodic_savepoint_is_due_one_interval_after_run_start_or_the_last_attempt() -> None:
    interval = timedelta(minutes=SPEC.operations.savepoints.interval_minutes or 0)
    young = run(started=interval.total_seconds() - 5)
    assert decide(view(job_record(), young, beat=heartbeat(young)), NOW).actions == ()

    old = run(started=2 * interval.total_seconds())
    plan = decide(view(job_record(), old, beat=heartbeat(old)), NOW)
    assert (plan.state, kinds(plan)) == (Lifecycle.RUNNING, [TakeSavepoint])
    assert "run start" in plan.actions[0].reason

    # A recent attempt (good or failed) postpones the next one by a whole interval.
    recent = NOW - interval + timedelta(seconds=5)
    assert decide(view(job_record(), old, beat=heartbeat(old), last_savepoint=recent), NOW).actions == ()
    stale = NOW - interval - timedelta(seconds=5)
    plan = decide(view(job_record(), old, beat=heartbeat(old), last_savepoint=stale), NOW)
    assert kinds(plan) == [TakeSavepoint] and "last attempt" in plan.actions[0].reason

    off = SPEC.model_copy(
        update={
            "operations": SPEC.operations.model_copy(
                update={"savepoints": SavepointPolicy(interval_minutes=None)}
            )
        }
    )
    assert decide(view(job_record(), old, beat=heartbeat(old), spec=off), NOW).actions == ()


# --- recovery operations: one test per transition of the state machines in ops.control.policy ---

CANDIDATE = SPEC.model_copy(update={"config_version": "c4nd1d4te000"})
OLD = SPEC.config_version
SAVEPOINT = "20261122T110000000000Z-b7-abc123"


def operation(kind: str, **facts: object) -> OperationRecord:
    """An open operation requested ten minutes before NOW, with the facts its steps recorded."""
    upgrade_facts: dict[str, object] = (
        {
            "candidate_spec": "...",
            "candidate_version": CANDIDATE.config_version,
            "previous_spec": "...",
            "previous_version": OLD,
            "readiness_timeout": 300.0,
        }
        if kind == "upgrade"
        else {"savepoint_id": SAVEPOINT, "savepoint_batch": 7}
    )
    return OperationRecord(
        id=1,
        job="router",
        kind=kind,
        reason="test",
        decision_id=1,
        requested_at=NOW - timedelta(minutes=10),
        step="requested",
        step_since=NOW - timedelta(minutes=10),
        **{**upgrade_facts, **facts},  # type: ignore[arg-type]
    )


REWOUND = {"replay_to": 12, "rows_before": 100, "rewound_at": NOW - timedelta(minutes=5)}


@pytest.mark.parametrize("kind, state", [("restate", Lifecycle.RESTATING), ("rewind", Lifecycle.REWINDING)])
def test_a_rewind_or_restate_checks_before_it_stops_the_driver_gracefully(
    kind: str, state: Lifecycle
) -> None:
    current = run(started=600)
    plan = decide(view(job_record(), current, beat=heartbeat(current), operation=operation(kind)), NOW)
    assert (plan.state, plan.step) == (state, Step.STOP)
    assert plan.actions == (StopAfterCheck(plan.actions[0].reason, f"stopped: {kind}"),)


def test_a_driver_already_gone_is_closed_without_a_page_or_a_failure() -> None:
    current = run(started=600)
    plan = decide(view(job_record(), current, alive=False, operation=operation("restate")), NOW)
    assert [(type(a), a.exit_reason) for a in plan.actions] == [(CloseRun, "stopped: restate")]


@pytest.mark.parametrize("desired", ["running", "suspended"])
def test_a_stopped_job_is_rewound_to_the_operations_savepoint(desired: str) -> None:
    plan = decide(view(job_record(desired=desired, state="SUSPENDED"), operation=operation("restate")), NOW)
    assert (plan.state, plan.step) == (Lifecycle.RESTATING, Step.REWIND)
    assert plan.actions == (Restore("restate: test", SAVEPOINT),)


def test_a_rewind_is_done_once_rewound_and_leaves_the_job_to_its_desired_state() -> None:
    plan = decide(view(job_record(state="REWINDING"), operation=operation("rewind", **REWOUND)), NOW)
    assert (plan.state, plan.step) == (Lifecycle.REWINDING, Step.FINISH)
    assert [(type(a), getattr(a, "result", None)) for a in plan.actions] == [(FinishOperation, Result.DONE)]


def test_a_refused_rewind_closes_the_restatement_as_refused_and_leaves_the_driver_running() -> None:
    current = run(started=600)
    refused = operation("restate", failure="cannot replay 'router' from batch 7: ...")
    plan = decide(
        view(job_record(state="RESTATING"), current, beat=heartbeat(current), operation=refused), NOW
    )
    assert plan.actions == (FinishOperation(plan.actions[0].reason, Result.REFUSED),)
    assert "cannot replay" in plan.reason


def test_a_restatement_replays_under_the_ordinary_rules_until_the_queue_is_done() -> None:
    replaying = operation("restate", **REWOUND)
    queued = RecoveryProgress(pending_replay=5, last_commit=7)
    plan = decide(view(job_record(state="RESTATING"), operation=replaying, progress=queued), NOW)
    assert (plan.state, plan.step, kinds(plan)) == (Lifecycle.RESTATING, Step.REPLAY, [Launch])
    assert plan.reason.startswith("replaying 5 queued batches up to batch 12")

    # A running replay past its savepoint interval takes no periodic savepoint: the operation is open.
    old = run(started=2 * 3600)
    busy = RecoveryProgress(pending_replay=2, last_commit=10)
    plan = decide(
        view(job_record(state="RESTATING"), old, beat=heartbeat(old), operation=replaying, progress=busy), NOW
    )
    assert (plan.state, plan.actions) == (Lifecycle.RESTATING, ())

    done = RecoveryProgress(pending_replay=0, last_commit=12)
    plan = decide(
        view(job_record(state="RESTATING"), old, beat=heartbeat(old), operation=replaying, progress=done), NOW
    )
    assert (plan.step, plan.actions) == (Step.FINISH, (FinishOperation(plan.actions[0].reason, Result.DONE),))

    # The queue is empty but the last replayed batch has not committed yet: keep waiting.
    staged = RecoveryProgress(pending_replay=0, last_commit=11)
    plan = decide(
        view(job_record(state="RESTATING"), old, beat=heartbeat(old), operation=replaying, progress=staged),
        NOW,
    )
    assert plan.step is Step.REPLAY and plan.actions == ()


def test_a_suspend_during_the_replay_stops_the_driver_and_the_restatement_waits() -> None:
    current = run(started=60)
    replaying = operation("restate", **REWOUND)
    queued = RecoveryProgress(pending_replay=3, last_commit=9)
    plan = decide(
        view(
            job_record(desired="suspended"),
            current,
            beat=heartbeat(current),
            operation=replaying,
            progress=queued,
        ),
        NOW,
    )
    assert (plan.state, plan.step, kinds(plan)) == (Lifecycle.SUSPENDED, Step.REPLAY, [StopDriver])


def test_an_upgrade_first_takes_a_savepoint_while_the_running_version_is_supervised_as_usual() -> None:
    current = run(started=600)
    plan = decide(view(job_record(), current, beat=heartbeat(current), operation=operation("upgrade")), NOW)
    assert (plan.state, plan.step, kinds(plan)) == (
        Lifecycle.UPGRADING,
        Step.SAVEPOINT,
        [TakeUpgradeSavepoint],
    )

    # The running version dies meanwhile: it is closed and paged as ever, and the upgrade goes on.
    plan = decide(
        view(job_record(), current, alive=False, beat=heartbeat(current), operation=operation("upgrade")), NOW
    )
    assert kinds(plan) == [CloseRun, RaiseAlert, TakeUpgradeSavepoint]
    assert plan.actions[0].exit_reason.startswith(FAILURE)


def test_the_dry_run_starts_from_the_savepoint_and_is_watched_until_its_driver_is_gone() -> None:
    current = run(started=600)
    saved = operation("upgrade", savepoint_id=SAVEPOINT)
    plan = decide(view(job_record(), current, beat=heartbeat(current), operation=saved), NOW)
    assert (plan.step, kinds(plan)) == (Step.DRY_RUN, [StartDryRun])

    launched = operation(
        "upgrade",
        savepoint_id=SAVEPOINT,
        dry_run_id="d",
        dry_run_pid=77,
        dry_run_started_at=NOW - timedelta(seconds=30),
    )
    running = RecoveryProgress(dry_run_alive=True)
    plan = decide(
        view(job_record(), current, beat=heartbeat(current), operation=launched, progress=running), NOW
    )
    assert (plan.state, plan.step, plan.actions) == (Lifecycle.UPGRADING, Step.DRY_RUN, ())

    passed = decide(view(job_record(), current, beat=heartbeat(current), operation=launched), NOW)
    assert passed.actions == (EndDryRun(passed.actions[0].reason, failure=None),)

    spark_says = RecoveryProgress(dry_run_error="[STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE] ...")
    failed = decide(
        view(job_record(), current, beat=heartbeat(current), operation=launched, progress=spark_says), NOW
    )
    (end,) = failed.actions
    assert isinstance(end, EndDryRun) and end.failure is not None
    assert end.failure.startswith("candidate for 'router' cannot take over its current state: [STATE_STORE")


def test_a_dry_run_that_runs_too_long_is_ended_as_a_refusal() -> None:
    late = operation(
        "upgrade",
        savepoint_id=SAVEPOINT,
        dry_run_id="d",
        dry_run_pid=77,
        dry_run_started_at=NOW - timedelta(seconds=DRY_RUN_TIMEOUT_SECONDS + 1),
    )
    plan = decide(
        view(
            job_record(desired="suspended", state="SUSPENDED"),
            operation=late,
            progress=RecoveryProgress(dry_run_alive=True),
        ),
        NOW,
    )
    (end,) = plan.actions
    assert isinstance(end, EndDryRun) and "did not finish within 300s" in (end.failure or "")


def test_a_refused_upgrade_is_closed_and_the_running_version_is_not_touched() -> None:
    current = run(started=600)
    refused = operation("upgrade", savepoint_id=SAVEPOINT, dry_run_pid=77, failure="cannot take over")
    plan = decide(view(job_record(), current, beat=heartbeat(current), operation=refused), NOW)
    assert (plan.state, plan.step) == (Lifecycle.UPGRADING, Step.FINISH)
    assert plan.actions == (FinishOperation(plan.actions[0].reason, Result.REFUSED),)


PASSED = {"savepoint_id": SAVEPOINT, "dry_run_pid": 77, "dry_run_passed_at": NOW - timedelta(minutes=8)}


def test_after_the_dry_run_the_running_version_stops_then_the_candidate_is_installed() -> None:
    current = run(started=600)
    deploying = operation("upgrade", **PASSED)
    plan = decide(view(job_record(), current, beat=heartbeat(current), operation=deploying), NOW)
    assert (plan.step, plan.actions) == (
        Step.STOP,
        (StopDriver(plan.actions[0].reason, "stopped: upgrade", True),),
    )

    plan = decide(view(job_record(state="UPGRADING"), operation=deploying), NOW)
    assert (plan.step, plan.actions) == (
        Step.INSTALL,
        (InstallSpec(plan.actions[0].reason, CANDIDATE.config_version),),
    )


def new_run(
    started: float, batches: int = 0, stopped: float | None = None, exit_reason: str | None = None
) -> RunRecord:
    return replace(run(started, stopped, exit_reason, batches), config_version=CANDIDATE.config_version)


def test_the_installed_candidate_is_launched_and_done_once_ready() -> None:
    deploying = operation("upgrade", **PASSED)
    plan = decide(view(job_record(state="UPGRADING"), operation=deploying, spec=CANDIDATE), NOW)
    assert (plan.step, kinds(plan)) == (Step.READY, [Launch])

    young = new_run(started=30, batches=1)
    plan = decide(view(job_record(), young, beat=heartbeat(young), operation=deploying, spec=CANDIDATE), NOW)
    assert (plan.state, plan.step, plan.actions) == (Lifecycle.UPGRADING, Step.READY, ())
    assert "1 of 3 batches committed" in plan.reason

    ready = new_run(started=30, batches=POLICY.stable_batches)
    plan = decide(view(job_record(), ready, beat=heartbeat(ready), operation=deploying, spec=CANDIDATE), NOW)
    assert plan.actions == (FinishOperation(plan.actions[0].reason, Result.DONE),)

    idle = decide(
        view(job_record(), young, beat=heartbeat(young, event="idle"), operation=deploying, spec=CANDIDATE),
        NOW,
    )
    assert kinds(idle) == [FinishOperation]


def test_a_new_version_that_dies_fails_to_launch_or_is_too_slow_is_rolled_back() -> None:
    deploying = operation("upgrade", **PASSED)
    crashed = new_run(started=30, batches=1)
    plan = decide(
        view(
            job_record(), crashed, alive=False, beat=heartbeat(crashed), operation=deploying, spec=CANDIDATE
        ),
        NOW,
    )
    assert (plan.state, kinds(plan)) == (Lifecycle.ROLLING_BACK, [RollBack])
    assert plan.actions[0].reason.startswith("the new version did not stay up (failed: driver process")

    refused_launch = new_run(started=5, stopped=5, exit_reason=FAILURE + "launch: no space left")
    plan = decide(view(job_record(), closed=(refused_launch,), operation=deploying, spec=CANDIDATE), NOW)
    assert plan.actions == (RollBack("the new version did not stay up (failed: launch: no space left)"),)

    slow = new_run(started=301, batches=1)
    plan = decide(view(job_record(), slow, beat=heartbeat(slow), operation=deploying, spec=CANDIDATE), NOW)
    assert plan.actions == (RollBack("the new version did not commit 3 batches within 300s"),)


def test_a_rollback_stops_reinstalls_rewinds_relaunches_then_pages_once_it_runs() -> None:
    failing = {**PASSED, "failure": "the new version did not stay up (failed: boom)"}
    new = new_run(started=30, batches=1)
    plan = decide(
        view(
            job_record(), new, beat=heartbeat(new), operation=operation("upgrade", **failing), spec=CANDIDATE
        ),
        NOW,
    )
    assert (plan.state, plan.step) == (Lifecycle.ROLLING_BACK, Step.ROLLBACK_STOP)
    assert plan.actions == (
        StopDriver(plan.actions[0].reason, "stopped: upgrade rolled back", graceful=True),
    )

    plan = decide(view(job_record(), operation=operation("upgrade", **failing), spec=CANDIDATE), NOW)
    assert (plan.step, plan.actions) == (Step.ROLLBACK_INSTALL, (InstallSpec(plan.actions[0].reason, OLD),))

    plan = decide(view(job_record(), operation=operation("upgrade", **failing)), NOW)
    assert (plan.step, plan.actions) == (Step.ROLLBACK_REWIND, (Restore(plan.actions[0].reason, SAVEPOINT),))

    rewound = operation("upgrade", **failing, rewound_at=NOW - timedelta(seconds=5), replay_to=9)
    plan = decide(view(job_record(), operation=rewound), NOW)
    assert (plan.step, kinds(plan)) == (Step.ROLLBACK_LAUNCH, [Launch])

    back = run(started=2)
    plan = decide(view(job_record(), back, operation=rewound), NOW)
    assert (plan.state, plan.step) == (Lifecycle.ROLLING_BACK, Step.FINISH)
    page, finish = plan.actions
    assert (
        isinstance(page, RaiseAlert)
        and page.alert_kind == "upgrade_rolled_back"
        and page.severity == "critical"
    )
    assert (
        page.reason
        == f"the new version did not stay up (failed: boom); back on config {OLD} from savepoint {SAVEPOINT}"
    )
    assert finish == FinishOperation(finish.reason, Result.ROLLED_BACK)


def test_a_previous_version_run_before_the_rollback_rewind_is_stopped_first() -> None:
    # e.g. someone started the job by hand between the reinstall and the rewind.
    stray = run(started=20)
    failing = operation("upgrade", **PASSED, failure="too slow")
    plan = decide(view(job_record(), stray, beat=heartbeat(stray), operation=failing), NOW)
    assert (plan.step, kinds(plan)) == (Step.ROLLBACK_STOP, [StopDriver])
