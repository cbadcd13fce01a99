"""Recovery on the embedded platform: kill -9 the router's driver and time the supervisor.

Runs the whole embedded platform (SeaweedFS, Airflow scheduler/dag-processor/triggerer/api-server,
the event generator) in a private runtime directory with the repo's unchanged router spec. For each
kill it measures, from the SIGKILL:
- detection: when the supervision DAG's watch trigger saw the driver gone (its `detect` decision);
- recovery: when the relaunched driver committed its first batch (its heartbeat).
The baseline, measured in the same run, is the cold start: launch decision to first committed batch.
Relaunches back off exponentially per the spec (2 s, 4 s, 8 s...), so later kills wait longer.
"""

from __future__ import annotations

import os
import shutil
import signal
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from benchmarks.throughput import rooted_platform
from ops.clock import utcnow
from ops.driver.telemetry import Heartbeat, read_heartbeat
from ops.embedded import platform as embedded
from ops.ledger.store import DecisionRecord, Ledger, RunRecord
from ops.spec.job import find_job
from ops.spec.paths import JobPaths
from ops.spec.platform import DEFAULT_CONF_DIR, load_platform

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
