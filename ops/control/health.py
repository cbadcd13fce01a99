"""Health of a running job, judged from what the supervisor observed (docs/architecture.md §4).

`Observation` is what one read-only look at a job found; `assess` turns it into signals with
pure code, so every threshold is testable without a driver.

Spark's file source reports no backlog metric, so `ops.driver.checkpoint.landing_backlog` measures
it from outside: landing files that the checkpoint's file-source log has not yet recorded as read.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from ops.control.autoscaler import LoadWindow
from ops.control.launcher import LaunchBackend
from ops.driver.checkpoint import landing_backlog
from ops.driver.liveness import Liveness, read_liveness
from ops.driver.telemetry import Heartbeat, read_heartbeat
from ops.ledger.records import RunRecord
from ops.ledger.store import Ledger
from ops.ports import port_is_free
from ops.spec.job import HealthThresholds, JobSpec, Operations
from ops.spec.paths import JobPaths
from ops.spec.platform import PlatformConfig


class Signal(enum.Enum):
    """A health signal; several can hold at once."""

    NO_DRIVER = "no driver run is open"
    STARTING = "driver launched, no heartbeat yet"
    HEALTHY = "batches commit or the query idles on time"
    DEAD = "driver process gone or query terminated"
    STUCK = "no batch, idle event or move of any kind within trigger interval + grace"
    SLOW_START = "no heartbeat within the startup grace, but the driver is still moving"
    SLOW_BATCH = "no batch or idle event within trigger interval + grace, but tasks still complete"
    FALLING_BEHIND = "batches fill their triggers and the backlog does not shrink over the recent window"
    STATE_PRESSURE = "state memory above operations.health.max_state_memory_mb"
    WATERMARK_LAG = "watermark further behind the wall clock than operations.health.max_watermark_lag_seconds"
    UDF_REFUSED = "a script UDF file changed to a version that does not load; batches run the one before"


# How `assess` words a stuck driver's detail (no commit and no move of any kind for the grace),
# at start and while running: a run the supervisor stopped as stuck has it as its exit reason.
STUCK_DETAILS = ("no heartbeat ", "last heartbeat ")

# Learned graces: the supervisor's graces are the job file's, raised to this multiple of the slowest
# start (launch -> query started) and the longest batch its newest runs measured, so a machine that
# got slower raises its own bar (the file's values stay the floor).
LEARNED_GRACE_MARGIN = 1.5
LEARNED_FROM_RUNS = 5

# The share of its trigger interval a job needs at which its batches run back to back (a window of
# batches each longer than the trigger measures 1.0, give or take its rounding).
FULL_TRIGGER_SHARE = 0.95

# The signals of a job that runs but is not well (state DEGRADED; a slow start stays SUBMITTED),
# each with its alert kind.
DEGRADING = {
    Signal.SLOW_START: "slow_start",
    Signal.SLOW_BATCH: "slow_batch",
    Signal.FALLING_BEHIND: "falling_behind",
    Signal.STATE_PRESSURE: "state_pressure",
    Signal.WATERMARK_LAG: "watermark_lag",
    Signal.UDF_REFUSED: "udf_refused",
}


@dataclass(frozen=True)
class MeasuredSpeed:
    """The slowest start and longest batch of a job's newest runs (None: none measured yet)."""

    start_seconds: float | None = None
    batch_seconds: float | None = None

    @classmethod
    def of_runs(cls, runs: Sequence[RunRecord]) -> MeasuredSpeed:
        starts = [run.start_seconds for run in runs if run.start_seconds is not None]
        batches = [run.longest_batch_seconds for run in runs if run.longest_batch_seconds is not None]
        return cls(max(starts, default=None), max(batches, default=None))


@dataclass(frozen=True)
class Grace:
    """A grace the supervisor applies: the job file's, or more when the job measured more
    (`measure` names what: "start", "batch")."""

    configured: float
    measured: float | None
    measure: str

    @property
    def seconds(self) -> float:
        """The file's grace, or the learned one (in whole seconds) when larger."""
        if self.measured is None:
            return self.configured
        return max(self.configured, float(math.ceil(LEARNED_GRACE_MARGIN * self.measured)))

    def describe(self, name: str, interval: float = 0.0) -> str:
        """`name` and its seconds (`interval` added: a limit past the trigger), saying where a
        learned value came from."""
        total = f"{name} {interval + self.seconds:g}s"
        if self.seconds == self.configured:
            return total
        trigger = f"the {interval:g}s trigger + " if interval else ""
        return (
            f"{total}: {trigger}{LEARNED_GRACE_MARGIN:g} x the slowest recent {self.measure} "
            f"({self.measured:.0f}s), above the job file's {interval + self.configured:g}s"
        )


def measured_speed(observation: Observation) -> dict[str, float]:
    """The open run's ledger columns the observation newly measures: its start (launch -> query
    started, which its liveness record dates; else this heartbeat, the first one seen), and its
    longest batch, when longer than the one recorded."""
    run, heartbeat, liveness = observation.run, observation.heartbeat, observation.liveness
    if run is None or heartbeat is None:
        return {}
    measured: dict[str, float] = {}
    if run.start_seconds is None:
        started = (
            liveness.phase_since if liveness is not None and liveness.phase == "running" else heartbeat.at
        )
        measured["start_seconds"] = round(
            max(0.0, min(started, heartbeat.at) - run.started_at.timestamp()), 3
        )
    longest = max((sample.duration_ms / 1000 for sample in heartbeat.recent), default=None)
    if longest is not None and longest > (run.longest_batch_seconds or 0.0):
        measured["longest_batch_seconds"] = longest
    return measured


@dataclass(frozen=True)
class Observation:
    """One read-only look at a job: its open run, whether the process lives, its newest heartbeat
    and liveness record.

    `heartbeat` and `liveness` are only the current run's: a stale file from an earlier run is ignored.
    """

    at: datetime
    run: RunRecord | None
    process_alive: bool
    heartbeat: Heartbeat | None
    backlog_files: int | None = None
    # Whether the job's metrics port is free for a launch; None when not looked at (a run is open
    # and its driver holds the port).
    metrics_port_free: bool | None = None
    liveness: Liveness | None = None
    measured: MeasuredSpeed = MeasuredSpeed()

    @property
    def heartbeat_age(self) -> float | None:
        return None if self.heartbeat is None else self.at.timestamp() - self.heartbeat.at

    @property
    def run_age(self) -> float | None:
        return None if self.run is None else (self.at - self.run.started_at).total_seconds()

    @property
    def still_for(self) -> float | None:
        """Seconds since the driver last moved (its liveness record), None without one."""
        return None if self.liveness is None else self.at.timestamp() - self.liveness.moved_at


@dataclass(frozen=True)
class Assessment:
    """The signals that hold, what they amount to, and why each degrading signal holds."""

    signals: frozenset[Signal]
    detail: str
    reasons: Mapping[Signal, str] = field(default_factory=dict)

    def has(self, signal: Signal) -> bool:
        return signal in self.signals


def observe(
    platform: PlatformConfig, ledger: Ledger, backend: LaunchBackend, spec: JobSpec, at: datetime
) -> Observation:
    """A read-only look at the job's open run, process, heartbeat and input backlog.

    The supervisor's observe step and `warden status` both look through here: the ledger, the
    heartbeat file and the landing directories, never the driver itself.
    """
    paths = JobPaths.of(platform, spec)
    run = ledger.current_run(spec.name)
    backlog = landing_backlog(list(paths.landing.values()), paths.sources)
    heartbeat = read_heartbeat(paths.heartbeat)
    if heartbeat is not None and (run is None or heartbeat.run_id != run.run_id):
        heartbeat = None
    liveness = read_liveness(paths.liveness)
    if liveness is not None and (run is None or liveness.run_id != run.run_id):
        liveness = None
    alive = run is not None and backend.is_alive(run)
    return Observation(
        at=at,
        run=run,
        process_alive=alive,
        heartbeat=heartbeat,
        backlog_files=backlog,
        metrics_port_free=port_is_free(spec.operations.metrics_port) if run is None else None,
        liveness=liveness,
        measured=MeasuredSpeed.of_runs(ledger.runs(spec.name, LEARNED_FROM_RUNS)),
    )


def assess(observation: Observation, operations: Operations) -> Assessment:
    """Derive health signals from an observation and the job's thresholds."""
    run, heartbeat = observation.run, observation.heartbeat
    if run is None:
        return Assessment(frozenset({Signal.NO_DRIVER}), "no open run")
    if heartbeat is not None and heartbeat.event == "terminated":
        error = (
            f"{heartbeat.error_class}: {heartbeat.error_message}"
            if heartbeat.error_class
            else "query stopped"
        )
        return Assessment(frozenset({Signal.DEAD}), f"query terminated ({error})")
    if not observation.process_alive:
        return Assessment(frozenset({Signal.DEAD}), f"driver process {run.pid} is gone")
    if heartbeat is None:
        age = observation.run_age or 0.0
        startup = startup_grace(observation.measured, operations)
        grace = startup.seconds
        if age <= grace:
            return Assessment(
                frozenset({Signal.STARTING}), f"launched {age:.0f}s ago, waiting for first heartbeat"
            )
        if not _moving(observation, grace):
            return Assessment(
                frozenset({Signal.STUCK}),
                f"no heartbeat {age:.0f}s after launch{_stillness(observation)} "
                f"({startup.describe('startup grace')})",
            )
        slow = (
            f"slow start: no heartbeat {age:.0f}s after launch ({startup.describe('startup grace')})"
            f"{_movement(observation)}"
        )
        return Assessment(frozenset({Signal.STARTING, Signal.SLOW_START}), slow, {Signal.SLOW_START: slow})
    batch = batch_grace(observation.measured, operations)
    interval = operations.trigger.interval_seconds
    limit = interval + batch.seconds
    age = observation.heartbeat_age or 0.0
    if age > limit:
        described = batch.describe("limit", interval)
        if not _moving(observation, limit):
            return Assessment(
                frozenset({Signal.STUCK}),
                f"last heartbeat {age:.0f}s ago{_stillness(observation)} ({described})",
            )
        slow = f"slow batch: last heartbeat {age:.0f}s ago ({described}){_movement(observation)}"
        return Assessment(frozenset({Signal.HEALTHY, Signal.SLOW_BATCH}), slow, {Signal.SLOW_BATCH: slow})
    if heartbeat.event == "started":
        return Assessment(frozenset({Signal.STARTING}), "query started, no batch or idle event yet")
    checks = {
        Signal.FALLING_BEHIND: _falling_behind(heartbeat, operations),
        Signal.STATE_PRESSURE: _state_pressure(heartbeat, operations.health),
        Signal.WATERMARK_LAG: _watermark_lag(heartbeat, observation.at, operations.health),
        Signal.UDF_REFUSED: "; ".join(heartbeat.udf_refused.values()) or None,
    }
    reasons = {signal: reason for signal, reason in checks.items() if reason is not None}
    if reasons:
        return Assessment(frozenset({Signal.HEALTHY, *reasons}), "; ".join(reasons.values()), reasons)
    return Assessment(frozenset({Signal.HEALTHY}), f"{heartbeat.event} at batch {heartbeat.batch_id}")


def startup_grace(measured: MeasuredSpeed, operations: Operations) -> Grace:
    """How long a launched driver may go without a heartbeat: the file's startup grace, or more
    when the job's newest runs took longer to start."""
    return Grace(operations.health.startup_grace_seconds, measured.start_seconds, "start")


def batch_grace(measured: MeasuredSpeed, operations: Operations) -> Grace:
    """How long past its trigger interval a running driver may go without a heartbeat: the file's
    stuck grace, or more when the job's newest runs measured longer batches."""
    return Grace(operations.health.stuck_grace_seconds, measured.batch_seconds, "batch")


def _moving(observation: Observation, grace: float) -> bool:
    """Whether the driver moved within `grace` seconds (a driver without a liveness record never
    does: only its heartbeat speaks for it)."""
    still = observation.still_for
    return still is not None and still <= grace


def _stillness(observation: Observation) -> str:
    """How long the driver has not moved, as the stuck reason says it ("" without a record)."""
    liveness, still = observation.liveness, observation.still_for
    if liveness is None or still is None:
        return ""
    return f", no move for {still:.0f}s while {liveness.phase}"


def _movement(observation: Observation) -> str:
    """What the slow driver is doing, with the numbers."""
    liveness, still = observation.liveness, observation.still_for
    assert liveness is not None and still is not None
    in_phase = observation.at.timestamp() - liveness.phase_since
    tasks = f", {liveness.tasks_completed} tasks done, {liveness.active_stages} stages active"
    return (
        f"; {liveness.phase} for {in_phase:.0f}s, last moved {still:.0f}s ago"
        f"{tasks if liveness.phase == 'running' else f', {liveness.cpu_seconds:.0f} CPU-s used'}"
    )


def _falling_behind(heartbeat: Heartbeat, operations: Operations) -> str | None:
    """Why the recent window shows the job falling behind its input, or None.

    The autoscaler's capacity model (`BatchCost`, fitted over the window's batches) gives the share
    of each trigger interval the job needs at the rate it read: the fixed part over the interval
    plus the per-row part of a trigger's rows. At `FULL_TRIGGER_SHARE` or more its batches fill
    their triggers back to back, and it falls behind only if its landing backlog did not shrink
    meanwhile: a job draining a backlog reads as fast as it can too, and is catching up, not
    falling behind (so the warning does not come and go while a backlog drains). Without backlog
    counts (autoscaling off: the driver does not list them) the share alone decides.
    """
    window = heartbeat.recent[-operations.health.falling_behind_window_batches :]
    if len(window) < operations.health.falling_behind_window_batches:
        return None
    interval = operations.trigger.interval_seconds
    load = LoadWindow.from_samples(window, interval, rows_per_backlog_file=0.0)
    if load.cost is None or not load.seconds:
        return None
    read_rate = load.rows / load.seconds
    needed = load.fixed_share + load.cost.seconds_per_row * read_rate
    if needed < FULL_TRIGGER_SHARE:
        return None
    backlogs = [sample.backlog_files for sample in window if sample.backlog_files is not None]
    if backlogs and backlogs[-1] <= backlogs[0]:
        return None
    grew = f"; the landing backlog grew from {backlogs[0]} to {backlogs[-1]} files" if backlogs else ""
    return (
        f"at the {read_rate:.0f} rows/s it read, a {interval:g}s trigger needs {needed:.2f} of its "
        f"interval ({load.cost.describe()} over the last {len(window)} batches){grew}"
    )


def _state_pressure(heartbeat: Heartbeat, health: HealthThresholds) -> str | None:
    """Why the state's memory is too high, or None (no limit, or a stateless query)."""
    limit, used = health.max_state_memory_mb, heartbeat.state_memory_bytes
    if limit is None or used is None or used <= limit * 1e6:
        return None
    return f"state holds {used / 1e6:.1f} MB in memory (limit {limit:g} MB)"


def _watermark_lag(heartbeat: Heartbeat, now: datetime, health: HealthThresholds) -> str | None:
    """Why the watermark trails the wall clock too far, or None (no limit, or no watermark yet:
    Spark reports the epoch until its first batch with event times)."""
    limit = health.max_watermark_lag_seconds
    if limit is None or heartbeat.watermark is None:
        return None
    watermark = datetime.fromisoformat(heartbeat.watermark)
    if watermark.timestamp() <= 0:
        return None
    lag = (now - watermark).total_seconds()
    if lag <= limit:
        return None
    return f"watermark {heartbeat.watermark} is {lag:.0f}s behind the wall clock (limit {limit:g}s)"
