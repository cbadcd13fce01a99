"""Router throughput: the platform's driver against the bare PySpark baseline, same files, same run.

Both process every file present at start with an available-now trigger in batches of
`max_files_per_trigger`, on local[2], from a cold JVM. Reported: wall time from process start to
exit, events/s on that, and the sum of batch durations Spark measured (start-up excluded).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from ops.driver.telemetry import read_heartbeat
from ops.spec.paths import HEARTBEAT_FILE
from ops.spec.platform import CONF_DIR_ENV, DEFAULT_CONF_DIR
from synthetic.generator import write_batch

FILES = 20
EVENTS_PER_FILE = 30_000
MAX_FILES_PER_TRIGGER = 4


@dataclass(frozen=True)
class Timing:
    name: str
    wall_seconds: float
    batch_seconds: float
    events: int

    @property
    def events_per_second(self) -> float:
        return self.events / self.wall_seconds


def rooted_platform(workdir: Path, s3_port: int | None = None) -> dict:
    """The repo's platform.yaml with every storage root and the ledger under `workdir`; with
    `s3_port`, its S3 a server of the benchmark's own on that port (bucket `bench`)."""
    platform = yaml.safe_load((DEFAULT_CONF_DIR / "platform.yaml").read_text())
    platform["storage"] = {
        "runtime_root": str(workdir / "runtime"),
        "landing_root": str(workdir / "landing"),
        "lake_root": str(workdir / "lake"),
        "checkpoint_root": str(workdir / "checkpoints"),
    }
    platform["ledger"] = {"url": f"sqlite:///{workdir / 'ledger.db'}"}
    if s3_port is not None:
        platform["s3"] = {"endpoint_url": f"http://127.0.0.1:{s3_port}", "bucket": "bench"}
    return platform


def prepare(workdir: Path, echo) -> tuple[Path, int]:
    """Generated landing files and a conf dir whose platform is rooted in `workdir`."""
    shutil.rmtree(workdir, ignore_errors=True)
    landing = workdir / "landing" / "events"
    events = 0
    for seed in range(FILES):
        events += write_batch(landing, EVENTS_PER_FILE, malformed_fraction=0.005, seed=seed).total
    size_mb = sum(p.stat().st_size for p in landing.iterdir()) / 1e6
    echo(f"generated {events:,} events in {FILES} files ({size_mb:.0f} MB)")
    conf_dir = workdir / "conf"
    (conf_dir / "jobs").mkdir(parents=True)
    (conf_dir / "platform.yaml").write_text(yaml.safe_dump(rooted_platform(workdir)))
    router = yaml.safe_load((DEFAULT_CONF_DIR / "jobs" / "router.yaml").read_text())
    router["operations"]["trigger"]["max_files_per_trigger"] = MAX_FILES_PER_TRIGGER
    (conf_dir / "jobs" / "router.yaml").write_text(yaml.safe_dump(router, sort_keys=False))
    return conf_dir, events


def run_platform(conf_dir: Path, workdir: Path, events: int, round_no: int) -> Timing:
    shutil.rmtree(workdir / "lake", ignore_errors=True)
    shutil.rmtree(workdir / "checkpoints", ignore_errors=True)
    env = {**os.environ, CONF_DIR_ENV: str(conf_dir), "PYSPARK_PYTHON": sys.executable}
    started = time.monotonic()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "jobs.runner",
            "--job",
            "router",
            "--run-id",
            f"bench-{round_no}",
            "--available-now",
        ],
        env=env,
        check=True,
        capture_output=True,
    )
    wall = time.monotonic() - started
    beat = read_heartbeat(workdir / "runtime" / "jobs" / "router" / HEARTBEAT_FILE)
    batch_ms = sum(s.duration_ms for s in beat.recent if s.num_input_rows > 0) if beat else 0
    return Timing("platform router", wall, batch_ms / 1000, events)


def run_bare(conf_dir: Path, workdir: Path, events: int) -> Timing:
    out, checkpoint = workdir / "bare" / "out", workdir / "bare" / "checkpoint"
    shutil.rmtree(workdir / "bare", ignore_errors=True)
    started = time.monotonic()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.bare_router",
            "--conf-dir",
            str(conf_dir),
            "--landing",
            str(workdir / "landing" / "events"),
            "--out",
            str(out),
            "--checkpoint",
            str(checkpoint),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    wall = time.monotonic() - started
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    return Timing("bare PySpark", wall, summary["batch_ms"] / 1000, events)


def benchmark(workdir: Path, rounds: int, echo) -> list[Timing]:
    """Alternate baseline and platform runs; return every timing."""
    conf_dir, events = prepare(workdir, echo)
    timings = []
    for round_no in range(rounds):
        for timing in (
            run_bare(conf_dir, workdir, events),
            run_platform(conf_dir, workdir, events, round_no),
        ):
            echo(
                f"  round {round_no + 1}: {timing.name:16} {timing.wall_seconds:6.1f}s wall  "
                f"{timing.events_per_second:9,.0f} events/s  batches {timing.batch_seconds:5.1f}s"
            )
            timings.append(timing)
    return timings
