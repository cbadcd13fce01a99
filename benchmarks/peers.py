"""The router against its peers, in rotated rounds: `python -m benchmarks.peers`.

    python -m benchmarks.peers [--events N | --quick] [--rounds 3] [--malformed 0.02]
                               [--stateful-events N] [--router-only]

Contenders, each over the same landing files (the router scenario, `CHUNK_EVENTS` lines a file),
each in its own child process, warm (a small warm-up input first in the same process; JVM start-up
and warm-up excluded), timed from the query's start to its end:

* `router`: the real job (`jobs.runner.plan_job`, the spec's session, `maxFilesPerTrigger` and an
  available-now trigger): the text source, the shared parse with dead letters, the fan-out,
  partitioned Snappy Parquet.
* `bare`: bare PySpark, the same session: Spark's native JSON reader with the typed schema of the
  source's fields, read once, the same fan-out (`route_events`, so the same sink columns and
  partitions), no dead letters (the json reader has no raw line and no reasons).
* `flink`: PyFlink 2.3 SQL (`benchmarks/flink/router_json.py`): the `json` format, read once,
  the same fan-out with `CROSS JOIN UNNEST`, and a dead-letter route for the rows whose fields fail
  the same checks as ours; what it cannot do is named there. Partitioned CSV (no Parquet jar).
* `pyarrow`: the floor: one process, `pyarrow.json` read of each file with the typed schema, a
  filter per route, `pyarrow.dataset.write_dataset` to the same partitioned Parquet layout. Clean
  input only: pyarrow's JSON reader fails a whole file on one malformed line.

Each round runs every contender once, in an order rotated by one each round, and records the
1-minute load average before each run. Printed: each run, the router's ratio to each peer within
the round (peer time / router time = router events/s / peer events/s) and the median of those
ratios. With `--malformed`, the same comparison runs again over input with that fraction of
malformed lines. Before any ratio is printed the routes' rows per partition are compared across
contenders (dead letters are counted separately: the peers do not produce the same ones).

Then, unless `--router-only`, the rest of the figures issue 14 asks for in the same run: the
sessionizer against PyFlink reading with its json format, its strongest fair peer
(`benchmarks.flink_compare --job sessionizer_json --rotate`, `--stateful-events` events), and the
router's events/s in the case users run, a 5 s trigger with 50 files a batch
(`benchmarks.batch_costs`). The last table gives each figure with its target.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from benchmarks import batch_costs, flink_compare
from benchmarks.flink import router_json
from benchmarks.flink_compare import (
    CHUNKS_START,
    FLINK_RUNNER,
    RESULT_PREFIX,
    Run,
    ensure_flink_venv,
    flink_partition_counts,
    parallelism,
    rooted,
    stream_child,
)
from ops.spec.job import JobSpec, find_job
from ops.spec.platform import load_platform
from synthetic.generator import write_batch

REPO = Path(__file__).resolve().parent.parent
WORKDIR = REPO / "benchmarks" / "out" / "peers"
CHUNK_EVENTS = 50_000
DEFAULT_EVENTS = 2_000_000
QUICK_EVENTS = 100_000
WARMUP_EVENTS = 30_000
WARMUP_SEED = 90_000
CONTENDERS = ("router", "bare", "flink", "pyarrow")
# The sessionizer's comparison in `benchmarks.flink_compare`: Flink's json format, its strongest peer.
STATEFUL = "sessionizer_json"
# The batch-costs variant that is the driver as it runs.
DRIVER_VARIANT = "router + telemetry"
DEAD_LETTER = "dead_letter"

Echo = Callable[[str], None]
PartitionCounts = Counter[tuple[str, ...]]


@dataclass(frozen=True)
class Timed:
    contender: str
    round_no: int
    wall_seconds: float
    load: float
    counts: PartitionCounts


def write_input(landing: Path, events: int, malformed: float, seed: int) -> tuple[int, float]:
    """Router-scenario lines in `CHUNK_EVENTS`-line files; returns (lines, MB)."""
    written = 0
    for chunk in range(max(1, round(events / CHUNK_EVENTS))):
        size = min(events, CHUNK_EVENTS)
        # An hour of event time per file, so the sink has as many hour partitions as files.
        start = CHUNKS_START + timedelta(hours=chunk)
        batch = write_batch(landing, size, malformed_fraction=malformed, seed=seed + chunk, start=start)
        written += batch.total
    return written, sum(path.stat().st_size for path in landing.glob("*.json")) / 1e6


def run_child(contender: str, workdir: Path, round_no: int, echo: Echo) -> tuple[float, PartitionCounts]:
    """One timed run of a contender (after its warm-up) in its own process: (wall seconds, counts)."""
    out = workdir / contender / f"round-{round_no}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    if contender == "flink":
        return _run_flink(workdir, out, echo)
    command = [sys.executable, "-m", "benchmarks.peers", "child", contender, str(workdir), str(out)]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    result = stream_child(command, out / "child.log", echo, env=env, cwd=REPO)
    counts = Counter({tuple(row[:-1]): row[-1] for row in result["counts"]})
    return result["wall_seconds"], counts


def _run_flink(workdir: Path, out: Path, echo: Echo) -> tuple[float, PartitionCounts]:
    python = ensure_flink_venv(echo)
    platform, spec = load_platform(), find_job("router")
    runs = [
        ("warm-up", workdir / "warm-up" / "landing", out / "warm-up"),
        ("timed", workdir / "landing", out / "sink"),
    ]
    plan = {
        "mode": "streaming",
        "parallelism": parallelism(spec.operations.resources.master or platform.spark.master),
        "runs": [
            {"name": name, "statements": router_json.statements(spec, landing, sink)}
            for name, landing, sink in runs
        ],
    }
    plan_path = out / "flink-plan.json"
    plan_path.write_text(json.dumps(plan, indent=1))
    env = {**os.environ, "JVM_ARGS": f"-Xmx{spec.operations.resources.driver_memory}"}
    result = stream_child([str(python), str(FLINK_RUNNER), str(plan_path)], out / "child.log", echo, env=env)
    return result["runs"][-1]["wall_seconds"], flink_partition_counts(out / "sink")


Runner = Callable[[str, Path, int, Echo], tuple[float, PartitionCounts]]


def rotated(contenders: Sequence[str], round_no: int) -> list[str]:
    """The order of round `round_no` (from 1): the contenders shifted left by one per round."""
    shift = (round_no - 1) % len(contenders)
    return [*contenders[shift:], *contenders[:shift]]


def compare(
    workdir: Path, rounds: int, contenders: Sequence[str], echo: Echo, runner: Runner = run_child
) -> list[Timed]:
    """Every contender once per round, in `rotated` order, with the load average before each run."""
    timed: list[Timed] = []
    for round_no in range(1, rounds + 1):
        for contender in rotated(contenders, round_no):
            load = os.getloadavg()[0]
            wall, counts = runner(contender, workdir, round_no, echo)
            echo(f"  round {round_no}: {contender:8} {wall:6.1f} s   load {load:5.2f}")
            timed.append(Timed(contender, round_no, wall, load, counts))
    return timed


def check_routes(timed: Sequence[Timed], echo: Echo, strict: bool) -> None:
    """Fail unless every run wrote the same rows per route partition (`strict`: clean input);
    echo the dead letters.

    With malformed lines the peers differ by design: bare PySpark routes an event whose field has
    the wrong type with that field null, where the router and Flink dead-letter it.
    """
    routes = {t.contender: Counter({k: v for k, v in t.counts.items() if k[0] != DEAD_LETTER}) for t in timed}
    reference = routes["router"]
    for contender, counts in routes.items():
        if counts != reference and not strict:
            echo(f"  {contender} routed {counts.total():,} rows, the router {reference.total():,}")
        elif counts != reference:
            keys = sorted(k for k in counts.keys() | reference.keys() if counts[k] != reference[k])[:5]
            details = ", ".join(f"{k}: router {reference[k]} {contender} {counts[k]}" for k in keys)
            raise RuntimeError(f"{contender} routed different rows than the router ({details})")
    if strict:
        echo(
            f"  same rows per route partition on every side: {len(reference)} partitions, "
            f"{reference.total():,} rows"
        )
    for t in {t.contender: t for t in timed}.values():
        dead = sum(v for k, v in t.counts.items() if k[0] == DEAD_LETTER)
        echo(f"  {t.contender}: {dead:,} dead letters")


def ratio_lines(timed: Sequence[Timed], rounds: int) -> tuple[list[str], dict[str, float]]:
    """Per-round router ratios to each peer (peer wall / router wall) and their medians."""
    by = {(t.contender, t.round_no): t for t in timed}
    peers = sorted({t.contender for t in timed} - {"router"}, key=CONTENDERS.index)
    lines, medians = [], {}
    for peer in peers:
        ratios = [by[peer, r].wall_seconds / by["router", r].wall_seconds for r in range(1, rounds + 1)]
        medians[peer] = statistics.median(ratios)
        lines.append(
            f"  router / {peer}: "
            + "  ".join(f"round {r} {x:.2f}x" for r, x in enumerate(ratios, 1))
            + f"   median {medians[peer]:.2f}x"
        )
    return lines, medians


def benchmark(events: int, rounds: int, malformed: float, echo: Echo) -> dict[str, dict[str, float]]:
    """The clean comparison, then (with `malformed`) the same over input with malformed lines."""
    results: dict[str, dict[str, float]] = {}
    cases = [("clean", 0.0, CONTENDERS)]
    if malformed > 0:
        cases.append((f"{malformed:.0%} malformed", malformed, CONTENDERS[:-1]))
    for name, fraction, contenders in cases:
        workdir = WORKDIR / name.split()[0]
        shutil.rmtree(workdir, ignore_errors=True)
        written, mb = write_input(workdir / "landing" / "events", events, fraction, 0)
        write_input(workdir / "warm-up" / "landing" / "events", WARMUP_EVENTS, fraction, WARMUP_SEED)
        echo(f"== router vs peers, {name}: {written:,} lines, {mb:.0f} MB, {rounds} rotated rounds ==")
        timed = compare(workdir, rounds, contenders, echo)
        check_routes(timed, echo, strict=fraction == 0)
        lines, medians = ratio_lines(timed, rounds)
        for line in lines:
            echo(line)
        loads = [t.load for t in timed]
        echo(f"  load average (1 min) at the runs: {min(loads):.2f}-{max(loads):.2f}")
        results[name] = medians
    return results


def targets_table(
    router: dict[str, dict[str, float]], sessionizer: float | None, trigger: dict[str, float] | None
) -> list[str]:
    """Issue 14's figures with their targets, as markdown lines, from this run's medians:
    `router` as `benchmark` returns it, the sessionizer's spark/flink wall ratio and the driver's
    batch-costs medians (None when not measured)."""
    clean = router["clean"]
    rows = [
        ("router / bare PySpark, clean", f"{clean['bare']:.2f}x", ">= 0.9x"),
        ("router / PyFlink json, clean", f"{clean['flink']:.2f}x", ">= 1.2x"),
        ("router / pyarrow floor", f"{clean['pyarrow']:.2f}x", ">= 0.45x"),
    ]
    for name, medians in router.items():
        if name != "clean":
            points = round(100 * (medians["bare"] - clean["bare"]))
            rows.append(
                (
                    f"router / bare PySpark, {name}",
                    f"{medians['bare']:.2f}x ({points:+d} points)",
                    "within 5 points of clean",
                )
            )
    if sessionizer is not None:
        rows.append(("sessionizer / PyFlink json (median walls)", f"{sessionizer:.2f}x", ">= 1.5x"))
    if trigger is not None:
        rows.append(
            (
                "router events/s, trigger 5 s, 50 files a batch",
                f"{trigger['events/s per batch']:,.0f} per batch, "
                f"{trigger['events/s over the run']:,.0f} over the run",
                "-",
            )
        )
    return ["| figure | median | target |", "|---|---|---|", *(f"| {' | '.join(row)} |" for row in rows)]


# --- the children -----------------------------------------------------------------------------------


def spark_child(contender: str, workdir: Path, out: Path) -> None:
    """The router or bare PySpark: warm-up, then the timed run, in one session; print RESULT."""
    from pyspark.sql import functions as F

    from ops.driver.session import build_session
    from ops.spec.pipelines import RouterPipeline

    platform, spec = load_platform(), find_job("router")
    spark = build_session(platform, spec)
    wall = 0.0
    for name, landing in (("warm-up", workdir / "warm-up" / "landing"), ("timed", workdir / "landing")):
        run = Run(name, landing, out / name)
        started = time.monotonic()
        query = _spark_plan(contender, spark, rooted(platform, run), spec).start()
        query.awaitTermination()
        wall = time.monotonic() - started
        if query.exception() is not None:
            raise RuntimeError(f"{contender} {name} failed: {query.exception()}")
        print(f"  {contender} {name}: {wall:.1f}s wall, {len(query.recentProgress)} batches", flush=True)
    sink = spark.read.parquet(str(out / "timed" / "lake" / spec.pipeline.sink.path))
    counts = [
        [
            *("null" if row[c] is None else str(row[c]) for c in RouterPipeline.fixed_partition_columns),
            row["count"],
        ]
        for row in sink.groupBy(*RouterPipeline.fixed_partition_columns)
        .agg(F.count(F.lit(1)).alias("count"))
        .collect()
    ]
    spark.stop()
    print(RESULT_PREFIX + json.dumps({"wall_seconds": wall, "counts": counts}), flush=True)


def _spark_plan(contender: str, spark, platform, spec: JobSpec):  # noqa: ANN001, ANN202 (pyspark types, lazily imported)
    from jobs.runner import plan_job
    from jobs.runtime import with_trigger

    if contender == "router":
        return with_trigger(plan_job(platform, spec), spec, available_now=True)(spark)
    from benchmarks.bare_router import bare_writer
    from ops.spec.paths import JobPaths

    paths = JobPaths.of(platform, spec)
    return bare_writer(spark, spec, paths.landing["events"], paths.sink, paths.checkpoint)


def arrow_child(workdir: Path, out: Path) -> None:
    """The pyarrow floor: read every file with the typed schema, filter per route, write Parquet."""
    from benchmarks.arrow_router import route_files

    spec = find_job("router")
    route_files(spec, workdir / "warm-up" / "landing" / "events", out / "warm-up")
    started = time.monotonic()
    route_files(spec, workdir / "landing" / "events", out / "sink")
    wall = time.monotonic() - started
    print(f"  pyarrow timed: {wall:.1f}s wall", flush=True)
    import pyarrow.dataset as ds

    table = ds.dataset(out / "sink", format="parquet", partitioning="hive").to_table()
    counts: PartitionCounts = Counter()
    for row in (
        table.group_by(["route", "event_date", "event_hour"]).aggregate([([], "count_all")]).to_pylist()
    ):
        key = tuple("null" if row[c] is None else str(row[c]) for c in ("route", "event_date", "event_hour"))
        counts[key] += row["count_all"]
    print(RESULT_PREFIX + json.dumps({"wall_seconds": wall, "counts": [[*k, v] for k, v in counts.items()]}))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.peers", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    child = sub.add_parser("child", help="internal: one contender's process")
    child.add_argument("contender", choices=("router", "bare", "pyarrow"))
    child.add_argument("workdir", type=Path)
    child.add_argument("out", type=Path)
    parser.add_argument(
        "--rounds", type=int, default=3, help="rotated rounds (median of the per-round ratios)"
    )
    parser.add_argument(
        "--malformed", type=float, default=0.02, help="fraction of malformed lines in the second run"
    )
    parser.add_argument(
        "--stateful-events",
        type=int,
        default=flink_compare.DEFAULT_EVENTS,
        help="the sessionizer comparison's input",
    )
    parser.add_argument(
        "--router-only", action="store_true", help="skip the sessionizer and the 5 s trigger run"
    )
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--events", type=int, default=DEFAULT_EVENTS)
    size.add_argument("--quick", action="store_const", dest="events", const=QUICK_EVENTS, help="~100K events")
    args = parser.parse_args(argv)
    if args.command == "child":
        if args.contender == "pyarrow":
            arrow_child(args.workdir, args.out)
        else:
            spark_child(args.contender, args.workdir, args.out)
        return 0
    router = benchmark(args.events, args.rounds, args.malformed, print)
    sessionizer = trigger = None
    if not args.router_only:
        print(f"== the sessionizer vs PyFlink json, {args.rounds} rotated rounds ==", flush=True)
        result = flink_compare.compare(
            STATEFUL, args.stateful_events, args.rounds, WORKDIR / STATEFUL, print, rotate=True
        )
        sessionizer = result.flink.wall_seconds / result.spark.wall_seconds
        print("== the router at a 5 s trigger, 50 files a batch ==", flush=True)
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        costs = batch_costs.benchmark(
            batch_costs.DEFAULT_BATCHES,
            batch_costs.DEFAULT_EVENTS_PER_FILE,
            batch_costs.DEFAULT_ROUNDS,
            print,
        )
        trigger = costs[DRIVER_VARIANT]
    print("\n".join(targets_table(router, sessionizer, trigger)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
