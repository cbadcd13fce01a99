"""Backfill memory and throughput: the Kappa+ backfill against a one-shot batch run (the Lambda way).

python -m benchmarks.backfill [--events-per-partition 120000] [--short 10] [--long 30] [--users N ...]
                              [--empty-batches 10]

Writes `--long` arrival hours of the job's scenario, archives them in an embedded S3 server of
its own, then measures five runs, each a fresh process tree sampled every 0.1 s for its peak
resident memory: the backfill application (`jobs.backfill`, micro-batches of consecutive hours
under the default byte budget, a quarter of the driver's 1g) over the first `--short` hours and
over all `--long`, the batch runner (`jobs.batch`, the same transform over all the files at once)
over the same two ranges, and the backfill over all `--long` at half the budget. In local mode the
JVM is the driver and the executors, its heap committed when it starts: the backfill's four times
its budget (`ops.driver.backfill.batch_heap`: the driver's 1g at the default, 512 MiB at half),
the batch run's the driver's 1g, both under Java 17's default collector (G1). The Python workers
(the pyspark daemon and the workers it forks) run the job's pandas state function. The launcher's
`bash` wrappers are not counted. Prints a markdown table: peak RSS per process kind, the
long/short ratio, the half budget's peak against the default's, and rows/s of the backfill against
the batch run.

Then the fixed cost of a micro-batch: the backfill application over `--empty-batches` feed
batches that read no row (an empty file per input), each a whole micro-batch of the query (the
gated source, the parse, the shuffle, the state operator's load, Python call and commit, the sink's
commit, the driver's bookkeeping). Its median time per batch (the first, which warms up, and the
closing no-data one left out) is measured twice: with the gated query's state partitions no more
than the cores (`jobs.backfill.gated_partitions`) and with the job's own (`benchmarks.backfill_uncut`,
the same application as it ran before that cut). Both run with the worker zips' bytecode of
`make install` (`ops.driver.worker_bytecode`).

An archive partition is an arrival hour. The default size, 120,000 events an hour (33 events/s,
a sixth of the demo generator's 200/s), is about 25 MB of JSON lines; the demo's whole hour
(720,000 events) would hold the shared benchmark lock for much longer.

Workloads (`--users`, once per workload, each measured as above): the scenario draws each event's
user at random from `--users` users. At 10,000 users and 40,000 events an hour of event time a
user sends an event every 15 minutes on average, so most sessions end by the 30-minute gap, as
product sessions do (the default). At the tests' 40 users every user sends one every 3.6 s, like
the scenario's bot: no session ends by the gap, each is cut by the 4-hour cap, and the state
holds up to 4 hours of every user's events (the worst case for the Kappa+ side, which carries
them from batch to batch; the batch run sees each event once).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psutil
import yaml

from benchmarks.throughput import rooted_platform
from ops import archive
from ops.backfill.plan import BackfillRequest, fetch_partitions, plan_backfill, prepare_run
from ops.backfill.submit import REPO_ROOT, application_env, submit_arguments
from ops.driver.backfill import BackfillPlan, BackfillRun, FeedBatch, Piece, PlannedPartition
from ops.embedded.services import SeaweedS3, free_seaweed_ports
from ops.spec.job import load_job
from ops.spec.platform import DEFAULT_CONF_DIR, PlatformConfig, load_platform
from synthetic.scenarios import sessionizer_scenario

HERE = Path(__file__).resolve().parent
FIRST_ARRIVAL = datetime(2026, 11, 1, tzinfo=UTC)
SAMPLE_SECONDS = 0.1
# The runs' names, as the table prints them.
BACKFILL = "backfill (Kappa+)"
HALF_BUDGET = "backfill, half the budget"
BATCH = "one-shot batch (Lambda)"
# Users per workload (`--users`): sessions that end by the gap, then every session cut by the cap.
DEFAULT_WORKLOADS = (10_000, 40)


@dataclass(frozen=True)
class Measured:
    """One run's wall time and peak RSS (MiB) per kind of process."""

    name: str
    partitions: int
    rows: int
    seconds: float
    jvm_mib: float
    python_driver_mib: float
    python_workers_mib: float
    # The most Python worker processes (the pyspark daemon included) seen in one sample.
    python_workers: int
    # A backfill's micro-batches and their byte budget (0 for the batch run).
    batches: int = 0
    budget: int = 0

    @property
    def rows_per_second(self) -> float:
        return self.rows / self.seconds

    @property
    def total_mib(self) -> float:
        return self.jvm_mib + self.python_driver_mib + self.python_workers_mib


def measure(
    name: str, partitions: int, rows: int, argv: list[str], env: dict[str, str], log_dir: Path
) -> Measured:
    """Run `argv` to its end, sampling its process tree's resident memory."""
    started = time.monotonic()
    # The run's log goes to a file: a pipe nobody reads fills up and blocks the run.
    log = log_dir / f"{name.split(' (')[0].replace(' ', '-')}-{partitions}.log"
    with log.open("wb") as log_file:
        process = psutil.Popen(argv, env=env, cwd=REPO_ROOT, stdout=log_file, stderr=subprocess.STDOUT)
    peaks = {"jvm": 0.0, "driver": 0.0, "workers": 0.0}
    most_workers = 0
    while process.poll() is None:
        sample = {"jvm": 0.0, "driver": 0.0, "workers": 0.0}
        workers = 0
        try:
            tree = [process, *process.children(recursive=True)]
        except psutil.NoSuchProcess:
            tree = []
        for member in tree:
            # Each member on its own: a zombie (the JVM leaves an exited `bash` child unreaped)
            # or a process that just ended must not drop the rest of the sample.
            try:
                rss = member.memory_info().rss / 2**20
                kind = member.name()
            except psutil.NoSuchProcess:
                continue
            if member.pid == process.pid:
                sample["driver"] += rss
            elif kind == "java":
                sample["jvm"] += rss
            elif kind.startswith("python"):
                sample["workers"] += rss
                workers += 1
        peaks = {kind: max(peaks[kind], sample[kind]) for kind in peaks}
        most_workers = max(most_workers, workers)
        time.sleep(SAMPLE_SECONDS)
    seconds = time.monotonic() - started
    if process.returncode != 0:
        raise SystemExit(f"{name} failed ({process.returncode}):\n{log.read_text()[-3000:]}")
    return Measured(
        name, partitions, rows, seconds, peaks["jvm"], peaks["driver"], peaks["workers"], most_workers
    )


def write_input(
    platform: PlatformConfig, source_root: Path, hours: int, events: int, users: int
) -> dict[int, int]:
    """The scenario, one write per arrival hour (3 event hours each, in order): lines per hour."""
    lines = {}
    for hour in range(hours):
        written = sessionizer_scenario(
            source_root / f"{hour:03d}",
            events,
            seed=hour,
            start=datetime(2025, 1, 1, tzinfo=UTC) + timedelta(hours=3 * hour),
            users=users,
        )
        arrived = (FIRST_ARRIVAL + timedelta(hours=hour, minutes=30)).timestamp()
        lines[hour] = 0
        for path in written:
            target = platform.landing_root / path.parent.name / path.name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, target)
            os.utime(target, (arrived, arrived))
            lines[hour] += len(path.read_text().splitlines())
    return lines


def batch_landing(source_root: Path, hours: int, target: Path) -> Path:
    """A landing root holding the first `hours` hours' files, for the batch runner."""
    for hour in range(hours):
        for path in (source_root / f"{hour:03d}").rglob("*.json"):
            destination = target / path.parent.name / path.name
            destination.parent.mkdir(parents=True, exist_ok=True)
            os.link(path, destination)
    return target


def measure_workload(args: argparse.Namespace, users: int) -> list[Measured]:
    """The five runs over `args.long` arrival hours of the scenario with `users` users."""
    workdir = HERE / "out" / "backfill" / f"users-{users}"
    platform = scratch_platform(workdir)
    server = SeaweedS3.for_platform(platform)
    assert server is not None
    server.start()
    env = {**os.environ, **application_env(platform.conf_dir)}
    results = []
    try:
        source_root = workdir / "written"
        print(f"== {users:,} users: writing {args.long} arrival hours...", flush=True)
        lines = write_input(platform, source_root, args.long, args.events_per_partition, users)
        now = FIRST_ARRIVAL + timedelta(hours=args.long + 1)
        archive.archive_landing(platform, ["app_events", "web_events"], now)
        for name, hours, halved in (
            (BACKFILL, args.short, False),
            (BACKFILL, args.long, False),
            (HALF_BUDGET, args.long, True),
        ):
            request = BackfillRequest(
                "sessionizer", start=FIRST_ARRIVAL, end=FIRST_ARRIVAL + timedelta(hours=hours)
            )
            if halved:
                _, default, _ = plan_backfill(platform, request, now)
                request = replace(request, max_batch_bytes=default.max_batch_bytes // 2)
            run, plan, spec_bytes = plan_backfill(platform, request, now)
            prepare_run(run, plan, spec_bytes)
            fetch_partitions(platform, run, plan)
            rows = sum(lines[h] for h in range(hours))
            print(
                f"{name}, {hours} partitions ({rows:,} lines) in {len(plan.batches)} batches of at most "
                f"{plan.max_batch_bytes:,} bytes...",
                flush=True,
            )
            measured = measure(
                name,
                hours,
                rows,
                [sys.executable, "-m", "jobs.backfill", *submit_arguments(run)],
                env,
                workdir,
            )
            results.append(replace(measured, batches=len(plan.batches), budget=plan.max_batch_bytes))
            assert json.loads(run.complete_file.read_text())["partitions"] == hours
            if halved:
                continue
            landing = batch_landing(source_root, hours, workdir / f"batch-landing-{hours}")
            print(f"one-shot batch, {hours} partitions...", flush=True)
            batch_argv = [
                "-m",
                "jobs.batch",
                "--job",
                "sessionizer",
                "--output",
                str(workdir / f"batch-output-{hours}"),
            ]
            results.append(
                measure(
                    BATCH,
                    hours,
                    rows,
                    [sys.executable, *batch_argv, "--landing-root", str(landing)],
                    env,
                    workdir,
                )
            )
    finally:
        server.stop()
    return results


def scratch_platform(workdir: Path) -> PlatformConfig:
    """A platform rooted in `workdir` (emptied first) with its own S3 ports, and the sessionizer
    without its warehouse table: the runs measure the backfill and never publish (a short range
    covers the day partitions of its last hours only in part: a publishing run would be refused)."""
    shutil.rmtree(workdir, ignore_errors=True)
    ports = free_seaweed_ports()
    conf_dir = workdir / "conf"
    (conf_dir / "jobs").mkdir(parents=True)
    (conf_dir / "platform.yaml").write_text(yaml.safe_dump(rooted_platform(workdir, ports.s3)))
    job = yaml.safe_load((DEFAULT_CONF_DIR / "jobs" / "sessionizer.yaml").read_text())
    del job["operations"]["compaction"]
    (conf_dir / "jobs" / "sessionizer.yaml").write_text(yaml.safe_dump(job, sort_keys=False))
    return load_platform(conf_dir)


def empty_batches_run(workdir: Path, batches: int) -> tuple[PlatformConfig, BackfillRun]:
    """A planned, staged sessionizer backfill of `batches` feed batches that each read an empty
    file per input: every micro-batch runs the whole query and reads no row."""
    platform = scratch_platform(workdir)
    spec_bytes = (platform.conf_dir / "jobs" / "sessionizer.yaml").read_bytes()
    run = BackfillRun(workdir / "run")
    run.spec_file("sessionizer").parent.mkdir(parents=True)
    run.spec_file("sessionizer").write_bytes(spec_bytes)
    spec = load_job(run.spec_file("sessionizer"))
    partitions = []
    for index in range(batches):
        files = {}
        for name in spec.pipeline.inputs:
            run.staged(name, index).mkdir(parents=True)
            (run.staged(name, index) / f"{name}-{index}.json").write_bytes(b"")
            files[name] = [f"{name}-{index}.json"]
        partitions.append(PlannedPartition(index, FIRST_ARRIVAL + timedelta(hours=index), files, 0))
    run.write_plan(
        BackfillPlan(
            run_id="empty-batches",
            job="sessionizer",
            config_version=spec.config_version,
            candidate=False,
            start=FIRST_ARRIVAL,
            end=FIRST_ARRIVAL + timedelta(hours=batches),
            partitions=tuple(partitions),
            sources={name: source.path for name, source in spec.pipeline.inputs.items()},
            batches=tuple(FeedBatch(p.index, (Piece(p.index, p.files, 0),)) for p in partitions),
            max_batch_bytes=1,
        )
    )
    return platform, run


def empty_batch_seconds(batches: int, module: str) -> float:
    """The median seconds of an empty micro-batch of the sessionizer's backfill run by `module`
    (the first, warming up, and the closing no-data batch left out)."""
    platform, run = empty_batches_run(HERE / "out" / "backfill" / "empty-batches", batches)
    finished = subprocess.run(
        [sys.executable, "-m", module, *submit_arguments(run)],
        env={**os.environ, **application_env(platform.conf_dir)},
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if finished.returncode != 0:
        raise SystemExit(f"{module} failed ({finished.returncode}):\n{finished.stderr[-3000:]}")
    seconds = [record.seconds for record in sorted(run.done().values(), key=lambda record: record.index)]
    return statistics.median(seconds[1:-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.backfill", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--events-per-partition", type=int, default=120_000)
    parser.add_argument("--short", type=int, default=10)
    parser.add_argument("--long", type=int, default=30)
    parser.add_argument(
        "--users",
        type=int,
        action="append",
        help="users the scenario draws from, once per workload (default: 10,000, then 40)",
    )
    parser.add_argument("--empty-batches", type=int, default=10, help="feed batches of the fixed-cost runs")
    args = parser.parse_args(argv)
    for users in args.users or DEFAULT_WORKLOADS:
        results = measure_workload(args, users)
        print(f"### {users:,} users", flush=True)
        print_table(results, args.short, args.long)
    print(f"fixed cost of an empty micro-batch ({args.empty_batches} batches a run)...", flush=True)
    before = empty_batch_seconds(args.empty_batches, "benchmarks.backfill_uncut")
    after = empty_batch_seconds(args.empty_batches, "jobs.backfill")
    print(
        f"fixed cost of an empty micro-batch: {after:.2f} s with the cuts, {before:.2f} s without "
        f"({after / before:.2f}x)"
    )
    return 0


def print_table(results: list[Measured], short: int, long: int) -> None:
    print(
        "| run | partitions | batches | budget | lines | wall | rows/s | JVM peak RSS | Python driver "
        "| Python workers | most worker processes |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for m in results:
        budget = f"{m.budget / 2**20:,.0f} MiB" if m.budget else "-"
        print(
            f"| {m.name} | {m.partitions} | {m.batches or '-'} | {budget} | {m.rows:,} | {m.seconds:.1f} s | "
            f"{m.rows_per_second:,.0f} | {m.jvm_mib:,.0f} MiB | {m.python_driver_mib:,.0f} MiB | "
            f"{m.python_workers_mib:,.0f} MiB | {m.python_workers} |"
        )
    by = {(m.name, m.partitions): m for m in results}
    for name in (BACKFILL, BATCH):
        a, b = by[(name, long)], by[(name, short)]
        print(
            f"{name}: peak RSS {long} vs {short} partitions: JVM {a.jvm_mib / b.jvm_mib:.2f}x, "
            f"workers {a.python_workers_mib / max(b.python_workers_mib, 1):.2f}x, "
            f"all {a.total_mib / b.total_mib:.2f}x"
        )
    kappa, lam, half = by[(BACKFILL, long)], by[(BATCH, long)], by[(HALF_BUDGET, long)]
    print(
        f"peak RSS at half the budget, {long} partitions: {half.total_mib:,.0f} MiB against "
        f"{kappa.total_mib:,.0f} MiB ({half.total_mib / kappa.total_mib:.2f}x)"
    )
    print(
        f"throughput, {long} partitions: backfill {kappa.rows_per_second / lam.rows_per_second:.2f}x the "
        f"batch run at the default budget, {half.rows_per_second / lam.rows_per_second:.2f}x at half of it"
    )


if __name__ == "__main__":
    raise SystemExit(main())
