"""A Spark-free stand-in for a job's driver process, and the backend that launches it.

`StubDriverBackend` is the real `LocalProcessBackend` (detached process group, pid and start time
as identity, SIGTERM then SIGKILL) with `python -m tests.support.stub_driver` in place of
`jobs.runner`, so supervisors in separate processes launch, watch and kill real processes in
milliseconds. The stub appends "<run id> <pid>" to `<job runtime>/launches.log` as it starts (what
was really launched, whoever launched it) and then heartbeats "idle" like a driver whose source
has no new input, until SIGTERM, when it reports its query terminated and exits. With
`STUB_BATCH_SECONDS_ENV` set it commits a stand-in batch that often instead, each heartbeat a
"progress" one with the batch's id and sample, like a driver that keeps up with its input.
"""

from __future__ import annotations

import argparse
import os
import signal
import time
from pathlib import Path
from types import FrameType

from ops.control.launcher import LocalProcessBackend
from ops.driver.telemetry import BatchSample, Heartbeat, HeartbeatEvent, write_heartbeat
from ops.spec.job import find_job
from ops.spec.paths import JobPaths
from ops.spec.platform import PlatformConfig, load_platform

LAUNCHES_LOG = "launches.log"
HEARTBEAT_SECONDS = 0.5
# Seconds between the stand-in batches a stub commits; unset, it commits none.
STUB_BATCH_SECONDS_ENV = "STREAMWARDEN_STUB_BATCH_SECONDS"


class StubDriverBackend(LocalProcessBackend):
    """The local backend, launching stub drivers."""

    driver_module = "tests.support.stub_driver"


def launches_log(platform: PlatformConfig, job: str) -> Path:
    """Where the job's stub drivers record themselves as they start."""
    return platform.job_runtime_dir(job) / LAUNCHES_LOG


def launched(platform: PlatformConfig, job: str) -> list[tuple[str, int]]:
    """(run id, pid) of every stub driver of `job` that started, in order."""
    path = launches_log(platform, job)
    if not path.exists():
        return []
    return [(run_id, int(pid)) for run_id, pid in (line.split() for line in path.read_text().splitlines())]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--job", required=True)
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--config-version", required=True)
    args, _ = parser.parse_known_args()
    platform = load_platform()
    paths = JobPaths.of(platform, find_job(args.job, platform.conf_dir))
    with launches_log(platform, args.job).open("a") as log:
        log.write(f"{args.run_id} {os.getpid()}\n")

    stopping = False

    def stop(_signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)

    def beat(event: HeartbeatEvent, batch: BatchSample | None = None) -> None:
        heartbeat = Heartbeat(
            job=args.job,
            run_id=args.run_id,
            pid=os.getpid(),
            event=event,
            at=time.time(),
            batch_id=None if batch is None else batch.batch_id,
            recent=() if batch is None else (batch,),
        )
        write_heartbeat(paths.heartbeat, heartbeat)

    batch_seconds = os.environ.get(STUB_BATCH_SECONDS_ENV)
    beat("started")
    batch_id, batch_started = 0, time.time()
    while not stopping:
        time.sleep(HEARTBEAT_SECONDS)
        if batch_seconds is None:
            beat("idle")
        elif time.time() - batch_started >= float(batch_seconds):
            duration_ms = int((time.time() - batch_started) * 1000)
            beat("progress", BatchSample(batch_id, 100, 100.0, 100.0, duration_ms, started_at=batch_started))
            batch_id, batch_started = batch_id + 1, time.time()
    beat("terminated")


if __name__ == "__main__":
    main()
