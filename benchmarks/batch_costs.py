"""What each router micro-batch pays besides its data: `python -m benchmarks.batch_costs`.

    python -m benchmarks.batch_costs [--batches 8] [--events-per-file 1000] [--rounds 2]

The case users run: a processing-time trigger every `interval_seconds` (5 s in the repo's spec),
`maxFilesPerTrigger` 50, and a small backlog (`--batches` batches' worth of files present at
start). In one warm Spark session (the job's own `build_session`), rotated over `--rounds`:

* `router + telemetry`: the real query (`jobs.runner.plan_job`) with the driver's
  `TelemetryListener` attached (heartbeat, history files, metrics) as `jobs.runtime` runs it;
* `router`: the same query without the listener;
* `router, Spark's listing job`: the same with Spark's default listing threshold (32 paths), as
  before `jobs.runtime.listing_conf`: each batch's 50 files listed by a Spark job;
* `bare`: `benchmarks.bare_router` (native JSON reader, no dead letters), same trigger and files.

Printed per variant: the medians over the batches after the first of Spark's own phases
(`durationMs`: listing the landing directory, planning, the batch itself with its sink-log write,
the offset and commit logs), events/s per batch (rows / batch duration) and over the run (rows /
wall from the first batch's start to the last one's end, trigger waits included).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.flink_compare import Run, rooted
from ops.spec.job import find_job
from ops.spec.platform import load_platform
from synthetic.generator import write_batch

REPO = Path(__file__).resolve().parent.parent
WORKDIR = REPO / "benchmarks" / "out" / "batch_costs"
FILES_PER_BATCH = 50
# The defaults: a backlog of 8 batches of 50 files of 1,000 events, 2 rotated rounds.
DEFAULT_BATCHES = 8
DEFAULT_EVENTS_PER_FILE = 1000
DEFAULT_ROUNDS = 2
BEFORE = "router, Spark's listing job"
VARIANTS = ("router + telemetry", "router", BEFORE, "bare")
LISTING_THRESHOLD = "spark.sql.sources.parallelPartitionDiscovery.threshold"
PHASES = ("latestOffset", "queryPlanning", "getBatch", "addBatch", "walCommit", "commitOffsets")


def write_backlog(landing: Path, files: int, events_per_file: int) -> int:
    """`files` landing files with increasing modification times; returns the lines written."""
    written = 0
    oldest = time.time() - files
    for seed in range(files):
        batch = write_batch(landing, events_per_file, malformed_fraction=0.005, seed=seed)
        os.utime(batch.path, (oldest + seed, oldest + seed))
        written += batch.total
    return written


def run_variant(variant: str, spark: Any, run: Run, lines: int) -> list[dict[str, Any]]:
    """Run one variant until it has read `lines` lines; its progress records with input."""
    from benchmarks.bare_router import bare_writer
    from jobs.runner import plan_job
    from jobs.runtime import with_trigger
    from ops.driver.listener import TelemetryListener
    from ops.spec.paths import HEARTBEAT_FILE, JobPaths

    platform, spec = rooted(load_platform(), run), find_job("router")
    paths = JobPaths.of(platform, spec)
    listener = None
    if variant == "router + telemetry":
        paths.runtime.mkdir(parents=True, exist_ok=True)
        listener = TelemetryListener(paths.runtime / HEARTBEAT_FILE, spec.name, "batch-costs")
        spark.streams.addListener(listener)
    threshold = spark.conf.get(LISTING_THRESHOLD)
    if variant == BEFORE:
        spark.conf.set(LISTING_THRESHOLD, "32")
    if variant == "bare":
        writer = bare_writer(spark, spec, paths.landing["events"], paths.sink, paths.checkpoint)
        interval = f"{spec.operations.trigger.interval_seconds} seconds"
        query = writer.trigger(processingTime=interval).start()
    else:
        query = with_trigger(plan_job(platform, spec), spec, available_now=False)(spark).start()
    try:
        while sum(p["numInputRows"] for p in query.recentProgress) < lines:
            if query.exception() is not None:
                raise RuntimeError(f"{variant} failed: {query.exception()}")
            time.sleep(0.5)
    finally:
        query.stop()
        spark.conf.set(LISTING_THRESHOLD, threshold)
        if listener is not None:
            spark.streams.removeListener(listener)
    return [p for p in query.recentProgress if p["numInputRows"] > 0]


def summary(progress: list[dict[str, Any]]) -> dict[str, float]:
    """Median phase times (ms) over the batches after the first, events/s per batch and per run."""
    steady = progress[1:] or progress
    figures = {phase: statistics.median(p["durationMs"].get(phase, 0) for p in steady) for phase in PHASES}
    figures["triggerExecution"] = statistics.median(p["durationMs"]["triggerExecution"] for p in steady)
    figures["rows per batch"] = statistics.median(p["numInputRows"] for p in steady)
    figures["events/s per batch"] = statistics.median(p["processedRowsPerSecond"] for p in steady)
    first = time.mktime(time.strptime(progress[0]["timestamp"][:19], "%Y-%m-%dT%H:%M:%S"))
    last = time.mktime(time.strptime(progress[-1]["timestamp"][:19], "%Y-%m-%dT%H:%M:%S"))
    span = last - first + progress[-1]["durationMs"]["triggerExecution"] / 1000
    figures["events/s over the run"] = sum(p["numInputRows"] for p in progress) / span
    return figures


def benchmark(
    batches: int, events_per_file: int, rounds: int, echo: Callable[[str], None]
) -> dict[str, dict[str, float]]:
    """Echo each run and the table of medians; return the medians per variant and figure."""
    from ops.driver.session import build_session

    shutil.rmtree(WORKDIR, ignore_errors=True)
    landing_root = WORKDIR / "landing"
    lines = write_backlog(landing_root / "events", batches * FILES_PER_BATCH, events_per_file)
    echo(f"backlog: {lines:,} lines in {batches * FILES_PER_BATCH} files ({batches} batches of 50)")
    spark = build_session(load_platform(), find_job("router"))
    run_variant("bare", spark, Run("warm-up", landing_root, WORKDIR / "warm-up"), lines)
    results: dict[str, list[dict[str, float]]] = {variant: [] for variant in VARIANTS}
    for round_no in range(1, rounds + 1):
        shift = (round_no - 1) % len(VARIANTS)
        for variant in [*VARIANTS[shift:], *VARIANTS[:shift]]:
            load = os.getloadavg()[0]
            out = WORKDIR / f"{''.join(c if c.isalnum() else '-' for c in variant)}-{round_no}"
            figures = summary(run_variant(variant, spark, Run(variant, landing_root, out), lines))
            results[variant].append(figures)
            echo(
                f"  round {round_no}: {variant:28} batch {figures['triggerExecution']:6.0f} ms  "
                f"{figures['events/s per batch']:8,.0f} events/s per batch  "
                f"{figures['events/s over the run']:8,.0f} over the run  load {load:5.2f}"
            )
    spark.stop()
    keys = [*PHASES, "triggerExecution", "events/s per batch", "events/s over the run"]
    medians = {
        variant: {key: statistics.median(run[key] for run in runs) for key in keys}
        for variant, runs in results.items()
    }
    echo("| variant | " + " | ".join(keys) + " |")
    echo("|---|" + "---|" * len(keys))
    for variant, figures in medians.items():
        echo(f"| {variant} | " + " | ".join(f"{figures[key]:,.0f}" for key in keys) + " |")
    return medians


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.batch_costs", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--batches", type=int, default=DEFAULT_BATCHES, help="batches of 50 files in the backlog"
    )
    parser.add_argument("--events-per-file", type=int, default=DEFAULT_EVENTS_PER_FILE)
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS)
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    benchmark(args.batches, args.events_per_file, args.rounds, print)
    return 0


if __name__ == "__main__":
    sys.exit(main())
