"""Autoscaling on the embedded standalone cluster (issue 18): `python -m benchmarks.autoscaling`.

One Spark standalone cluster (a master and two one-core workers on loopback) serves three runs of
the router, each with a fresh checkpoint and ledger, under the same load written a tick (4 s) at a
time: a base of one landing file per tick, a 4x step (four files per tick) for `--step-seconds`,
then the base again, noisy (events per file +-15 %) for `--plateau-seconds` in the autoscaled run.
The router's trigger is 2 s, so a batch behind its input follows the previous one at once.

The load is one where a core is CPU bound: the first run measures what one core processes in
batches of one file, as the base reads them (`Scenario.calibrate`), and sizes the files so that
the base keeps it about half busy, well under the autoscaler's target utilization (0.9), with
tens of thousands of events a file, so a batch's data weighs at least as much as its fixed cost.
The 4x step is then more than one core processes: a backlog builds at one core, and two cores
drain it. The other runs take the same file size. The files are copies of a few written
once (`TemplateLoad`), so the writer's own CPU is not what is measured.

- pinned: the job pinned at the minimum (`warden scale router --cores 1`), reading two files a
  batch as its batch-size rule gives one core; the baseline;
- autoscaled: `operations.autoscaling.mode: apply`, 1..2 cores; the batch size follows the cores
  (two cores read four files);
- pinned at the minimum with the 2-core batch size (four files): how much of the autoscaled run's
  gain the bigger batch alone would give.

The supervisor's passes run in this process, one per tick, the way the supervision DAG runs them.
Figures, all from the same invocation:
- backlog drain: from the step's start until the landing backlog is back to at most one file;
  autoscaled against pinned (target <= 0.6x);
- step -> scale decision: the step's start to the autoscaler's `scale` decision row (target <= 2
  stabilization windows);
- downtime per rescale: the restart cost each rescale measured (stop -> first committed batch
  after it) against the cold start (launch -> first committed batch; target <= cold + 5 s);
- rescales during the noisy plateau after the first one settled (target 0);
- events per busy second per core at 1 and 2 cores: the window's true rate (rows / busy time of
  the batches the heartbeat keeps, the run's first batch left out), median over the passes.
"""

from __future__ import annotations

import argparse
import functools
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import yaml

from benchmarks.throughput import rooted_platform
from ops.atomic import write_atomically
from ops.clock import utcnow
from ops.control.scaling import RESCALE, observe_scaling
from ops.control.supervisor import Supervisor, stop_all_jobs
from ops.driver.checkpoint import log_entries
from ops.driver.telemetry import Heartbeat
from ops.embedded.cluster import SparkCluster
from ops.ledger.records import RunRecord
from ops.ports import free_loopback_port, port_is_free
from ops.spec.job import find_job
from ops.spec.paths import JobPaths
from ops.spec.platform import DEFAULT_CONF_DIR, PlatformConfig, load_platform
from synthetic.generator import write_batch

HERE = Path(__file__).resolve().parent
WORKDIR = HERE / "out" / "autoscaling"
JOB = "router"
TICK_SECONDS = 4.0
# The router's trigger: shorter than a tick, so a batch behind its input starts as soon as the
# previous one ends, and what a core processes is bounded by its CPU, not by the interval.
TRIGGER_SECONDS = 2.0
# Events per landing file: measured first (`Scenario.calibrate`), so that at the base load a core
# is busy `BASE_UTILIZATION` of the time, whatever the machine's load that day.
CALIBRATION_START_EVENTS = 60_000
CALIBRATION_ROUNDS = 3
CALIBRATION_TICKS = 7
BASE_UTILIZATION = 0.5
EVENTS_PER_FILE_BOUNDS = (20_000, 400_000)
# The plateau's noise: events per file +- this fraction, drawn from three sizes.
PLATEAU_NOISE = 0.15
NOISE_LEVELS = (1.0, 1 - PLATEAU_NOISE, 1 + PLATEAU_NOISE)
BASE_TICKS = 10
STABILIZATION_SECONDS = 20.0
# A drained backlog: at most what one tick writes at the base load.
DRAINED_FILES = 1
DRAIN_TIMEOUT_SECONDS = 1500.0
STEP_SECONDS = 120.0
# The batch size at one core; the autoscaler scales it with the cores (two read twice as many).
FILES_PER_CORE = 2
# The 20 minutes; `--plateau-seconds` runs a shorter one.
PLATEAU_SECONDS = 1200.0


@functools.cache
def template_files(events_per_file: int) -> tuple[str, ...]:
    """The text of landing files of `events_per_file` events times each noise level, written once
    for all the runs (the generator writes about 16,000 events a second)."""
    with tempfile.TemporaryDirectory() as pool:
        return tuple(
            write_batch(Path(pool), max(1, round(events_per_file * factor)), 0.0, level).path.read_text()
            for level, factor in enumerate(NOISE_LEVELS)
        )


class TemplateLoad:
    """Landing files copied from a few pre-written ones (one per noise level), named in order.

    Writing a file event by event would cost the generator more than a tick at the step's four
    files: the benchmark would measure its own writer. The router is stateless, so repeated events
    are processed like new ones.
    """

    def __init__(self, landing_dir: Path, events_per_file: int) -> None:
        self.landing_dir = landing_dir
        self.written = 0
        self.events_per_file = events_per_file
        self._rng = random.Random(0)

    def write(self, files: int, noise: float = 0.0) -> None:
        """Write `files` files of `events_per_file` events, or, with `noise`, of a size drawn
        from the levels within +- `noise`."""
        texts = template_files(self.events_per_file)
        levels = [text for text, factor in zip(texts, NOISE_LEVELS, strict=True) if abs(factor - 1) <= noise]
        for _ in range(files):
            text = self._rng.choice(levels)
            write_atomically(self.landing_dir / f"events-{self.written:06d}.json", text)
            self.written += 1


@dataclass
class RunFigures:
    """What one run measured."""

    events_per_file: int | None = None
    cold_start: float | None = None
    step_to_decision: float | None = None
    drain: float | None = None
    restart_costs: list[float] = field(default_factory=list)
    plateau_rescales: int | None = None
    true_rates: dict[int, list[float]] = field(default_factory=dict)


def cluster_ports() -> dict[str, int]:
    def pair() -> int:
        # Worker i listens on base + i: a free port whose next one is free too.
        first = free_loopback_port()
        while not port_is_free(first + 1):
            first = free_loopback_port()
        return first

    return {
        "master_port": free_loopback_port(),
        "master_ui_port": free_loopback_port(),
        "worker_port_base": pair(),
        "worker_ui_port_base": pair(),
    }


def prepare(
    root: Path, ports: dict[str, int], mode: str, files_per_core: int = FILES_PER_CORE
) -> PlatformConfig:
    """A platform rooted in `root` on the shared embedded cluster, with the router autoscaled from
    one core reading `files_per_core` files a batch."""
    shutil.rmtree(root, ignore_errors=True)
    conf_dir = root / "conf"
    (conf_dir / "jobs").mkdir(parents=True)
    platform = rooted_platform(root)
    platform["spark"] = {
        "master": "embedded",
        "cluster": {"workers": 2, "cores_per_worker": 1, "memory_per_worker": "1g", **ports},
    }
    platform["slack"] = {"webhook_url": None}
    platform["monitoring"] = {"scrape_targets_file": None}
    (conf_dir / "platform.yaml").write_text(yaml.safe_dump(platform))
    router = yaml.safe_load((DEFAULT_CONF_DIR / "jobs" / f"{JOB}.yaml").read_text())
    operations = router["operations"]
    operations["trigger"] = {"interval_seconds": TRIGGER_SECONDS, "max_files_per_trigger": files_per_core}
    operations["resources"] = {"executor_memory": "512m", "shuffle_partitions": 4}
    operations["savepoints"]["interval_minutes"] = None
    # On 2 cores shared with other Spark runs a cold first batch can outlast the default stuck
    # limit (interval + 30 s): a restart would be counted as a rescale's cost or the cold start.
    operations["health"] = {**operations.get("health", {}), "stuck_grace_seconds": 120}
    operations["metrics_port"] = free_loopback_port()
    operations["autoscaling"] = {
        "mode": mode,
        "min_cores": 1,
        "max_cores": 2,
        "target_utilization": 0.9,
        "catch_up_seconds": 10,
        "stabilization_seconds": STABILIZATION_SECONDS,
        "scale_down_delay_seconds": 30,
        "max_factor_per_step": 2,
    }
    (conf_dir / "jobs" / f"{JOB}.yaml").write_text(yaml.safe_dump(router, sort_keys=False))
    return load_platform(conf_dir)


class Scenario:
    """One run of the router under the ticked load, with a pass per tick."""

    def __init__(self, platform: PlatformConfig, echo: Callable[[str], None], events_per_file: int) -> None:
        self.platform = platform
        self.echo = echo
        self.supervisor = Supervisor.for_platform(platform)
        self.spec = find_job(JOB, platform.conf_dir)
        self.paths = JobPaths.of(platform, self.spec)
        self.load = TemplateLoad(self.paths.landing["events"], events_per_file)
        self.figures = RunFigures(events_per_file=events_per_file)
        self.last_state = ""

    def tick(self, files: int, noise: float = 0.0) -> int | None:
        """Write a tick's files, run a pass, sample the true rate; the backlog in files."""
        started = time.monotonic()
        self.load.write(files, noise)
        summary = self.supervisor.reconcile(JOB)
        if summary.state != self.last_state:
            self.echo(f"  {summary.line()[:160]}")
            self.last_state = summary.state
        observation = self.supervisor.observe(self.spec)
        rate = self.true_rate(observation.run, observation.heartbeat)
        if rate is not None and observation.run is not None:
            self.figures.true_rates.setdefault(observation.run.cores or 1, []).append(rate)
        time.sleep(max(0.0, TICK_SECONDS - (time.monotonic() - started)))
        return observation.backlog_files

    def true_rate(self, run: RunRecord | None, heartbeat: Heartbeat | None) -> float | None:
        """Events per busy second of the driver's recent batches (its first left out), if any."""
        if run is None or heartbeat is None:
            return None
        scaling = observe_scaling(self.spec, self.supervisor.ledger, run, heartbeat, [])
        if scaling is None or scaling.window is None or scaling.window.true_rate <= 0:
            return None
        return scaling.window.true_rate

    def calibrate(self) -> int:
        """Events per file for a base load of one file a tick at `BASE_UTILIZATION` of one core.

        One file a tick, read one a batch, as the base load is read; the file size is corrected
        in proportion to the median batch time until a batch takes `BASE_UTILIZATION` of a tick.
        A batch costs a fixed part plus its data, so each round closes the gap by the fixed
        part's share of the target (it converges from either side; three rounds). Two earlier
        ways failed on a loaded machine: batches of two files shared the fixed cost (the base's
        batches of one kept the core busier than aimed at, over the autoscaler's target before
        the step), and a line through two sizes took a slow warm-up batch for a fixed cost of 3 s.
        """
        target = BASE_UTILIZATION * TICK_SECONDS
        events = CALIBRATION_START_EVENTS
        for _ in range(CALIBRATION_ROUNDS):
            measured = self.batch_time(events)
            found = self.bounded(events * target / measured)
            self.echo(f"  a batch of one {events:,}-event file took {measured:.2f} s -> {found:,} events")
            events = found
        self.figures.true_rates.clear()
        self.figures.events_per_file = self.load.events_per_file = events
        return events

    def batch_time(self, events: int) -> float:
        """The median time of batches of one `events`-event file over `CALIBRATION_TICKS` ticks of
        one such file, the first two batches of the size left out (the file's first reads)."""
        self.load.events_per_file = events
        samples: dict[int, float] = {}
        for _ in range(CALIBRATION_TICKS):
            self.tick(1)
            heartbeat = self.supervisor.observe(self.spec).heartbeat
            for sample in heartbeat.recent if heartbeat is not None else ():
                if sample.num_input_rows == events:
                    samples[sample.batch_id] = sample.duration_ms / 1000
        kept = [samples[batch] for batch in sorted(samples)[2:]] or list(samples.values())
        assert kept, f"no batch of one {events}-event file to calibrate the load on"
        return statistics.median(kept)

    @staticmethod
    def bounded(events: float) -> int:
        low, high = EVENTS_PER_FILE_BOUNDS
        return int(min(high, max(low, 1000 * round(events / 1000))))

    def start(self) -> None:
        """Launch the router with one file to read; the cold start is launch -> its first commit."""
        launched = time.time()
        self.tick(1)
        while (job := self.supervisor.ledger.job(JOB)) is None or job.state != "RUNNING":
            self.tick(0)
        commits = log_entries(self.paths.commits)
        first = min(commits)
        self.figures.cold_start = commits[first][0].stat().st_mtime - launched

    def step(self, step_seconds: float) -> tuple[datetime, float]:
        """The base, then the 4x step; the step's start (UTC, monotonic)."""
        for _ in range(BASE_TICKS):
            self.tick(1)
        at, started = utcnow(), time.monotonic()
        self.echo(f"  4x step for {step_seconds:g} s")
        while time.monotonic() - started < step_seconds:
            self.tick(4)
        return at, started

    def drain(self, started: float, noise: float) -> None:
        while True:
            backlog = self.tick(1, noise)
            if backlog is not None and backlog <= DRAINED_FILES:
                self.figures.drain = time.monotonic() - started
                self.echo(f"  drained {self.figures.drain:.0f} s after the step started")
                return
            if time.monotonic() - started > DRAIN_TIMEOUT_SECONDS:
                self.echo("  not drained within the timeout")
                return

    def finish(self, step_at: datetime) -> None:
        ledger = self.supervisor.ledger
        decisions = [d for d in ledger.decisions(JOB, limit=2000, action=RESCALE) if d.at >= step_at]
        if decisions:
            first = min(decisions, key=lambda d: d.at)
            self.figures.step_to_decision = (first.at - step_at).total_seconds()
        rescales = [op for op in ledger.operations(JOB, limit=200) if op.kind == RESCALE]
        self.figures.restart_costs = [
            op.restart_cost_seconds for op in rescales if op.restart_cost_seconds is not None
        ]


def run_autoscaled(
    root: Path,
    ports: dict[str, int],
    events_per_file: int,
    step_seconds: float,
    plateau_seconds: float,
    echo: Callable[[str], None],
) -> RunFigures:
    echo("== autoscaled run (mode apply, 1..2 cores) ==")
    scenario = Scenario(prepare(root, ports, "apply"), echo, events_per_file)
    try:
        scenario.start()
        step_at, started = scenario.step(step_seconds)
        scenario.drain(started, PLATEAU_NOISE)
        ledger = scenario.supervisor.ledger
        # The plateau: base load +-15 %; the first rescale after the step (back down) settles it.
        plateau_started = utcnow()
        echo(f"  noisy plateau for {plateau_seconds:g} s")
        while (utcnow() - plateau_started).total_seconds() < plateau_seconds:
            scenario.tick(1, PLATEAU_NOISE)
        scenario.finish(step_at)
        after_step = sorted(
            (
                op
                for op in ledger.operations(JOB, limit=200)
                if op.kind == RESCALE and op.requested_at >= step_at
            ),
            key=lambda op: op.requested_at,
        )
        settled = next((op.finished_at for op in after_step if op.to_cores == 1 and op.finished_at), None)
        scenario.figures.plateau_rescales = (
            None if settled is None else sum(1 for op in after_step if op.requested_at > settled)
        )
    finally:
        stop_all_jobs(scenario.platform)
    return scenario.figures


def run_pinned(
    root: Path,
    ports: dict[str, int],
    events_per_file: int | None,
    step_seconds: float,
    echo: Callable[[str], None],
    files_per_core: int,
) -> RunFigures:
    """The router pinned at one core reading `files_per_core` files a batch; without
    `events_per_file`, the load is calibrated first (`Scenario.calibrate`)."""
    echo(f"== pinned at the minimum (1 core, {files_per_core} files per batch) ==")
    platform = prepare(root, ports, "apply", files_per_core)
    scenario = Scenario(platform, echo, events_per_file or CALIBRATION_START_EVENTS)
    scenario.supervisor.scale(JOB, 1, "benchmark baseline: pinned at the minimum")
    try:
        scenario.start()
        if events_per_file is None:
            scenario.calibrate()
        _, started = scenario.step(step_seconds)
        scenario.drain(started, 0.0)
    finally:
        stop_all_jobs(platform)
    return scenario.figures


def seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def modelled_drain(rate: float, base: float, step_seconds: float) -> float:
    """The drain of a job that processes `rate` events a second from the step's first second:
    the backlog grows by (4 x base - rate) a second for the step, then falls by (rate - base).

    The queueing arithmetic behind the drain figures. With the one-core rate it models the pinned
    run (a check of the model against the measured drain); with the two-core rate it is the
    autoscaled run's floor: two cores from the first second, no decision, no warm-up, no take-over.
    """
    growth = 4 * base - rate
    if growth <= 0:
        return 0.0
    return step_seconds + step_seconds * growth / (rate - base)


def drain_bounds(
    pinned: RunFigures, per_core: dict[int, float], step_seconds: float
) -> list[tuple[str, str, str]]:
    """Rows: the modelled pinned drain (vs the measured one) and the floor at two cores."""
    if pinned.events_per_file is None or not pinned.drain or not {1, 2} <= per_core.keys():
        return []
    base = pinned.events_per_file / TICK_SECONDS
    one, two = per_core[1], 2 * per_core[2]
    if one <= base or two <= base:
        return []
    at_one, at_two = modelled_drain(one, base, step_seconds), modelled_drain(two, base, step_seconds)
    return [
        (
            "model check: the drain at the one-core rate, from the step's first second",
            f"{at_one:.1f} s (measured pinned {pinned.drain:.1f} s)",
            "-",
        ),
        (
            "floor: the drain at the two-core rate from the step's first second (no decision, "
            "warm-up or take-over)",
            f"{at_two:.1f} s ({at_two / pinned.drain:.2f}x pinned)",
            "-",
        ),
    ]


def report(
    auto: RunFigures, pinned: RunFigures, big_batch: RunFigures, step_seconds: float
) -> list[tuple[str, str, str]]:
    """(figure, value, target) rows."""
    ratio = auto.drain / pinned.drain if auto.drain and pinned.drain else None
    big_ratio = big_batch.drain / pinned.drain if big_batch.drain and pinned.drain else None
    cold = auto.cold_start
    worst = max(auto.restart_costs, default=None)
    windows = (auto.step_to_decision or 0) / STABILIZATION_SECONDS
    rates = {**pinned.true_rates, **{k: v for k, v in auto.true_rates.items() if k == 2}}
    per_core = {cores: statistics.median(values) / cores for cores, values in sorted(rates.items()) if values}
    return [
        (
            "load: events per landing file (one file a 4 s tick, four during the step)",
            f"{pinned.events_per_file:,}",
            f"one core {BASE_UTILIZATION:.0%} busy at the base",
        ),
        ("backlog drain after the 4x step, pinned at 1 core (baseline)", seconds(pinned.drain), "-"),
        (
            "backlog drain after the 4x step, autoscaled",
            f"{seconds(auto.drain)} ({ratio:.2f}x)" if ratio else seconds(auto.drain),
            "<= 0.6x",
        ),
        (
            f"backlog drain, pinned at 1 core with the 2-core batch size ({2 * FILES_PER_CORE} files)",
            f"{seconds(big_batch.drain)} ({big_ratio:.2f}x)" if big_ratio else seconds(big_batch.drain),
            "-",
        ),
        ("cold start of the pinned run: launch -> first committed batch", seconds(pinned.cold_start), "-"),
        (
            "step -> scale decision",
            f"{seconds(auto.step_to_decision)} ({windows:.1f} windows)",
            f"<= 2 windows ({2 * STABILIZATION_SECONDS:g} s)",
        ),
        ("cold start of the autoscaled run: launch -> first committed batch", seconds(cold), "-"),
        (
            "downtime per rescale (stop -> first committed batch), each",
            ", ".join(f"{c:.1f} s" for c in auto.restart_costs) or "-",
            f"<= cold start + 5 s ({(cold or 0) + 5:.1f} s); worst {seconds(worst)}",
        ),
        (
            "rescales during the noisy plateau after the first settled",
            "-" if auto.plateau_rescales is None else str(auto.plateau_rescales),
            "0",
        ),
        *[
            (f"events per busy second per core at {cores} core(s)", f"{rate:,.0f}", "-")
            for cores, rate in per_core.items()
        ],
        *drain_bounds(pinned, per_core, step_seconds),
    ]


def benchmark(
    step_seconds: float, plateau_seconds: float, echo: Callable[[str], None], batch_baseline: bool = True
) -> str:
    """Both runs on one embedded cluster; the figures as a Markdown table."""
    ports = cluster_ports()
    cluster = SparkCluster.for_platform(prepare(WORKDIR / "cluster", ports, "apply"))
    assert cluster is not None
    echo(f"starting the embedded cluster at {cluster.master_url}")
    cluster.start(timeout=240)
    try:
        pinned = run_pinned(WORKDIR / "pinned", ports, None, step_seconds, echo, FILES_PER_CORE)
        events = pinned.events_per_file
        assert events is not None
        auto = run_autoscaled(WORKDIR / "autoscaled", ports, events, step_seconds, plateau_seconds, echo)
        big_batch = (
            run_pinned(WORKDIR / "big-batch", ports, events, step_seconds, echo, 2 * FILES_PER_CORE)
            if batch_baseline
            else RunFigures()
        )
    finally:
        cluster.stop()
    lines = ["| figure | value | target |", "|---|---|---|"]
    lines += ["| " + " | ".join(row) + " |" for row in report(auto, pinned, big_batch, step_seconds)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.autoscaling", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--step-seconds", type=float, default=STEP_SECONDS, help="how long the 4x step lasts")
    parser.add_argument(
        "--plateau-seconds", type=float, default=PLATEAU_SECONDS, help="the noisy plateau after the step"
    )
    parser.add_argument(
        "--no-batch-baseline",
        dest="batch_baseline",
        action="store_false",
        help="leave out the third run (one core with the 2-core batch size)",
    )
    args = parser.parse_args(argv)

    def echo(line: str) -> None:
        print(line, flush=True)

    print(benchmark(args.step_seconds, args.plateau_seconds, echo, args.batch_baseline))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
