"""Recovery from kill -9 of a driver: on the embedded platform, and with or without a warm standby.

`benchmark` runs the whole embedded platform (SeaweedFS, Airflow scheduler/dag-processor/triggerer/
api-server, the event generator) in a private runtime directory with the repo's unchanged router
spec (`python -m benchmarks.run --only recovery`). For each kill it measures, from the SIGKILL:
- detection: when the supervision DAG's watch trigger saw the driver gone (its `detect` decision);
- recovery: when the relaunched driver committed its first batch (its heartbeat).
The baseline, measured in the same run, is the cold start: launch decision to first committed batch.
Relaunches back off exponentially per the spec (2 s, 4 s, 8 s...), so later kills wait longer.

`python -m benchmarks.recovery` compares kill -9 -> next committed batch with a warm standby
(`operations.restart.warm_standby: true`) against a cold relaunch (false), rounds alternated in
one run on one platform, and measures the standby's memory (RSS of its Python driver and JVM).
It runs the supervisor's passes itself the way the watch trigger does (`attention` polled every
second, a pass when it answers), without Airflow, so the figures are the driver's side of
recovery. The router spec is the repo's, with `restart.stable_seconds: 0` so that every kill is
the first failure of a streak (the 2 s initial backoff applies to a cold relaunch; a standby takes
over without it), and `warm_standby` switched between rounds.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil
import yaml

from benchmarks.throughput import rooted_platform
from ops.clock import utcnow
from ops.control.supervisor import Supervisor, stop_all_jobs
from ops.driver.takeover import read_standby_status
from ops.driver.telemetry import Heartbeat, read_heartbeat
from ops.embedded import platform as embedded
from ops.ledger.records import DecisionRecord, RunRecord, StandbyRecord
from ops.ledger.store import Ledger
from ops.ports import free_loopback_port
from ops.spec.job import find_job
from ops.spec.paths import JobPaths
from ops.spec.platform import DEFAULT_CONF_DIR, PlatformConfig, load_platform
from synthetic.generator import write_batch

KILLS = 3


@dataclass(frozen=True)
class Recovery:
    kill: int
    backoff_seconds: float
    detection_seconds: float
    recovery_seconds: float


def _poll(condition: Callable[..., Any], *args: Any, timeout: float, what: str) -> Any:
    """The first truthy `condition(*args)`, polled every 0.1 s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition(*args)
        if found:
            return found
        time.sleep(0.1)
    raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}")


def _detection(ledger: Ledger, since: datetime) -> DecisionRecord | None:
    return next((d for d in ledger.decisions("router", action="detect") if d.at >= since), None)


def _relaunched(ledger: Ledger, old_run_id: str) -> RunRecord | None:
    run = ledger.current_run("router")
    return run if run is not None and run.run_id != old_run_id else None


def _committed(beat_path: Path, run_id: str) -> Heartbeat | None:
    beat = read_heartbeat(beat_path)
    return beat if beat and beat.run_id == run_id and beat.event == "progress" else None


def benchmark(workdir: Path, echo: Callable[[str], None]) -> tuple[float, list[Recovery]]:
    """The cold-start time and one `Recovery` per kill."""
    shutil.rmtree(workdir, ignore_errors=True)
    conf_dir = workdir / "conf"
    (conf_dir / "jobs").mkdir(parents=True)
    (conf_dir / "platform.yaml").write_text(yaml.safe_dump(rooted_platform(workdir)))
    shutil.copy(DEFAULT_CONF_DIR / "jobs" / "router.yaml", conf_dir / "jobs" / "router.yaml")
    platform = load_platform(conf_dir)
    beat_path = JobPaths.of(platform, find_job("router", platform.conf_dir)).heartbeat
    embedded.up(platform, echo=echo)
    try:
        ledger = Ledger.open(platform.resolved_ledger_url)
        run = _poll(
            ledger.current_run, "router", timeout=180, what="the supervision DAG to launch the router"
        )
        first = _poll(_committed, beat_path, run.run_id, timeout=180, what="the first committed batch")
        cold_start = first.at - run.started_at.timestamp()
        echo(f"cold start: launch -> first committed batch {cold_start:.1f}s")
        recoveries = []
        for kill in range(1, KILLS + 1):
            run = ledger.current_run("router")
            _poll(_committed, beat_path, run.run_id, timeout=120, what="a committed batch before the kill")
            killed_at = utcnow()
            os.kill(run.pid, signal.SIGKILL)
            detect = _poll(
                _detection, ledger, killed_at, timeout=120, what="the watch trigger to see the kill"
            )
            relaunched = _poll(_relaunched, ledger, run.run_id, timeout=120, what="the relaunch")
            beat = _poll(
                _committed, beat_path, relaunched.run_id, timeout=120, what="the relaunched driver's batch"
            )
            launch = next(d for d in ledger.decisions("router", action="launch") if d.at >= killed_at)
            recovery = Recovery(
                kill=kill,
                backoff_seconds=float(launch.inputs.get("backoff_seconds", 0.0)),
                detection_seconds=(
                    datetime.fromisoformat(detect.inputs["detected_at"]) - killed_at
                ).total_seconds(),
                recovery_seconds=beat.at - killed_at.timestamp(),
            )
            echo(
                f"kill {kill}: detected after {recovery.detection_seconds:.1f}s, next committed batch after "
                f"{recovery.recovery_seconds:.1f}s (backoff {recovery.backoff_seconds:g}s)"
            )
            recoveries.append(recovery)
        return cold_start, recoveries
    finally:
        embedded.down(platform, echo=echo)


def summary(cold_start: float, recoveries: list[Recovery]) -> list[tuple[str, str, str, str]]:
    """Rows of (figure, value, target, ratio to cold start)."""
    detection = [r.detection_seconds for r in recoveries]
    recovery = [r.recovery_seconds for r in recoveries]
    return [
        ("cold start: launch -> first committed batch (baseline)", f"{cold_start:.1f} s", "-", "1.00"),
        (
            "kill -9 -> detection, median / max",
            f"{statistics.median(detection):.1f} / {max(detection):.1f} s",
            "<= 10 s",
            f"{statistics.median(detection) / cold_start:.2f}",
        ),
        (
            "kill -9 -> next committed batch, median / max",
            f"{statistics.median(recovery):.1f} / {max(recovery):.1f} s",
            "<= 30 s",
            f"{statistics.median(recovery) / cold_start:.2f}",
        ),
    ]


# --- warm standby against cold relaunch -----------------------------------------------------------

JOB = "router"
# Landing files the writer thread adds while the job runs, so every recovery has a batch to commit.
EVENTS_PER_FILE = 200
FILE_EVERY_SECONDS = 1.0
# The watch trigger polls `attention` this often.
WATCH_POLL_SECONDS = 1.0
# Generous limits on a loaded 2-core machine: they bound a failure, they are not the figures.
START_TIMEOUT = 600.0
RECOVERY_TIMEOUT = 300.0


@dataclass(frozen=True)
class Round:
    """One kill: the mode, kill -9 -> next committed batch, the backoff the policy waited, and the
    1-minute load average at the kill."""

    number: int
    standby: bool
    recovery_seconds: float
    backoff_seconds: float
    load_average: float


def _write_spec(conf_dir: Path, metrics_port: int, warm_standby: bool) -> None:
    router = yaml.safe_load((DEFAULT_CONF_DIR / "jobs" / f"{JOB}.yaml").read_text())
    operations = router["operations"]
    operations["metrics_port"] = metrics_port
    operations["restart"]["warm_standby"] = warm_standby
    operations["restart"]["stable_seconds"] = 0
    operations["savepoints"]["interval_minutes"] = None
    (conf_dir / "jobs" / f"{JOB}.yaml").write_text(yaml.safe_dump(router, sort_keys=False))


@contextmanager
def _running(platform: PlatformConfig) -> Iterator[Supervisor]:
    """The supervisor's passes as the watch trigger runs them, and a writer adding landing files,
    both in threads until the block ends (then every driver and standby is stopped)."""
    supervisor = Supervisor.for_platform(platform)
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            if supervisor.attention(JOB) is not None:
                supervisor.reconcile(JOB)
            done.wait(WATCH_POLL_SECONDS)

    def write_input() -> None:
        seed = 0
        while not done.is_set():
            write_batch(platform.landing_root / "events", EVENTS_PER_FILE, 0.01, seed)
            seed += 1
            done.wait(FILE_EVERY_SECONDS)

    threads = [threading.Thread(target=target, daemon=True) for target in (watch, write_input)]
    for thread in threads:
        thread.start()
    try:
        yield supervisor
    finally:
        done.set()
        for thread in threads:
            thread.join(120)
        stop_all_jobs(platform)


def _ready_standby(platform: PlatformConfig, ledger: Ledger) -> StandbyRecord | None:
    standby = ledger.current_standby(JOB)
    if standby is None:
        return None
    status = read_standby_status(platform.job_runtime_dir(JOB), standby.run_id)
    return standby if status is not None and status.state == "ready" else None


def standby_rss_bytes(standby: StandbyRecord) -> int:
    """Resident memory of a standby: its Python driver and every process of its group (the JVM)."""
    assert standby.pid is not None
    total = 0
    for process in psutil.process_iter(["memory_info"]):
        try:
            if os.getpgid(process.pid) == standby.pid:
                total += process.info["memory_info"].rss
        except (ProcessLookupError, PermissionError):
            continue
    return total


def _steady(platform: PlatformConfig, ledger: Ledger, beat_path: Path, standby: bool) -> RunRecord:
    """Wait until the job's run has committed a batch and, in standby mode, a standby is ready
    (in cold mode: none is left); the run."""

    def steady() -> RunRecord | None:
        run = ledger.current_run(JOB)
        if run is None or _committed(beat_path, run.run_id) is None:
            return None
        has_standby = ledger.current_standby(JOB) is not None
        if standby and _ready_standby(platform, ledger) is None or not standby and has_standby:
            return None
        return run

    result: RunRecord = _poll(steady, timeout=START_TIMEOUT, what="a running driver (and a ready standby)")
    return result


def standby_benchmark(
    workdir: Path, rounds: int, echo: Callable[[str], None]
) -> tuple[list[Round], list[int]]:
    """`rounds` kills in each mode, alternated (cold first); the rounds and the standbys' RSS."""
    shutil.rmtree(workdir, ignore_errors=True)
    conf_dir = workdir / "conf"
    (conf_dir / "jobs").mkdir(parents=True)
    (conf_dir / "platform.yaml").write_text(yaml.safe_dump(rooted_platform(workdir)))
    metrics_port = free_loopback_port()
    _write_spec(conf_dir, metrics_port, warm_standby=False)
    platform = load_platform(conf_dir)
    beat_path = JobPaths.of(platform, find_job(JOB, conf_dir)).heartbeat
    results: list[Round] = []
    memory: list[int] = []
    with _running(platform) as supervisor:
        ledger = supervisor.ledger
        for number in range(1, 2 * rounds + 1):
            standby = number % 2 == 0
            _write_spec(conf_dir, metrics_port, warm_standby=standby)
            run = _steady(platform, ledger, beat_path, standby)
            if standby:
                ready = _ready_standby(platform, ledger)
                assert ready is not None
                memory.append(standby_rss_bytes(ready))
            load = os.getloadavg()[0]
            killed_at = utcnow()
            assert run.pid is not None
            os.kill(run.pid, signal.SIGKILL)
            relaunched = _poll(_relaunched, ledger, run.run_id, timeout=RECOVERY_TIMEOUT, what="the relaunch")
            beat = _poll(
                _committed, beat_path, relaunched.run_id, timeout=RECOVERY_TIMEOUT, what="the next batch"
            )
            action = "take_over" if standby else "launch"
            decision = next(d for d in ledger.decisions(JOB, action=action) if d.at >= killed_at)
            result = Round(
                number=number,
                standby=standby,
                recovery_seconds=beat.at - killed_at.timestamp(),
                backoff_seconds=float(decision.inputs.get("backoff_seconds", 0.0)),
                load_average=load,
            )
            echo(
                f"round {number} ({'standby' if standby else 'cold'}): next committed batch after "
                f"{result.recovery_seconds:.1f}s (backoff {result.backoff_seconds:g}s, load {load:.1f})"
            )
            results.append(result)
    return results, memory


def standby_table(results: list[Round], memory: list[int]) -> str:
    """The per-round table and the summary (medians, ratio, memory), as Markdown."""
    lines = [
        "| round | mode | kill -9 -> next committed batch | backoff waited | load avg (1 min) |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        mode = "warm standby" if r.standby else "cold relaunch"
        seconds = f"{r.recovery_seconds:.1f} s"
        lines.append(f"| {r.number} | {mode} | {seconds} | {r.backoff_seconds:g} s | {r.load_average:.1f} |")
    cold = statistics.median(r.recovery_seconds for r in results if not r.standby)
    warm = statistics.median(r.recovery_seconds for r in results if r.standby)
    rss = statistics.median(memory) / 2**20
    lines += [
        "",
        "| figure | value | target |",
        "|---|---|---|",
        f"| kill -9 -> next committed batch, cold relaunch (median) | {cold:.1f} s | - |",
        f"| kill -9 -> next committed batch, warm standby (median) | {warm:.1f} s | <= 10 s |",
        f"| ratio standby / cold | {warm / cold:.2f}x | <= 0.35x |",
        f"| standby memory, RSS of its Python driver + JVM (median of {len(memory)}) | {rss:.0f} MiB | - |",
        f"| load average (1 min) at the kills, min-max | {min(r.load_average for r in results):.1f}-"
        f"{max(r.load_average for r in results):.1f} | - |",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.recovery", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--rounds", type=int, default=3, help="kills per mode (alternated)")
    args = parser.parse_args()
    workdir = Path(__file__).resolve().parent / "out" / "standby"
    results, memory = standby_benchmark(workdir, args.rounds, lambda line: print(line, flush=True))
    print(standby_table(results, memory))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
