"""Every configured job on its kind's scenario: events/s on 2 cores, in one invocation.

    python -m benchmarks.jobs [--job NAME ...] [--events N] [--rounds N]

For each job (default: every job in conf/jobs): write its scenario's input as
`benchmarks.flink_compare` does (chunks in event-time order, the flush last, side inputs in the
lake), then run the real query (`jobs.runner.plan_job`, the spec's session settings, available-now)
in a child process: a warm-up over a small input, then the timed rounds in the same session.
Printed per job: events, median wall time (query start to end) and events/s, and Spark's own
batch time. `benchmarks.flink_compare` sets the four compared jobs against PyFlink.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks.flink_compare import (
    REPO,
    RESULT_PREFIX,
    WARMUP_EVENTS,
    WARMUP_SEED,
    breakdown,
    rooted,
    side_runs,
    stream_child,
    write_input,
)
from ops.spec.job import find_job, load_jobs
from ops.spec.platform import load_platform
from synthetic.scenarios import SCENARIOS

WORKDIR = REPO / "benchmarks" / "out" / "jobs"
DEFAULT_EVENTS = 200_000
HEADERS = ("job", "events", "wall (median)", "events/s", "batch time (median)")


def measure(job: str, events: int, rounds: int, echo: Callable[[str], None]) -> tuple[str, ...]:
    """Write the job's input, run its child, and return its table row."""
    spec = find_job(job)
    workdir = WORKDIR / job
    # A fresh start: an earlier run's checkpoints would have read these files already.
    shutil.rmtree(workdir, ignore_errors=True)
    echo(f"{job}: generating {events:,} events ({spec.pipeline.kind} scenario)")
    written, _ = write_input(spec, workdir / "input" / "landing", events, 0, echo)
    write_input(spec, workdir / "warm-up" / "landing", WARMUP_EVENTS, WARMUP_SEED, lambda _line: None)
    command = [sys.executable, "-m", "benchmarks.jobs", "child", "--job", job]
    command += ["--workdir", str(workdir), "--rounds", str(rounds)]
    runs = stream_child(command, workdir / "spark.log", echo, cwd=REPO)["runs"][1:]
    wall = statistics.median(run["wall_seconds"] for run in runs)
    engine = statistics.median(run["engine_seconds"] for run in runs)
    return (job, f"{written:,}", f"{wall:.1f} s", f"{written / wall:,.0f}", f"{engine:.1f} s")


def all_jobs() -> list[str]:
    return sorted(load_jobs().specs)


def table(rows: list[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def child(job: str, workdir: Path, rounds: int) -> None:
    """The real job over the warm-up input, then `rounds` timed runs; print RESULT."""
    from jobs.runner import plan_job
    from jobs.runtime import with_trigger
    from ops.driver.session import build_session

    spec = find_job(job)
    platform = load_platform()
    scenario = SCENARIOS[spec.name]
    spark = build_session(platform, spec)
    timings = []
    for run in side_runs(workdir, "spark", rounds):
        run_platform = rooted(platform, run)
        if scenario.lake is not None:
            scenario.lake(run_platform.lake_root, 0)
        started = time.monotonic()
        query = with_trigger(plan_job(run_platform, spec), spec, available_now=True)(spark).start()
        query.awaitTermination()
        wall = time.monotonic() - started
        if query.exception() is not None:
            raise RuntimeError(f"{job} {run.name} failed: {query.exception()}")
        progress = query.recentProgress
        batches = sum(p["durationMs"]["triggerExecution"] for p in progress) / 1000
        timings.append({"wall_seconds": wall, "engine_seconds": batches})
        print(f"  {job} {run.name}: {wall:.1f}s wall ({breakdown(progress)})", flush=True)
    spark.stop()
    print(RESULT_PREFIX + json.dumps({"runs": timings}), flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.jobs", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    child_parser = sub.add_parser("child", help="internal: one job's Spark process")
    child_parser.add_argument("--job", required=True)
    child_parser.add_argument("--workdir", type=Path, required=True)
    child_parser.add_argument("--rounds", type=int, required=True)
    parser.add_argument("--job", action="append", help="default: every job in conf/jobs")
    parser.add_argument("--events", type=int, default=DEFAULT_EVENTS)
    parser.add_argument("--rounds", type=int, default=1, help="timed rounds per job (median reported)")
    args = parser.parse_args(argv)
    if args.command == "child":
        child(args.job, args.workdir, args.rounds)
        return 0
    print(table([measure(job, args.events, args.rounds, print) for job in args.job or all_jobs()]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
