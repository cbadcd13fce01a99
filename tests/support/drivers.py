"""Real job drivers (`python -m jobs.runner`) started the way the launcher starts them, and their inputs."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from ops.driver.checkpoint import log_entries, read_offsets, source_files, source_log_offset
from ops.driver.replay import pending_replay
from ops.driver.telemetry import Heartbeat, read_heartbeat
from ops.spec.platform import CONF_DIR_ENV, PlatformConfig
from synthetic.generator import DEFAULT_START, make_event
from synthetic.scenarios import write_json_lines
from tests.support.platform import job_paths

REPO_ROOT = Path(__file__).resolve().parents[2]


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll `condition` every half second until it holds; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")


def edit_job(platform: PlatformConfig, job: str, edit: Callable[[dict[str, Any]], None]) -> None:
    """Rewrite `conf/jobs/<job>.yaml` of the throwaway platform through `edit`."""
    edited_job_file(platform, job, edit, platform.conf_dir / "jobs" / f"{job}.yaml")


def edited_job_file(
    platform: PlatformConfig, job: str, edit: Callable[[dict[str, Any]], None], path: Path
) -> Path:
    """`conf/jobs/<job>.yaml` of the throwaway platform through `edit`, written to `path` (a
    candidate for `warden upgrade`, say)."""
    spec = yaml.safe_load((platform.conf_dir / "jobs" / f"{job}.yaml").read_text())
    edit(spec)
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def fast_trigger(spec: dict[str, Any]) -> None:
    """A 1 s trigger reading at most 2 landing files per batch."""
    spec["operations"]["trigger"] = {"interval_seconds": 1, "max_files_per_trigger": 2}


class Driver:
    """A `python -m jobs.runner` process in its own session, like the launcher starts it."""

    def __init__(self, platform: PlatformConfig, run_id: str, job: str = "router") -> None:
        self.platform = platform
        self.heartbeat_file = job_paths(platform, job).heartbeat
        self.log_path = platform.runtime_root / f"driver-{run_id}.log"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log_file:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "jobs.runner", "--job", job, "--run-id", run_id],
                cwd=REPO_ROOT,
                env={**os.environ, CONF_DIR_ENV: str(platform.conf_dir)},
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    # A driver's cold start (JVM, session, first batch) takes 20-30 s on a quiet machine and was
    # seen past 90 s with the 2 cores shared; the limits only bound how long a failure takes. A
    # driver that refuses its spec exits after the same cold start, so its exit waits as long.
    def wait_heartbeat(self, accept: Callable[[Heartbeat], bool], timeout: float = 240) -> Heartbeat:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            heartbeat = read_heartbeat(self.heartbeat_file)
            if heartbeat is not None and accept(heartbeat):
                return heartbeat
            if self.process.poll() is not None and (heartbeat is None or heartbeat.event != "terminated"):
                break
            time.sleep(0.2)
        raise AssertionError(
            f"no such heartbeat; last {read_heartbeat(self.heartbeat_file)}; log:\n{self.log()}"
        )

    def wait_exit(self, timeout: float = 240) -> int:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"driver did not exit; log:\n{self.log()}") from None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-5000:]

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


@pytest.fixture
def start_driver(platform_conf: PlatformConfig) -> Iterator[Callable[..., Driver]]:
    """Start drivers of the throwaway platform: `start_driver(run_id, job="router")`; killed at the end."""
    drivers: list[Driver] = []

    def start(run_id: str, job: str = "router") -> Driver:
        drivers.append(Driver(platform_conf, run_id, job))
        return drivers[-1]

    yield start
    for driver in drivers:
        driver.kill()


def caught_up(platform: PlatformConfig, job: str, files: int) -> bool:
    """Whether the job's newest committed batch had read `files` input files of its first source,
    no later batch is planned and nothing is queued for replay.

    Asks the committed batch's own offsets, not the source log: Spark logs a batch's files before
    its offsets, so "every file listed and every planned batch committed" can hold for a moment
    while the batch that reads the last files is still being planned.
    """
    checkpoint = platform.checkpoint_root / job
    commits, offsets = log_entries(checkpoint / "commits"), log_entries(checkpoint / "offsets")
    if not commits or max(commits) != max(offsets) or pending_replay(job_paths(platform, job)):
        return False
    return files_read(platform, job) == files


def files_read(platform: PlatformConfig, job: str, batch: int | None = None) -> int:
    """How many input files of its first source the job had read by committed batch `batch` (by
    default its newest; 0 before its first commit)."""
    checkpoint = platform.checkpoint_root / job
    commits, offsets = log_entries(checkpoint / "commits"), log_entries(checkpoint / "offsets")
    if not commits:
        return 0
    _, positions = read_offsets(offsets[max(commits) if batch is None else batch][0].read_bytes())
    upto = source_log_offset(positions[0])
    return len(source_files(checkpoint / "sources" / "0", upto=upto))


def write_sessions_input(platform: PlatformConfig, seed: int) -> object:
    """40 events per source in the 40 minutes from `40 * seed`, out of order by up to 40 minutes
    within the file, none behind the watermark of the batch before (lateness 10 minutes)."""
    rng = random.Random(seed)
    start = DEFAULT_START + timedelta(minutes=40 * seed)
    for source in ("web_events", "app_events"):
        lines = []
        for _ in range(40):
            event = make_event(rng, start + timedelta(minutes=rng.uniform(0, 40)))
            lines.append(json.dumps({**event, "user_id": f"u{rng.randrange(12):05d}"}))
        write_json_lines(platform.landing_root / source, f"{source}-{seed:03d}.json", lines)
    return None
