"""Streamwarden against PyFlink SQL: the same job over the same files, in the same invocation.

    python -m benchmarks.flink_compare [--job router] [--events N | --quick]

For each compared job: generate its scenario's landing files (in chunks of `CHUNK_EVENTS`, so the
input is many files as in production), then run each side in its own child process on 2 cores:

* Spark: the real job, `jobs.runner.plan_job` with the spec's settings (session as
  `jobs.runtime.build_session` builds it: master local[2], driver memory, shuffle partitions,
  `maxFilesPerTrigger`) and an available-now trigger, writing its partitioned Parquet sink. The
  platform's telemetry listener and metrics endpoint are not attached (`benchmarks.throughput`
  measures those: 5-8 %).
* Flink: the comparison's Flink SQL (`benchmarks/flink/<job>.py`) in a local PyFlink mini-cluster
  with parallelism 2 and the same JVM heap (`-Xmx` = the spec's driver memory), run by
  `benchmarks/flink/run_sql.py` under its own virtualenv (`.tools/flink-venv`, apache-flink
  pinned to `FLINK_VERSION`, created on first use; the project's venv never gets PyFlink).

Measured warm, the same way on both sides: each child first runs the job over a small warm-up
input in the same JVM, then the timed run over the real input. JVM start-up and warm-up are
excluded; the timed figure is wall time from starting the query (Spark `start()`, Flink
`execute_sql` of the INSERT) to its end, so planning, file listing, job start-up and the final
commit are included on both sides. Each side's own measure is reported next to it (Spark: sum of
batch durations; Flink: the job's net runtime).

The figures count only if both sides computed the same thing: after the timed runs the rows per
sink partition (e.g. route, event_date, event_hour) are counted on both outputs, and the
benchmark fails when any count differs. An output the Flink SQL cannot compute the same way
(`Comparison.uncompared_outputs`, such as campaign_uniques' HyperLogLog counts) is still written
by Spark, so its cost stays in Spark's time, but left out of the check; its module says why.

Stateful jobs: the input's chunks follow each other in event time (`Scenario.write_from`,
`Scenario.period`) and are read in that order by Spark (file modification times), so no event is
late; the scenario's flush comes last, so the watermark passes every session and join interval
and the stream (with its final no-data batch) writes everything. The flush events' own partitions
are left out of the check (the stream keeps them open; Flink's end of input closes them). Flink
runs in bounded streaming mode, where the end of input fires every window; its file source reads
the files in no particular order, so its watermark delay covers the whole input
(`landing_sql.WATERMARK_DELAY_SECONDS`) instead of the job's lateness, or whole files would be
dropped as late. A comparison can also run a baseline query on the Spark side (`spark_plan`),
such as the naive `session_window` count of `benchmarks.naive_sessions`.

Adding a job: a `Comparison` in `COMPARISONS` (its Flink SQL builder and runtime mode). The input
is the job kind's scenario (`synthetic.scenarios`).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from benchmarks import naive_sessions
from benchmarks.flink import campaign_uniques as flink_campaign_uniques
from benchmarks.flink import impressions_plays as flink_impressions_plays
from benchmarks.flink import router as flink_router
from benchmarks.flink import sessionizer as flink_sessionizer
from benchmarks.flink.landing_sql import DEFAULT_PARTITION
from jobs.runtime import QueryPlan
from ops.spec.job import JobSpec, find_job
from ops.spec.pipelines import DEAD_LETTER_ROUTE
from ops.spec.platform import PlatformConfig, StorageConfig, load_platform
from synthetic.scenarios import SCENARIOS

REPO = Path(__file__).resolve().parent.parent
FLINK_VERSION = "2.3.0"
FLINK_VENV = REPO / ".tools" / "flink-venv"
FLINK_RUNNER = REPO / "benchmarks" / "flink" / "run_sql.py"
WORKDIR = REPO / "benchmarks" / "out" / "flink"
DEFAULT_EVENTS = 1_000_000
QUICK_EVENTS = 50_000
WARMUP_EVENTS = 30_000
CHUNK_EVENTS = 50_000
# Event time of a stateful input's first chunk (`Scenario.write_from`).
CHUNKS_START = datetime(2025, 1, 1, tzinfo=UTC)
# Seeds of the warm-up input, far from the timed input's.
WARMUP_SEED = 90_000
RESULT_PREFIX = "RESULT "

# A partition's values as directory names give them: text, "null" for a null value.
PartitionKey = tuple[str, ...]


@dataclass(frozen=True)
class Comparison:
    """One job compared: its Flink SQL and how Flink runs it."""

    job: str
    # (spec, landing_root, out_dir) -> Flink SQL statements, the last one the INSERT into the sink.
    flink_statements: Callable[[JobSpec, Path, Path], list[str]]
    flink_mode: Literal["batch", "streaming"]
    # The target ratio of Spark's events/s to Flink's.
    target: float
    # Why that runtime mode is the fair one, for the results table.
    mode_note: str
    # The Spark side's query when it is not the job's own (`jobs.runner.plan_job`): a baseline.
    spark_plan: Callable[[PlatformConfig, JobSpec], QueryPlan] | None = None
    # The row's name in the table, when it is not the job's.
    label: str | None = None
    # Outputs (values of the sink's first partition column) the Flink SQL does not compute the same
    # way: Spark still writes them, and the row check leaves them out.
    uncompared_outputs: frozenset[str] = frozenset()


STATEFUL_NOTE = "bounded streaming, as Spark runs it (the end of the input fires every window)"
SESSIONIZER_NOTE = (
    STATEFUL_NOTE + "; Flink's SESSION window has no length cap, see benchmarks/flink/sessionizer.py"
)
COMPARISONS: dict[str, Comparison] = {
    "router": Comparison(
        job="router",
        flink_statements=flink_router.statements,
        flink_mode="streaming",
        target=1.2,
        mode_note="bounded streaming, as Spark runs it; batch mode was no faster (it sorts by partition)",
    ),
    "sessionizer": Comparison(
        job="sessionizer",
        flink_statements=flink_sessionizer.statements,
        flink_mode="streaming",
        target=1.0,
        mode_note=SESSIONIZER_NOTE,
    ),
    "sessionizer_json": Comparison(
        job="sessionizer",
        flink_statements=flink_sessionizer.json_statements,
        flink_mode="streaming",
        target=1.5,
        mode_note=SESSIONIZER_NOTE + "; Flink reads with the json format, which drops the lines that are "
        "not JSON and keeps no raw line: dead letters not compared",
        label="sessionizer (Flink: json format)",
        uncompared_outputs=frozenset({DEAD_LETTER_ROUTE}),
    ),
    "sessionizer_naive": Comparison(
        job="sessionizer",
        flink_statements=flink_sessionizer.naive_statements,
        flink_mode="streaming",
        target=0.38,
        mode_note=STATEFUL_NOTE + "; both sides a plain session-window count (benchmarks/naive_sessions.py)",
        spark_plan=naive_sessions.plan,
        label="naive PySpark session_window count",
    ),
    "impressions_plays": Comparison(
        job="impressions_plays",
        flink_statements=flink_impressions_plays.statements,
        flink_mode="streaming",
        target=1.0,
        mode_note=STATEFUL_NOTE + "; an interval LEFT JOIN, ids deduplicated on processing time",
    ),
    "campaign_uniques": Comparison(
        job="campaign_uniques",
        flink_statements=flink_campaign_uniques.statements,
        flink_mode="streaming",
        target=1.0,
        mode_note=STATEFUL_NOTE + "; hourly_approx not compared (no streaming HyperLogLog in Flink SQL), "
        "see benchmarks/flink/campaign_uniques.py",
        uncompared_outputs=flink_campaign_uniques.UNCOMPARED_OUTPUTS,
    ),
}


@dataclass(frozen=True)
class Run:
    """One run of a side: which input it reads, where it writes."""

    name: str
    landing_root: Path
    out_root: Path


def side_runs(workdir: Path, side: str, rounds: int) -> list[Run]:
    """A warm-up run over the small input, then `rounds` timed runs over the real input."""
    runs = [Run("warm-up", workdir / "warm-up" / "landing", workdir / side / "warm-up")]
    for round_no in range(1, rounds + 1):
        runs.append(
            Run(f"round {round_no}", workdir / "input" / "landing", workdir / side / f"round-{round_no}")
        )
    return runs


@dataclass(frozen=True)
class SideTiming:
    """One side's timed runs (median of the rounds)."""

    wall_seconds: float
    engine_seconds: float

    @classmethod
    def median_of(cls, runs: list[dict[str, float]]) -> SideTiming:
        timed = runs[1:]
        return cls(
            statistics.median(run["wall_seconds"] for run in timed),
            statistics.median(run["engine_seconds"] for run in timed),
        )


@dataclass(frozen=True)
class Result:
    comparison: Comparison
    events: int
    input_mb: float
    rounds: int
    spark: SideTiming
    flink: SideTiming
    partitions: int
    rows: int

    def rate(self, seconds: float) -> float:
        return self.events / seconds


def ensure_flink_venv(echo: Callable[[str], None]) -> Path:
    """The PyFlink venv's python, creating the venv first if it lacks the pinned apache-flink."""
    python = FLINK_VENV / "bin" / "python"
    stamp = FLINK_VENV / f".apache-flink-{FLINK_VERSION}"
    if not stamp.exists():
        echo(f"installing apache-flink=={FLINK_VERSION} into {FLINK_VENV} (once, about a minute)")
        base_python = Path(sys.base_prefix) / "bin" / "python3"
        subprocess.run([str(base_python), "-m", "venv", "--clear", str(FLINK_VENV)], check=True)
        # Captured: pip's warnings would drown the progress lines.
        pip = subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
            + [f"apache-flink=={FLINK_VERSION}"],
            capture_output=True,
            text=True,
        )
        if pip.returncode != 0:
            raise RuntimeError(f"installing apache-flink=={FLINK_VERSION} failed:\n{pip.stderr[-3000:]}")
        stamp.touch()
    return python


def rooted(platform: PlatformConfig, run: Run) -> PlatformConfig:
    """The platform reading the run's landing files and keeping everything else under its out root."""
    rooted_storage = StorageConfig(
        runtime_root=run.out_root / "runtime",
        landing_root=run.landing_root,
        lake_root=run.out_root / "lake",
        checkpoint_root=run.out_root / "checkpoints",
    )
    return platform.model_copy(update={"storage": rooted_storage})


def write_input(
    spec: JobSpec, landing_root: Path, events: int, seed: int, echo: Callable[[str], None]
) -> tuple[int, set[str]]:
    """Write the job kind's scenario in chunks under `landing_root`, then its flush if it has one.

    A stateful kind's chunks follow each other in event time (`Scenario.period` apart) and the
    files get increasing modification times in the order written, so the file source reads them
    in event-time order and no event is late. Returns the lines written and the event dates of
    the flush (whose own sessions or windows a stream never closes: not compared).
    """
    scenario = SCENARIOS[spec.name]
    paths: list[Path] = []
    chunks = max(1, round(events / CHUNK_EVENTS))
    for chunk in range(chunks):
        size = min(events, CHUNK_EVENTS)
        if scenario.write_from is not None and scenario.period is not None:
            start = CHUNKS_START + chunk * scenario.period
            paths += scenario.write_from(landing_root, size, seed + chunk, start)
        else:
            paths += scenario.write(landing_root, size, seed + chunk)
        if (chunk + 1) % 5 == 0 or chunk + 1 == chunks:
            echo(f"  generated {chunk + 1}/{chunks} chunks ({len(paths)} files)")
    flush_dates: set[str] = set()
    if scenario.flush is not None:
        flushed = scenario.flush(landing_root)
        flush_dates = {
            json.loads(line)[time_field][:10]
            for path in flushed
            for line in path.read_text().splitlines()
            for time_field in {source.event_time_field for source in spec.pipeline.inputs.values()}
            if time_field in json.loads(line)
        }
        paths += flushed
    oldest = time.time() - len(paths)
    for index, path in enumerate(paths):
        os.utime(path, (oldest + index, oldest + index))
    return sum(path.read_bytes().count(b"\n") for path in paths), flush_dates


def parallelism(master: str) -> int:
    """Cores of a `local[N]` master (the Flink side gets as many)."""
    match = re.fullmatch(r"local\[(\d+)\]", master)
    return int(match.group(1)) if match else 2


def stream_child(command: list[str], log_path: Path, echo: Callable[[str], None], **kwargs) -> dict:
    """Run a child, echo its progress lines, keep its stderr in `log_path`; return its RESULT."""
    with log_path.open("w") as log:
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, text=True, **kwargs)
        assert child.stdout is not None
        result = None
        for line in child.stdout:
            if line.startswith(RESULT_PREFIX):
                result = json.loads(line[len(RESULT_PREFIX) :])
            else:
                echo(line.rstrip())
        if child.wait() != 0 or result is None:
            raise RuntimeError(f"{command[0]} exited {child.returncode}; see {log_path}")
    return result


def run_spark(name: str, workdir: Path, rounds: int, echo: Callable[[str], None]) -> dict:
    command = [sys.executable, "-m", "benchmarks.flink_compare", "spark-child", "--comparison", name]
    command += ["--workdir", str(workdir), "--rounds", str(rounds)]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    return stream_child(command, workdir / "spark.log", echo, env=env, cwd=REPO)


def run_flink(
    comparison: Comparison, spec: JobSpec, workdir: Path, rounds: int, echo: Callable[[str], None]
) -> dict:
    python = ensure_flink_venv(echo)
    platform = load_platform()
    plan = {
        "mode": comparison.flink_mode,
        "parallelism": parallelism(spec.operations.resources.master or platform.spark.master),
        "runs": [
            {
                "name": run.name,
                "statements": comparison.flink_statements(spec, run.landing_root, run.out_root),
            }
            for run in side_runs(workdir, "flink", rounds)
        ],
    }
    plan_path = workdir / "flink-plan.json"
    plan_path.write_text(json.dumps(plan, indent=1))
    # The same heap as the Spark driver; the mini-cluster runs inside this one JVM.
    env = {**os.environ, "JVM_ARGS": f"-Xmx{spec.operations.resources.driver_memory}"}
    return stream_child(
        [str(python), str(FLINK_RUNNER), str(plan_path)], workdir / "flink.log", echo, env=env
    )


def flink_partition_counts(out_dir: Path) -> Counter[PartitionKey]:
    """Rows per partition of a Flink CSV file sink: lines of its committed files, by directory."""
    counts: Counter[PartitionKey] = Counter()
    for path in out_dir.rglob("*"):
        if not path.is_file() or path.name.startswith((".", "_")):
            continue
        values = [
            urllib.parse.unquote(part.split("=", 1)[1]) for part in path.relative_to(out_dir).parts[:-1]
        ]
        key = tuple("null" if value == DEFAULT_PARTITION else value for value in values)
        with path.open("rb") as data:
            counts[key] += sum(block.count(b"\n") for block in iter(lambda: data.read(1 << 20), b""))
    return counts


def compared_counts(
    counts: Counter[PartitionKey], comparison: Comparison, flush_dates: set[str], echo: Callable[[str], None]
) -> Counter[PartitionKey]:
    """One side's rows per partition without those the check leaves out (each echoed).

    Left out: the flush events' own partitions (their sessions or windows stay open in the stream;
    Flink's end of input closes them) and the comparison's `uncompared_outputs`.
    """
    compared: Counter[PartitionKey] = Counter()
    for key, rows in sorted(counts.items()):
        if flush_dates & set(key):
            echo(f"  not compared (the flush's own partition): {key} {rows} rows")
        elif key[0] in comparison.uncompared_outputs:
            echo(f"  not compared (not the same computation in Flink SQL): {key} {rows} rows")
        else:
            compared[key] = rows
    return compared


def rotated_rounds(
    comparison: Comparison, spec: JobSpec, workdir: Path, rounds: int, echo: Callable[[str], None]
) -> tuple[dict, dict]:
    """`rounds` rounds of one warm run per side, each side in a fresh child, the side that goes
    first alternating; echo each run's load average and each round's ratio, then the median.

    Returns each side's RESULT with the warm-up and the timed runs of every round (so
    `SideTiming.median_of` gives the median of the rounds) and the counts of the last round.
    """
    sides = {
        "spark": lambda: run_spark(comparison_name(comparison), workdir, 1, echo),
        "flink": lambda: run_flink(comparison, spec, workdir, 1, echo),
    }
    walls: dict[str, list[float]] = {"spark": [], "flink": []}
    results: dict[str, dict] = {}
    for round_no in range(1, rounds + 1):
        order = ["spark", "flink"] if round_no % 2 else ["flink", "spark"]
        for side in order:
            shutil.rmtree(workdir / side, ignore_errors=True)
            load = os.getloadavg()[0]
            result = sides[side]()
            walls[side].append(result["runs"][-1]["wall_seconds"])
            echo(f"  round {round_no}: {side} {walls[side][-1]:.1f} s wall, load {load:.2f}")
            previous = results.get(side, {"runs": [result["runs"][0]]})
            results[side] = {**result, "runs": [*previous["runs"], result["runs"][-1]]}
        echo(f"  round {round_no}: spark/flink {walls['flink'][-1] / walls['spark'][-1]:.2f}x")
    ratios = [flink / spark for spark, flink in zip(walls["spark"], walls["flink"], strict=True)]
    echo(f"  median spark/flink over {rounds} rotated rounds: {statistics.median(ratios):.2f}x")
    return results["spark"], results["flink"]


def comparison_name(comparison: Comparison) -> str:
    """The key of `comparison` in `COMPARISONS`."""
    return next(name for name, known in COMPARISONS.items() if known is comparison)


def compare(
    name: str, events: int, rounds: int, workdir: Path, echo: Callable[[str], None], rotate: bool = False
) -> Result:
    """Generate the input, run both sides, check they agree, and return the figures.

    With `rotate`, each round runs both sides in fresh children, alternating which goes first
    (`rotated_rounds`); otherwise one child per side runs every round in turn.
    """
    comparison = COMPARISONS[name]
    job = comparison.job
    spec = find_job(job)
    shutil.rmtree(workdir, ignore_errors=True)
    echo(f"generating {events:,} events for {name} ({spec.pipeline.kind} scenario)")
    landing_root = workdir / "input" / "landing"
    written, flush_dates = write_input(spec, landing_root, events, 0, echo)
    write_input(spec, workdir / "warm-up" / "landing", WARMUP_EVENTS, WARMUP_SEED, lambda _line: None)
    input_mb = sum(p.stat().st_size for p in landing_root.rglob("*.json")) / 1e6
    echo(f"  {written:,} lines, {input_mb:.0f} MB")
    if rotate:
        spark, flink = rotated_rounds(comparison, spec, workdir, rounds, echo)
    else:
        echo(f"spark (the real job, available-now; warm-up, then {rounds} timed rounds):")
        spark = run_spark(name, workdir, rounds, echo)
        echo(
            f"flink (PyFlink {FLINK_VERSION}, {comparison.flink_mode} mode; warm-up, "
            f"then {rounds} timed rounds):"
        )
        flink = run_flink(comparison, spec, workdir, rounds, echo)
    spark_counts = compared_counts(
        Counter({tuple(row[:-1]): row[-1] for row in spark["counts"]}), comparison, flush_dates, echo
    )
    flink_counts = compared_counts(
        # A rotated round's children run one timed round each.
        flink_partition_counts(side_runs(workdir, "flink", 1 if rotate else rounds)[-1].out_root),
        comparison,
        flush_dates,
        echo,
    )
    if spark_counts != flink_counts:
        keys = sorted(
            k for k in spark_counts.keys() | flink_counts.keys() if spark_counts[k] != flink_counts[k]
        )
        details = ", ".join(f"{key}: spark {spark_counts[key]} flink {flink_counts[key]}" for key in keys[:5])
        raise RuntimeError(f"{name}: the two sides wrote different rows per partition ({details})")
    rows = spark_counts.total()
    echo(f"  same rows per partition on both sides: {len(spark_counts)} partitions, {rows:,} rows")
    return Result(
        comparison=comparison,
        events=written,
        input_mb=input_mb,
        rounds=rounds,
        spark=SideTiming.median_of(spark["runs"]),
        flink=SideTiming.median_of(flink["runs"]),
        partitions=len(spark_counts),
        rows=rows,
    )


HEADERS = (
    "job",
    "events",
    "spark wall",
    "spark events/s",
    "flink wall",
    "flink events/s",
    "spark/flink (wall)",
    "spark batches / flink net runtime",
    "spark/flink (engine)",
    "target",
)


def table_rows(results: list[Result]) -> Iterator[tuple[str, ...]]:
    """One row per job: medians of the timed rounds."""
    for r in results:
        yield (
            r.comparison.label or r.comparison.job,
            f"{r.events:,} ({r.input_mb:.0f} MB)",
            f"{r.spark.wall_seconds:.1f} s",
            f"{r.rate(r.spark.wall_seconds):,.0f}",
            f"{r.flink.wall_seconds:.1f} s",
            f"{r.rate(r.flink.wall_seconds):,.0f}",
            f"{r.flink.wall_seconds / r.spark.wall_seconds:.2f}x",
            f"{r.spark.engine_seconds:.1f} s / {r.flink.engine_seconds:.1f} s",
            f"{r.flink.engine_seconds / r.spark.engine_seconds:.2f}x",
            f">= {r.comparison.target:g}x",
        )


def table(results: list[Result]) -> str:
    lines = ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in table_rows(results)])


# --- the Spark child ------------------------------------------------------------------------------


def spark_child(name: str, workdir: Path, rounds: int) -> None:
    """Run the real job (or the comparison's baseline query): warm-up, then the timed rounds, in one
    session; print progress, where the batches' time went, and RESULT."""
    from pyspark.sql import functions as F

    from jobs.runner import plan_job
    from jobs.runtime import with_trigger
    from ops.driver.session import build_session

    comparison = COMPARISONS[name]
    spec = find_job(comparison.job)
    platform = load_platform()
    spark = build_session(platform, spec)
    planner = comparison.spark_plan or plan_job
    timings = []
    runs = side_runs(workdir, "spark", rounds)
    for run in runs:
        started = time.monotonic()
        query = with_trigger(planner(rooted(platform, run), spec), spec, available_now=True)(spark).start()
        query.awaitTermination()
        wall = time.monotonic() - started
        if query.exception() is not None:
            raise RuntimeError(f"spark {run.name} failed: {query.exception()}")
        # Every batch, the no-data ones too: a stateful job closes its last sessions in one.
        progress = query.recentProgress
        batches = [p["durationMs"]["triggerExecution"] for p in progress]
        timings.append({"wall_seconds": wall, "engine_seconds": sum(batches) / 1000})
        print(
            f"  spark {run.name}: {wall:.1f}s wall, {len(batches)} batches {sum(batches) / 1000:.1f}s "
            f"({breakdown(progress)})",
            flush=True,
        )
    columns = spec.pipeline.partition_columns
    sink = spark.read.parquet(str(rooted(platform, runs[-1]).lake_root / spec.pipeline.sink.path))
    counts = [
        [*("null" if row[c] is None else str(row[c]) for c in columns), row["count"]]
        for row in sink.groupBy(*columns).agg(F.count(F.lit(1)).alias("count")).collect()
    ]
    spark.stop()
    print(RESULT_PREFIX + json.dumps({"runs": timings, "counts": counts}), flush=True)


def breakdown(progress: Sequence[Any]) -> str:
    """Where the batches' time went: Spark's `durationMs` phases and the state operators, summed."""
    phases: Counter[str] = Counter()
    state: Counter[str] = Counter()
    for p in progress:
        phases.update({k: v for k, v in p["durationMs"].items() if k != "triggerExecution"})
        for operator in p.get("stateOperators", []):
            state["commit"] += operator.get("commitTimeMs", 0)
            state["update"] += operator.get("allUpdatesTimeMs", 0)
            state["remove"] += operator.get("allRemovalsTimeMs", 0)
    shown = [f"{k} {v / 1000:.1f}s" for k, v in phases.most_common() if v >= 100]
    shown += [f"state {k} {v / 1000:.1f}s" for k, v in state.most_common() if v >= 100]
    return ", ".join(shown)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.flink_compare", description=__doc__.splitlines()[0]
    )
    sub = parser.add_subparsers(dest="command")
    child = sub.add_parser("spark-child", help="internal: the Spark side's process")
    child.add_argument("--comparison", required=True)
    child.add_argument("--workdir", type=Path, required=True)
    child.add_argument("--rounds", type=int, required=True)
    parser.add_argument(
        "--job", choices=sorted(COMPARISONS), action="append", help="default: every compared job"
    )
    parser.add_argument("--rounds", type=int, default=2, help="timed rounds per side (median reported)")
    parser.add_argument(
        "--rotate",
        action="store_true",
        help="each round in fresh children, the side that goes first alternating, with the load "
        "average at each run and the ratio per round",
    )
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--events", type=int, default=DEFAULT_EVENTS)
    size.add_argument(
        "--quick", action="store_const", dest="events", const=QUICK_EVENTS, help="~50K events (smoke)"
    )
    args = parser.parse_args(argv)
    if args.command == "spark-child":
        spark_child(args.comparison, args.workdir, args.rounds)
        return 0
    jobs = args.job or sorted(COMPARISONS)
    print(table([compare(job, args.events, args.rounds, WORKDIR / job, print, args.rotate) for job in jobs]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
