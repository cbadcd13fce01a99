"""The control plane's cost per job: N jobs supervised by the real embedded Airflow.

python -m benchmarks.fleet [--jobs 10 100 500] [--ledger sqlite|postgresql] [--kills 20]
                           [--rest-seconds 60] [--kill-fleet-task] [--workdir DIR]

For each N it starts the embedded platform (`ops.embedded.platform.up`: SeaweedFS, Airflow's
scheduler, dag-processor, triggerer and api-server, the event generator; PostgreSQL too with
`--ledger postgresql`, where the ledger lives) in a private runtime directory, with N copies of
the repo's router job, all of them autostarted. Every driver is a **stand-in**
(`tests.support.stub_driver`, named through `ops.control.launcher.DRIVER_MODULE_ENV`): a process
without Spark that heartbeats and commits a stand-in batch every few seconds the way a driver
does. Everything else is the platform's own code: the DAG file, the supervision DAGs, their
watch triggers, the supervisor's passes, the ledger, `warden status` and the job board.

It prints, per N:
- DAG-file parse time, and the scheduler's loop time (Airflow's own StatsD metrics,
  `dag_processing.last_duration` and `scheduler.scheduler_loop_duration`, received on a loopback
  UDP port of the benchmark's);
- the time from `up` returning to every job running (its record RUNNING, its driver alive);
- the control plane at rest over `--rest-seconds`, once Spark's analyzer has a verdict on every
  job file (the first platform DAG runs analyse every new version: minutes of Spark at 500 jobs,
  once): every process of the four Airflow components' sessions, task processes included; CPU in
  cores (`CpuMeter`: each process's own time, sampled every second) and memory (PSS, shared pages
  divided among their users), the triggerer's apart;
- kill -9 of `--kills` stand-ins spread over the fleet, one every `KILL_EVERY_SECONDS`:
  kill -> detected (the first of a `detect` decision and the run's close) and kill -> relaunched
  (the new run's start), p50 and p99;
- with `--kill-fleet-task`, under the fleet watch: kill -9 of the `warden_fleet` task's process
  and a stand-in a second later -> the stand-in relaunched; then the same with the task's Airflow
  supervisor killed too, which Airflow sees only once the task's heartbeat is
  `task_instance_heartbeat_timeout` old;
- `warden status` and the board API (`GET /streamwarden/api/board` on the api-server) latency;
- the ledger's growth per job per day (rows written during the rest window) and the rows a job
  holds once retention (`ledger.retention`) prunes at its defaults.

Targets (issue "a fleet, not a handful", at 500 jobs on 2 cores): detection p99 <= 10 s,
relaunch p99 <= 30 s, control plane at rest < 1 core and < 4 GB, board < 300 ms.
"""

from __future__ import annotations

import argparse
import configparser
import os
import shutil
import signal
import socket
import statistics
import subprocess
import threading
import time
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import psutil
import sqlalchemy as sa
import yaml

from benchmarks.throughput import rooted_platform
from ops.clock import utcnow
from ops.control.launcher import DRIVER_MODULE_ENV
from ops.embedded import platform as embedded
from ops.embedded.services import EmbeddedPostgres, ManagedProcess, free_seaweed_ports, venv_bin_dir
from ops.ledger.schema import alerts_table, decisions_table, runs_table
from ops.ledger.store import Ledger
from ops.ports import free_loopback_port
from ops.spec.analysis import unanalysed
from ops.spec.job import load_jobs
from ops.spec.platform import CONF_DIR_ENV, DEFAULT_CONF_DIR, FLEET_DAG_ID, PlatformConfig, load_platform
from ops.states import Lifecycle
from tests.support.stub_driver import STUB_BATCH_SECONDS_ENV

STAND_IN = "tests.support.stub_driver"
# A stand-in commits a batch this often (the router's own trigger interval is 5 s).
BATCH_SECONDS = 5.0
KILL_EVERY_SECONDS = 2.0
FIRST_METRICS_PORT = 10_000
# Generous bounds on a loaded 2-core machine: they end a run that does not get there, they are
# not figures.
FLEET_UP_SECONDS_PER_JOB = 3.0
FLEET_UP_FLOOR_SECONDS = 180.0
KILL_TIMEOUT_SECONDS = 300.0
# Airflow's zombie detection waits out the task's heartbeat timeout (300 s by default) first.
FLEET_TASK_KILL_TIMEOUT_SECONDS = 900.0
SAMPLE_EVERY_SECONDS = 5.0
LATENCY_ROUNDS = 5
# The tables that grow with history, each with the retention setting that prunes it.
HISTORY_TABLES = {"runs_days": runs_table, "decisions_days": decisions_table, "alerts_days": alerts_table}


def echo(line: str) -> None:
    print(line, flush=True)


# --- Airflow's own metrics ------------------------------------------------------------------------


class StatsdListener:
    """A StatsD server on a loopback UDP port: every timer and gauge Airflow sends, by name."""

    def __init__(self) -> None:
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.socket.bind(("127.0.0.1", 0))
        self.socket.settimeout(0.5)
        self.port = self.socket.getsockname()[1]
        self.values: dict[str, list[float]] = defaultdict(list)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stopping.is_set():
            try:
                packet = self.socket.recv(65_536).decode(errors="replace")
            except TimeoutError:
                continue
            for line in packet.splitlines():
                name, _, rest = line.partition(":")
                value, _, kind = rest.partition("|")
                if kind.startswith(("ms", "g")):
                    try:
                        self.values[name].append(float(value))
                    except ValueError:
                        continue

    def matching(self, fragment: str) -> list[float]:
        """Every value received of the metrics whose name holds `fragment`."""
        return [value for name, values in list(self.values.items()) if fragment in name for value in values]

    def clear(self) -> None:
        self.values.clear()

    def close(self) -> None:
        self._stopping.set()
        self._thread.join()
        self.socket.close()


def write_airflow_metrics_cfg(platform: PlatformConfig, statsd_port: int) -> None:
    """Airflow's StatsD settings in its config file: the platform passes no AIRFLOW__ variable of
    the caller's to its components, and each of them reads the file. The file is the one Airflow
    writes at its first migration (with the secrets its components share), settings added. The
    migration needs the metadata database's server: it is started here, and `up` leaves it be."""
    server = EmbeddedPostgres.for_platform(platform)
    assert server is not None
    server.start()
    embedded.migrate_airflow_db(platform)
    path = platform.runtime_root / "airflow" / "airflow.cfg"
    config = configparser.ConfigParser(interpolation=None)
    config.read(path)
    config["metrics"].update(
        statsd_on="True", statsd_host="127.0.0.1", statsd_port=str(statsd_port), statsd_prefix="airflow"
    )
    with path.open("w") as file:
        config.write(file)


# --- the fleet's conf -----------------------------------------------------------------------------


def fleet_job_names(jobs: int) -> list[str]:
    return [f"fleet_{number:04d}" for number in range(jobs)]


def write_fleet_conf(workdir: Path, jobs: int, ledger: str, design: str) -> PlatformConfig:
    """A conf dir under `workdir`: the repo's platform rooted there on free loopback ports, with
    Airflow's metadata in the embedded PostgreSQL server and supervised by `design`, and `jobs`
    copies of the router job, every one autostarted."""
    conf_dir = workdir / "conf"
    (conf_dir / "jobs").mkdir(parents=True)
    settings = rooted_platform(workdir)
    settings["airflow"] = {"host": "127.0.0.1", "port": free_loopback_port()}
    settings["s3"] = {**settings["s3"], "endpoint_url": f"http://127.0.0.1:{free_seaweed_ports().s3}"}
    settings["spark"] = {**settings["spark"], "master": "local[1]"}
    settings["monitoring"] = {**settings["monitoring"], "scrape_targets_file": None}
    names = fleet_job_names(jobs)
    settings["autostart_jobs"] = names
    settings["postgres"] = {"port": free_loopback_port(), "data_dir": str(workdir / "postgres")}
    settings["airflow"]["metadata_database"] = "postgres"
    settings["supervision"] = {"fleet_from_jobs": 1 if design == "fleet" else jobs + 1}
    if ledger == "postgresql":
        unrooted = PlatformConfig.model_validate({**settings, "conf_dir": conf_dir})
        server = EmbeddedPostgres.for_platform(unrooted)
        assert server is not None
        settings["ledger"] = {"url": server.url("ledger")}
    (conf_dir / "platform.yaml").write_text(yaml.safe_dump(settings))

    router = yaml.safe_load((DEFAULT_CONF_DIR / "jobs" / "router.yaml").read_text())
    router["operations"].pop("preview", None)
    # A stand-in has no checkpoint to copy, and no output to compact: each compaction DAG would
    # run a Spark application as soon as it is registered, which is no part of supervising.
    router["operations"]["savepoints"]["interval_minutes"] = None
    router["operations"].pop("compaction", None)
    # Below SeaweedFS's block (20000+, `free_seaweed_ports`) and the kernel's ephemeral range.
    ports = iter(range(FIRST_METRICS_PORT, FIRST_METRICS_PORT + jobs))
    for name in names:
        job = {**router, "name": name}
        job["operations"] = {**router["operations"], "metrics_port": next(ports)}
        (conf_dir / "jobs" / f"{name}.yaml").write_text(yaml.safe_dump(job, sort_keys=False))
    return load_platform(conf_dir)


# --- the control plane's processes -----------------------------------------------------------------


def _session_processes(leaders: list[int]) -> list[psutil.Process]:
    """Every live process of the sessions these session leaders lead."""
    wanted = set(leaders)
    found = []
    for process in psutil.process_iter():
        try:
            if os.getsid(process.pid) in wanted:
                found.append(process)
        except (ProcessLookupError, PermissionError):
            continue
    return found


def cpu_seconds(leaders: list[int]) -> dict[tuple[int, float], float]:
    """Each live process of the sessions, by pid and start time: its own CPU seconds so far."""
    seconds = {}
    for process in _session_processes(leaders):
        try:
            times = process.cpu_times()
            seconds[(process.pid, process.create_time())] = times.user + times.system
        except psutil.Error:
            continue
    return seconds


def pss_bytes(leaders: list[int]) -> int:
    """The sessions' memory now: PSS, shared pages divided among their users."""
    total = 0
    for process in _session_processes(leaders):
        try:
            total += process.memory_full_info().pss
        except psutil.Error:
            continue
    return total


class CpuMeter:
    """CPU of a set of sessions over a window, sampled every second: each process's CPU between
    the first and the last sample that saw it, its whole CPU if it started after the first. A
    task process (a few seconds long at least) is caught; what one burns in its last second
    before it exits is not, so the figure is a floor by that much."""

    def __init__(self, leaders: list[int]) -> None:
        self.leaders = leaders
        self.first = cpu_seconds(leaders)
        self.last = dict(self.first)

    def sample(self) -> None:
        self.last.update(cpu_seconds(self.leaders))

    def seconds(self) -> float:
        return sum(cpu - self.first.get(process, 0.0) for process, cpu in self.last.items())


@dataclass
class RestFigures:
    cores: float
    peak_gb: float
    triggerer_cores: float
    triggerer_peak_mb: float


def measure_rest(airflow: list[ManagedProcess], seconds: float) -> RestFigures:
    """The control plane's CPU in cores and peak PSS over `seconds`, the triggerer's apart."""
    leaders = [pid for pid in (component.pid() for component in airflow) if pid is not None]
    triggerer = [pid for c in airflow if c.name == "airflow-triggerer" and (pid := c.pid()) is not None]
    whole, trig, started = CpuMeter(leaders), CpuMeter(triggerer), time.monotonic()
    peak, trig_peak = pss_bytes(leaders), pss_bytes(triggerer)
    last_pss = started
    while time.monotonic() - started < seconds:
        time.sleep(1.0)
        whole.sample()
        trig.sample()
        if time.monotonic() - last_pss >= SAMPLE_EVERY_SECONDS:
            peak, trig_peak = max(peak, pss_bytes(leaders)), max(trig_peak, pss_bytes(triggerer))
            last_pss = time.monotonic()
    elapsed = time.monotonic() - started
    return RestFigures(
        cores=whole.seconds() / elapsed,
        peak_gb=peak / 2**30,
        triggerer_cores=trig.seconds() / elapsed,
        triggerer_peak_mb=trig_peak / 2**20,
    )


# --- waiting, kills and latencies -----------------------------------------------------------------


def wait_for_fleet(ledger: Ledger, names: list[str], timeout: float) -> tuple[float, int]:
    """Seconds until every job runs (its record RUNNING, its driver alive) or is held in a
    terminal state (FAILED, SUSPENDED), or `timeout`; and how many ran then."""
    started = time.monotonic()
    while True:
        states = {record.name: record.state for record in ledger.jobs()}
        runs = ledger.open_runs()
        live = sum(
            1
            for name in names
            if states.get(name) == Lifecycle.RUNNING.name and name in runs and _alive(runs[name].pid)
        )
        lifecycles = [Lifecycle.__members__.get(states.get(name, "")) for name in names]
        held = sum(1 for lifecycle in lifecycles if lifecycle is not None and lifecycle.terminal)
        elapsed = time.monotonic() - started
        if live + held >= len(names) or elapsed >= timeout:
            return elapsed, live
        echo(f"  {live}/{len(names)} jobs running after {elapsed:.0f} s")
        time.sleep(5.0)


def wait_for_verdicts(platform: PlatformConfig, timeout: float) -> float:
    """Seconds until Spark's analyzer has a verdict on every job file (the platform DAG's
    `analyse_job_files`: a Spark application over the fleet's new versions, once per version, and
    no part of the control plane at rest), or `timeout`."""
    started = time.monotonic()
    while True:
        left = unanalysed(platform, load_jobs(platform.conf_dir))
        elapsed = time.monotonic() - started
        if not left or elapsed >= timeout:
            return elapsed
        echo(f"  {len(left)} job files still to analyse after {elapsed:.0f} s")
        time.sleep(5.0)


def _alive(pid: int | None) -> bool:
    return pid is not None and psutil.pid_exists(pid)


@dataclass
class Kill:
    job: str
    run_id: str
    at: datetime
    detected: float | None = None
    relaunched: float | None = None


def kill_spread(ledger: Ledger, names: list[str], kills: int) -> list[Kill]:
    """SIGKILL a live stand-in every KILL_EVERY_SECONDS, jobs spread evenly over the fleet."""
    step = max(1, len(names) // kills)
    done = []
    for name in names[::step][:kills]:
        run = ledger.current_run(name)
        if run is None or not _alive(run.pid):
            continue
        assert run.pid is not None
        at = utcnow()
        os.kill(run.pid, signal.SIGKILL)
        done.append(Kill(name, run.run_id, at))
        time.sleep(KILL_EVERY_SECONDS)
    return done


def _seen_dead(ledger: Ledger, kill: Kill) -> datetime | None:
    """When the supervisor saw the killed driver gone: the first of a watch's detection and the
    pass that closed its run (a pass that was not a watch's reaction records no detection)."""
    detect = next((d for d in ledger.decisions(kill.job, action="detect") if d.at >= kill.at), None)
    closed = next((run.stopped_at for run in ledger.runs(kill.job) if run.run_id == kill.run_id), None)
    seen = [datetime.fromisoformat(detect.inputs["detected_at"])] if detect is not None else []
    return min([*seen, *([closed] if closed is not None else [])], default=None)


def follow_kills(ledger: Ledger, kills: list[Kill], timeout: float = KILL_TIMEOUT_SECONDS) -> None:
    """Fill in each kill's detection and relaunch, from the ledger, waiting up to `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(k.relaunched is None for k in kills):
        for kill in kills:
            if kill.detected is None:
                seen = _seen_dead(ledger, kill)
                if seen is not None:
                    kill.detected = (seen - kill.at).total_seconds()
            if kill.relaunched is None:
                run = ledger.current_run(kill.job)
                if run is not None and run.run_id != kill.run_id:
                    kill.relaunched = (run.started_at - kill.at).total_seconds()
        time.sleep(0.5)


def fleet_task_process(platform: PlatformConfig, timeout: float) -> psutil.Process:
    """The running `warden_fleet` task's process, once there is one: Airflow titles it
    `airflow worker -- <task instance id>`; its parent is the task's supervisor."""
    server = EmbeddedPostgres.for_platform(platform)
    assert server is not None
    engine = sa.create_engine(server.url("airflow"))
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            with engine.connect() as connection:
                ids = connection.execute(
                    sa.text("SELECT id FROM task_instance WHERE dag_id = :dag AND state = 'running'"),
                    {"dag": FLEET_DAG_ID},
                ).scalars()
                titles = {f"airflow worker -- {id_}" for id_ in ids}
            for process in psutil.process_iter(["cmdline"]):
                # The title takes the first argument; the rest of the old command line is blanked.
                if next(iter(process.info["cmdline"] or []), None) in titles:
                    return process
            time.sleep(1.0)
    finally:
        engine.dispose()
    raise TimeoutError(f"no running {FLEET_DAG_ID} task after {timeout:.0f} s")


def kill_fleet_task(platform: PlatformConfig, ledger: Ledger, job: str, supervisor_too: bool) -> Kill:
    """SIGKILL the fleet task's process (and its supervisor), then, a second later, `job`'s stand-in."""
    task = fleet_task_process(platform, KILL_TIMEOUT_SECONDS)
    victims = [task, task.parent()] if supervisor_too else [task]
    for process in victims:
        if process is not None:
            process.kill()
    time.sleep(1.0)
    run = ledger.current_run(job)
    assert run is not None and run.pid is not None and _alive(run.pid), f"{job} has no live driver"
    at = utcnow()
    os.kill(run.pid, signal.SIGKILL)
    return Kill(job, run.run_id, at)


def timed(call: Callable[[], object], rounds: int) -> list[float]:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return times


def warden_status(platform: PlatformConfig) -> None:
    subprocess.run(
        [str(venv_bin_dir() / "warden"), "status"],
        env={**os.environ, CONF_DIR_ENV: str(platform.conf_dir)},
        capture_output=True,
        check=True,
        timeout=300,
    )


def board(platform: PlatformConfig) -> None:
    url = f"{platform.airflow.base_url}/streamwarden/api/board"
    with urllib.request.urlopen(url, timeout=300) as response:
        response.read()


def history_rows(ledger: Ledger) -> dict[str, int]:
    """The rows of each history table, by the retention setting that prunes it."""
    with ledger.engine.connect() as connection:
        return {
            setting: connection.execute(sa.select(sa.func.count()).select_from(table)).scalar_one()
            for setting, table in HISTORY_TABLES.items()
        }


# --- one fleet ------------------------------------------------------------------------------------


def percentile(values: list[float], share: float) -> float:
    """The nearest-rank percentile (`share` of 1): with fewer than 100 values, p99 is the maximum."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(share * len(ordered) + 0.5) - 1))]


@dataclass
class FleetResult:
    jobs: int
    ledger: str
    design: str
    up_seconds: float
    fleet_up_seconds: float
    live: int
    parse_seconds: float | None
    loop_ms: float | None
    loop_p99_ms: float | None
    rest: RestFigures
    kills: list[Kill] = field(default_factory=list)
    status_seconds: float = 0.0
    board_seconds: float = 0.0
    rows_per_job_day: float = 0.0
    retained_rows_per_job: float = 0.0
    # With --kill-fleet-task: the stand-in killed after the fleet task, and after the task and
    # its supervisor.
    task_kills: list[Kill] = field(default_factory=list)


@contextmanager
def stand_in_drivers() -> Iterator[None]:
    """Every driver started on this machine while the block runs is the stand-in."""
    saved = {name: os.environ.get(name) for name in (DRIVER_MODULE_ENV, STUB_BATCH_SECONDS_ENV)}
    os.environ[DRIVER_MODULE_ENV] = STAND_IN
    os.environ[STUB_BATCH_SECONDS_ENV] = str(BATCH_SECONDS)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def run_fleet(
    workdir: Path,
    jobs: int,
    ledger_kind: str,
    design: str,
    kills: int,
    rest_seconds: float,
    kill_task: bool = False,
) -> FleetResult:
    shutil.rmtree(workdir, ignore_errors=True)
    platform = write_fleet_conf(workdir, jobs, ledger_kind, design)
    names = fleet_job_names(jobs)
    statsd = StatsdListener()
    write_airflow_metrics_cfg(platform, statsd.port)
    with stand_in_drivers():
        started = time.monotonic()
        embedded.up(platform, timeout=max(300.0, jobs * 2.0), echo=lambda line: echo(f"  {line}"))
        up_seconds = time.monotonic() - started
        try:
            ledger = Ledger.open(platform.resolved_ledger_url)
            bound = max(FLEET_UP_FLOOR_SECONDS, jobs * FLEET_UP_SECONDS_PER_JOB)
            fleet_up, live = wait_for_fleet(ledger, names, bound)
            echo(f"  {live}/{jobs} jobs running {fleet_up:.0f} s after up")
            analysed = wait_for_verdicts(platform, bound)
            echo(f"  every job file analysed {analysed:.0f} s later")
            statsd.clear()
            rows_before, rest_started = history_rows(ledger), time.monotonic()
            rest = measure_rest(embedded.airflow_processes(platform), rest_seconds)
            per_job_day = 86_400 / jobs / (time.monotonic() - rest_started)
            growth = {
                setting: (rows - rows_before[setting]) * per_job_day
                for setting, rows in history_rows(ledger).items()
            }
            parse = statsd.matching("dag_processing.last_duration")
            loops = statsd.matching("scheduler.scheduler_loop_duration")
            echo(
                f"  at rest: {rest.cores:.2f} cores, {rest.peak_gb:.2f} GB; triggerer "
                f"{rest.triggerer_cores:.2f} cores, {rest.triggerer_peak_mb:.0f} MB"
            )
            status_seconds = statistics.median(timed(lambda: warden_status(platform), LATENCY_ROUNDS))
            board_seconds = statistics.median(timed(lambda: board(platform), LATENCY_ROUNDS))
            echo(f"  warden status {status_seconds:.2f} s, board {board_seconds * 1000:.0f} ms")
            done = kill_spread(ledger, names, kills)
            follow_kills(ledger, done)
            task_kills = []
            if kill_task and design == "fleet":
                # Jobs the spread did not kill, each after the fleet has its task back.
                for job, supervisor_too in ((names[1], False), (names[2], True)):
                    task_kills.append(kill_fleet_task(platform, ledger, job, supervisor_too))
                    follow_kills(ledger, task_kills[-1:], FLEET_TASK_KILL_TIMEOUT_SECONDS)
                    echo(
                        f"  fleet task killed{' with its supervisor' if supervisor_too else ''}: "
                        f"{job} relaunched after {_seconds([task_kills[-1].relaunched], 0.5)}"
                    )
            retention = platform.ledger.retention
            retained = sum(rate * getattr(retention, setting) for setting, rate in growth.items())
            return FleetResult(
                jobs=jobs,
                ledger=ledger_kind,
                design=design,
                up_seconds=up_seconds,
                fleet_up_seconds=fleet_up,
                live=live,
                # Sent as a timer, but in seconds (the dag-processor's own figure).
                parse_seconds=statistics.median(parse) if parse else None,
                loop_ms=statistics.median(loops) if loops else None,
                loop_p99_ms=percentile(loops, 0.99) if loops else None,
                rest=rest,
                kills=done,
                status_seconds=status_seconds,
                board_seconds=board_seconds,
                rows_per_job_day=sum(growth.values()),
                retained_rows_per_job=retained,
                task_kills=task_kills,
            )
        finally:
            # All at once: `down` stops the drivers one after the other.
            for run in Ledger.open(platform.resolved_ledger_url).open_runs().values():
                if _alive(run.pid):
                    assert run.pid is not None
                    os.kill(run.pid, signal.SIGTERM)
            embedded.down(platform, echo=lambda line: None)
            statsd.close()


# --- the report -----------------------------------------------------------------------------------


def _seconds(values: list[float | None], share: float) -> str:
    known = [v for v in values if v is not None]
    missing = len(values) - len(known)
    if not known:
        return "none"
    text = f"{percentile(known, share):.1f} s"
    return text + (f" ({missing} never)" if missing else "")


def table(results: list[FleetResult]) -> str:
    """A markdown row per fleet size."""
    header = (
        "| jobs | design | ledger | DAG file parse | scheduler loop p50 / p99 | fleet up | "
        "at rest: cores / GB | triggerer: cores / MB | detect p50 / p99 | relaunch p50 / p99 | "
        "warden status | board | "
        "ledger rows per job per day |\n|" + "---|" * 13
    )
    rows = []
    for r in results:
        detected = [k.detected for k in r.kills]
        relaunched = [k.relaunched for k in r.kills]
        parse = "none" if r.parse_seconds is None else f"{r.parse_seconds:.1f} s"
        loop = "none" if r.loop_ms is None else f"{r.loop_ms:.0f} / {r.loop_p99_ms:.0f} ms"
        rows.append(
            f"| {r.jobs} | {r.design} | {r.ledger} | {parse} | {loop} | "
            f"{r.live}/{r.jobs} in {r.fleet_up_seconds:.0f} s | "
            f"{r.rest.cores:.2f} / {r.rest.peak_gb:.2f} | {r.rest.triggerer_cores:.2f} / "
            f"{r.rest.triggerer_peak_mb:.0f} | {_seconds(detected, 0.5)} / {_seconds(detected, 0.99)} | "
            f"{_seconds(relaunched, 0.5)} / {_seconds(relaunched, 0.99)} | {r.status_seconds:.2f} s | "
            f"{r.board_seconds * 1000:.0f} ms | {r.rows_per_job_day:,.0f} ({r.retained_rows_per_job:,.0f} "
            f"kept) |"
        )
    return "\n".join([header, *rows])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, nargs="+", default=[10, 100, 500])
    parser.add_argument("--ledger", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("--design", choices=["per-job", "fleet"], nargs="+", default=["per-job", "fleet"])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--rest-seconds", type=float, default=60.0)
    parser.add_argument(
        "--kill-fleet-task", action="store_true", help="under the fleet watch, kill -9 its task too"
    )
    parser.add_argument("--workdir", type=Path, default=Path(__file__).resolve().parent / "out" / "fleet")
    args = parser.parse_args()
    results = []
    for jobs in args.jobs:
        for design in args.design:
            echo(f"== {jobs} jobs, {design} supervision, {args.ledger} ledger ==")
            workdir = args.workdir / f"{design}-{jobs}"
            results.append(
                run_fleet(
                    workdir, jobs, args.ledger, design, args.kills, args.rest_seconds, args.kill_fleet_task
                )
            )
            echo(table(results))
    for r in results:
        if r.task_kills:
            task, both = (_seconds([kill.relaunched], 0.5) for kill in r.task_kills)
            echo(
                f"{r.jobs} jobs, {r.ledger} ledger: a stand-in killed a second after the fleet task "
                f"was relaunched after {task}; after the task and its supervisor, {both}"
            )
    echo(
        "targets at 500 jobs: detection p99 <= 10 s, relaunch p99 <= 30 s, at rest < 1 core and "
        "< 4 GB, board < 300 ms"
    )


if __name__ == "__main__":
    main()
