"""`make bench`: every benchmark, its figures and ratios, written to benchmarks/RESULTS.md.

python -m benchmarks.run [--only throughput|recovery|restatement|jobs|flink|autoscaling]
                         [--rounds N] [--events N | --quick] [--plateau-seconds S]
"""

from __future__ import annotations

import argparse
import platform as host
import statistics
import sys
from datetime import date
from pathlib import Path

from benchmarks import autoscaling, flink_compare, jobs, recovery, restatement, throughput

HERE = Path(__file__).resolve().parent
WORKDIR = HERE / "out"
RESULTS = HERE / "RESULTS.md"


def echo(line: str) -> None:
    print(line, flush=True)


def table(headers: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def throughput_section(rounds: int) -> str:
    echo("== router throughput: platform vs bare PySpark, same files, same run ==")
    timings = throughput.benchmark(WORKDIR / "throughput", rounds, echo)
    by_name: dict[str, list[throughput.Timing]] = {}
    for timing in timings:
        by_name.setdefault(timing.name, []).append(timing)
    bare = statistics.median(t.events_per_second for t in by_name["bare PySpark"])
    bare_batches = statistics.median(t.batch_seconds for t in by_name["bare PySpark"])
    rows = []
    for name, runs in by_name.items():
        rate = statistics.median(t.events_per_second for t in runs)
        batches = statistics.median(t.batch_seconds for t in runs)
        rows.append(
            (
                name,
                f"{runs[0].events:,}",
                f"{statistics.median(t.wall_seconds for t in runs):.1f} s",
                f"{rate:,.0f}",
                f"{rate / bare:.2f}",
                f"{batches:.1f} s",
                f"{bare_batches / batches:.2f}",
            )
        )
    return table(
        ("run", "events", "wall (median)", "events/s", "ratio to bare", "batch time", "batch ratio"), rows
    )


def recovery_section() -> str:
    echo("== recovery on the embedded platform: kill -9 the router driver ==")
    cold_start, recoveries = recovery.benchmark(WORKDIR / "recovery", echo)
    per_kill = table(
        ("kill", "backoff", "detection", "next committed batch"),
        [
            (
                str(r.kill),
                f"{r.backoff_seconds:g} s",
                f"{r.detection_seconds:.1f} s",
                f"{r.recovery_seconds:.1f} s",
            )
            for r in recoveries
        ],
    )
    return (
        table(("figure", "value", "target", "ratio to cold start"), recovery.summary(cold_start, recoveries))
        + "\n\n"
        + per_kill
    )


def restatement_section() -> str:
    echo("== savepoints and rewind: against plain boto3, full size and the original run ==")
    figures = restatement.benchmark(WORKDIR / "restatement", echo)
    return table(("figure", "value", "baseline (same run)", "ratio", "target"), [f.row() for f in figures])


def jobs_section(events: int, rounds: int) -> str:
    echo("== every job on its scenario's input: events/s ==")
    return jobs.table([jobs.measure(job, events, rounds, echo) for job in jobs.all_jobs()])


def flink_section(events: int, rounds: int) -> str:
    echo("== Streamwarden vs PyFlink SQL: the same job on the same files, same run ==")
    results = [
        flink_compare.compare(job, events, rounds, WORKDIR / "flink" / job, echo)
        for job in sorted(flink_compare.COMPARISONS)
    ]
    notes = [
        f"- {r.comparison.label or r.comparison.job}: Flink in {r.comparison.mode_note}; "
        "same rows per partition checked "
        f"({r.partitions} partitions, {r.rows:,} rows); medians of {r.rounds} warm rounds."
        for r in results
    ]
    return flink_compare.table(results) + "\n\n" + "\n".join(notes)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only", choices=["throughput", "recovery", "restatement", "jobs", "flink", "autoscaling"]
    )
    parser.add_argument(
        "--plateau-seconds",
        type=float,
        default=autoscaling.PLATEAU_SECONDS,
        help="the autoscaling benchmark's noisy plateau (default 20 minutes)",
    )
    parser.add_argument("--rounds", type=int, default=2, help="throughput and flink rounds")
    size = parser.add_mutually_exclusive_group()
    size.add_argument(
        "--events", type=int, default=flink_compare.DEFAULT_EVENTS, help="flink comparison input"
    )
    size.add_argument("--quick", action="store_const", dest="events", const=flink_compare.QUICK_EVENTS)
    args = parser.parse_args(argv)
    command = " ".join(["python -m benchmarks.run", *(argv if argv is not None else sys.argv[1:])])
    sections = []
    if args.only in (None, "throughput"):
        sections.append(("Router throughput (2 cores, local[2])", throughput_section(args.rounds)))
    if args.only in (None, "recovery"):
        sections.append(("Recovery from kill -9 (embedded platform, Airflow scheduler)", recovery_section()))
    if args.only in (None, "restatement"):
        sections.append(("Savepoints, rewind and replay (SeaweedFS on loopback)", restatement_section()))
    if args.only in (None, "jobs"):
        # Every job, so at most the jobs benchmark's default size.
        events = min(args.events, jobs.DEFAULT_EVENTS)
        sections.append((f"Every job, {events:,} events (2 cores)", jobs_section(events, args.rounds)))
    if args.only in (None, "flink"):
        sections.append(
            ("Streamwarden vs PyFlink 2.3 SQL (2 cores)", flink_section(args.events, args.rounds))
        )
    if args.only in (None, "autoscaling"):
        sections.append(
            (
                "Autoscaling on the embedded standalone cluster (2 one-core workers)",
                autoscaling.benchmark(autoscaling.STEP_SECONDS, args.plateau_seconds, echo),
            )
        )
    report = f"\n## {date.today()}: `{command}` on {host.machine()}, {host.python_version()}\n"
    for title, body in sections:
        report += f"\n### {title}\n\n{body}\n"
    echo(report)
    with RESULTS.open("a") as results:
        results.write(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
