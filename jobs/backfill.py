"""`python -m jobs.backfill --run-dir DIR` (or `spark-submit jobs/backfill.py`): a Kappa+ backfill.

The job's own streaming query (`jobs.runner.plan_job`, the same transform, state and sink
layout) over archived input: the control side (`ops.backfill`) has planned the range, cut it into
feed batches under a byte budget and staged each archive partition under the run directory
(`ops.driver.backfill` has the layout). This application runs ONE query for the whole range and
feeds it one feed batch per micro-batch (consecutive arrival hours, or a slice of one hour; every
input of the job at once: lockstep), oldest first: the inputs are read by one text file source
over the run's feed directory (`jobs.archive_source`), and the driver releases the next feed batch
there, every input's files in one rename, once the previous one has committed. The watermark
moves to the batch's end after it (Spark's own rule, `max event time - allowed lateness`), so the
next batch runs under it: an event is late when it is older than the watermark its batch started
under, so a bigger batch keeps every event its smaller parts would keep. No no-data batch runs
between feed batches, and a batch without rows closes the range (the closing position after the
last). State carries across batches, so a session or a join spanning a batch boundary
is whole, while memory is bounded by the budget: the JVM that runs the tasks gets a heap sized from
it (`ops.driver.backfill.batch_heap`), committed when it starts, so a long range peaks where a
short one does. The query starts, plans and loads its state once.

A bootstrap backfill (`--bootstrap`) feeds the job's file-source query instead, an available-now
run per feed batch (`feed_available_now`): its checkpoint becomes the live job's savepoint.

Each feed batch is recorded as done once it commits; a killed run started again skips the
recorded ones, and Spark re-runs an uncommitted batch with its logged offsets. Exit codes as the
streaming driver's: 0 done, 1 the query failed, 2 config error. With `monitoring.pushgateway_url`
set, the run pushes its success or failure (`ops.pushgateway`, task `backfill`); a publish into the
warehouse table pushes its own after it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
import structlog
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from jobs.archive_source import count_lines, read_archive
from jobs.runner import plan_job
from jobs.runtime import with_trigger
from ops.atomic import write_atomically
from ops.driver.backfill import BackfillPlan, BackfillRun, BatchDone, FeedBatch, batch_heap
from ops.driver.checkpoint import log_entries, sink_files
from ops.driver.session import (
    EXIT_CONFIG_ERROR,
    EXIT_QUERY_FAILED,
    EXIT_STOPPED,
    PARALLEL_LISTING_CONF,
    build_session,
    configure_logging,
)
from ops.exceptions import BackfillError, ConfigError
from ops.pushgateway import BatchTask, push_task_outcome
from ops.spec.job import JobSpec, load_job
from ops.spec.paths import JobPaths
from ops.spec.platform import PlatformConfig, load_platform

log = structlog.get_logger("streamwarden.backfill")

# Whether a query may run a batch without new input when the watermark has moved past state. It is
# read when a query starts and is not frozen in the checkpoint. Off for the gated query: whether
# one ran between two feed batches would depend on how fast the driver released the next, and it is
# redundant: the next data batch starts under the same watermark (the commit log carries it) and
# Spark evicts and fires every timeout under it in that batch, before the new watermark applies,
# so the rows are the same; skipping it saved 1.4-2.7 s of each batch (query planning, state
# store load and commit, a Parquet sink commit). After the range's last feed batch the closing
# position runs one (`BackfillRun.release_closing`), so the final state and output are those of the
# streaming job.
NO_DATA_BATCHES = "spark.sql.streaming.noDataMicroBatches.enabled"
# Close a query's state stores when its tasks commit instead of leaving them to the maintenance
# thread (every 60 s, and only once their query run has ended). A bootstrap's query is a new run
# per feed batch that loads the state anew, so a loaded store is never used again; left loaded,
# their RocksDB instances grew the JVM by 15-20 MiB per batch (16 batches of 30,000 events: 926 ->
# 1,253 MiB; closed on commit: 892 -> 989 MiB), i.e. with the range, not with one batch.
UNLOAD_ON_COMMIT = "spark.sql.streaming.stateStore.unloadOnCommit"
# The shuffle partitions of the gated query, i.e. its state stores. Each stateful task of a
# micro-batch pays its own fixed cost, data or not (a Python worker for the pandas state function,
# the RocksDB commit of its store, its scheduling): an empty batch of the sessionizer's backfill
# (`benchmarks.backfill`, its fixed cost) ran 4 such tasks on 2 cores. The gated query's checkpoint
# is the run's own (never a savepoint of the job's, unlike a bootstrap's), so it need not keep the
# job's partitioning: it takes no more partitions than the cores it runs on, and a task a core.
SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
# The directories one listing of a file source may hold before Spark lists them in a Spark job of
# their own (`PARALLEL_LISTING_CONF`): the gated query's feed keeps the directories of the batches
# it committed, emptied, until it stops (`BackfillRun.withdraw`), and lists them between every two
# batches; in the driver, not in a Spark job each time.
LISTING_IN_DRIVER = 1_000_000
# How often the driver looks for the commit of the batch it fed (a file in the checkpoint), and
# how often it asks the query whether it still runs: a call into the JVM, which at every look
# took 4,400 calls and 5 s of the driver's time in a 30-hour backfill (cProfile), on the cores the
# query runs on.
COMMIT_POLL_SECONDS = 0.01
LIVENESS_POLL_SECONDS = 1.0
# How long the driver waits for a committed batch's progress report, for its log line.
PROGRESS_WAIT_SECONDS = 0.1


def backfill_spec(run: BackfillRun, plan: BackfillPlan) -> JobSpec:
    """The spec the run computes with, checked against the version the plan recorded; without a
    per-trigger file limit, so that one micro-batch reads a whole feed batch."""
    spec = load_job(run.spec_file(plan.job))
    if spec.config_version != plan.config_version:
        raise ConfigError(
            run.spec_file(plan.job),
            f"config {spec.config_version} is not the config {plan.config_version} "
            "the backfill was planned with",
        )
    return without_file_limit(spec)


def without_file_limit(spec: JobSpec) -> JobSpec:
    """`spec` without a per-trigger file limit: its query reads all that is there in one batch."""
    trigger = spec.operations.trigger.model_copy(update={"max_files_per_trigger": None})
    operations = spec.operations.model_copy(update={"trigger": trigger})
    return spec.model_copy(update={"operations": operations})


def _next_batch(paths: JobPaths) -> int:
    """The id the query's next batch gets: a logged but uncommitted batch is re-run under its id."""
    offsets, commits = log_entries(paths.offsets), log_entries(paths.commits)
    committed = max(commits, default=-1)
    return committed if max(offsets, default=-1) > committed else committed + 1


def _rows_written(paths: JobPaths, first_batch: int, last_batch: int) -> int:
    """Rows in the sink files the batches first..last committed (their Parquet footers)."""
    before = sink_files(paths.sink_log, first_batch - 1) if first_batch > 0 else set()
    files = sink_files(paths.sink_log, last_batch) - before
    return sum(pq.ParquetFile(path).metadata.num_rows for path in files)


@dataclass
class Feed:
    """What feeding the plan's batches needs, and the bookkeeping every feed batch ends with."""

    run: BackfillRun
    plan: BackfillPlan
    spec: JobSpec
    scratch: PlatformConfig
    done: dict[int, BatchDone]

    @property
    def paths(self) -> JobPaths:
        return JobPaths.of(self.scratch, self.spec)

    def first_batch(self, batch: FeedBatch) -> int:
        """The first query batch of `batch`, recorded before anything of it is logged: a killed
        attempt's record stands (its batches may have been logged or committed since)."""
        running = self.run.running()
        if running is not None and running[0] == batch.index:
            return running[1]
        first_batch = _next_batch(self.paths)
        self.run.record_running(batch.index, first_batch)
        return first_batch

    def staged_files(self, batch: FeedBatch) -> list[Path]:
        """The staged files `batch` reads, every input's; BackfillError if one is missing."""
        files = [path for name in self.plan.sources for path in self.run.staged_files(batch, name)]
        missing = [path for path in files if not path.is_file()]
        if missing:
            raise BackfillError(
                f"{batch.describe(self.plan.partitions)}: {len(missing)} files are not staged, e.g. "
                f"{missing[0]}; plan the backfill again"
            )
        return files

    def finish(
        self,
        batch: FeedBatch,
        first_batch: int,
        input_rows: int,
        started: float,
        phases_ms: dict[str, int] | None = None,
    ) -> None:
        """Record `batch` done once its query batches committed, log it (with Spark's time per
        phase of its last query batch, when known) and throttle."""
        paths = self.paths
        last_batch = max(log_entries(paths.commits), default=-1)
        record = BatchDone(
            index=batch.index,
            partitions=batch.completes,
            first_batch=first_batch,
            last_batch=last_batch,
            input_rows=input_rows,
            output_rows=_rows_written(paths, first_batch, last_batch) if last_batch >= first_batch else 0,
            seconds=round(time.monotonic() - started, 3),
        )
        self.run.record_done(record)
        self.done[batch.index] = record
        log.info(
            "batch done",
            batch=f"{batch.index + 1}/{len(self.plan.batches)}",
            arrival_hours=batch.describe(self.plan.partitions),
            bytes=batch.bytes,
            query_batches=f"{first_batch}..{last_batch}",
            input_rows=record.input_rows,
            output_rows=record.output_rows,
            seconds=record.seconds,
            rows_per_second=round(record.input_rows / record.seconds) if record.seconds else None,
            phases_ms=phases_ms,
        )
        if self.plan.throttle_seconds:
            time.sleep(self.plan.throttle_seconds)

    def discard(self, batch: FeedBatch, files: list[Path]) -> None:
        """Delete a committed batch's staged and released files (Spark never reads them again), and
        the directories of the partitions it completed."""
        self.run.withdraw(batch.index)
        for path in files:
            path.unlink(missing_ok=True)
        for partition in batch.completes:
            for name in self.plan.sources:
                shutil.rmtree(self.run.staged(name, partition), ignore_errors=True)


def _await_commit(query: StreamingQuery, paths: JobPaths, batch: int) -> None:
    """Block until batch `batch` commits; raise if the query fails or ends before."""
    commit = paths.commits / str(batch)
    next_liveness = time.monotonic()
    while not commit.is_file():
        if time.monotonic() >= next_liveness:
            if not query.isActive:
                query.awaitTermination()  # raises the query's failure, if it failed
                raise BackfillError(f"the backfill's query ended before its batch {batch} committed")
            next_liveness = time.monotonic() + LIVENESS_POLL_SECONDS
        time.sleep(COMMIT_POLL_SECONDS)


def _phases_ms(query: StreamingQuery, batch: int) -> dict[str, int] | None:
    """Spark's time per phase of `batch` (its progress's `durationMs`), once the query reports it
    (just after the commit); None if it does not within `PROGRESS_WAIT_SECONDS`."""
    deadline = time.monotonic() + PROGRESS_WAIT_SECONDS
    while time.monotonic() < deadline:
        progress = query.lastProgress
        if progress is not None and progress["batchId"] == batch:
            return dict(progress["durationMs"])
        time.sleep(COMMIT_POLL_SECONDS)
    return None


def gated_partitions(spark: SparkSession, spec: JobSpec) -> int:
    """The gated query's shuffle partitions: the job's, but no more than the session's cores (its
    default parallelism: local[N]'s threads, or the executors' cores). A resumed run keeps those
    its checkpoint recorded, as any query does."""
    return max(1, min(spec.operations.resources.shuffle_partitions, spark.sparkContext.defaultParallelism))


def feed_gated(spark: SparkSession, feed: Feed, todo: list[FeedBatch]) -> None:
    """Feed `todo` to ONE long-running query of the job, a feed batch per micro-batch.

    The query's inputs read the released feed batches (`jobs.archive_source`); the driver releases
    one, waits for its commit, records it and releases the next. The query starts, plans and loads
    its state once for the whole range; its state stores stay loaded between batches. After the
    last feed batch the driver releases the closing position, whose micro-batch is the closing
    no-data batch.
    """
    run, paths = feed.run, feed.paths
    inputs = list(feed.plan.sources)
    last = feed.plan.batches[-1].index
    spark.conf.set(NO_DATA_BATCHES, "false")
    spark.conf.set(SHUFFLE_PARTITIONS, str(gated_partitions(spark, feed.spec)))
    spark.conf.set(PARALLEL_LISTING_CONF, str(LISTING_IN_DRIVER))
    # The source finds its partition columns in what the feed holds when the query is planned, so
    # the first batch is released before (its release in the loop is then a no-op); a file of it
    # that is not staged is the BackfillError it is for every batch, before anything is linked.
    run.prune_feed()
    feed.staged_files(todo[0])
    feed.first_batch(todo[0])
    run.release(todo[0], inputs)
    writer = plan_job(feed.scratch, feed.spec, read_archive(run))(spark)
    query = writer.trigger(processingTime="0 seconds").start()
    try:
        for batch in todo:
            started = time.monotonic()
            files = feed.staged_files(batch)
            first_batch = feed.first_batch(batch)
            run.release(batch, inputs)
            # Counted while the query reads them (the count is for the record only): counted
            # before the release, the query waited for it, 0.5 s a feed batch of 256 MiB.
            lines = sum(count_lines(path) for path in files)
            _await_commit(query, paths, first_batch)
            if batch.index == last:
                run.release_closing(inputs)
                _await_commit(query, paths, first_batch + 1)
            committed = max(log_entries(paths.commits))
            feed.finish(batch, first_batch, lines, started, _phases_ms(query, committed))
            feed.discard(batch, files)
    finally:
        query.stop()
        run.prune_feed()


def stage_batch(feed: Feed, batch: FeedBatch) -> int:
    """Make the query's landing directories hold exactly `batch`'s files; their lines.

    Files of earlier batches are removed first (they committed, and the file source never reads a
    file twice), so listing the input costs one batch whatever the range. Moving is a rename
    within the run directory; a file already moved by a killed attempt stays.
    """
    lines = 0
    for name, landing in feed.paths.landing.items():
        wanted = {path.name: path for path in feed.run.staged_files(batch, name)}
        landing.mkdir(parents=True, exist_ok=True)
        for present in landing.iterdir():
            if present.is_file() and present.name not in wanted:
                present.unlink()
        for file_name, source in sorted(wanted.items()):
            target = landing / file_name
            if not target.is_file():
                if not source.is_file():
                    raise BackfillError(
                        f"{batch.describe(feed.plan.partitions)} of input {name!r}: {file_name} is "
                        f"neither staged in {source.parent} nor in the query's input {landing}; plan "
                        "the backfill again"
                    )
                source.rename(target)
            lines += count_lines(target)
    return lines


def feed_available_now(spark: SparkSession, feed: Feed, todo: list[FeedBatch]) -> None:
    """Feed `todo` to the job's own file-source query, an available-now run of it per feed batch.

    A bootstrap backfill runs this way: its checkpoint becomes the live job's savepoint
    (`ops.backfill.bootstrap`), so its sources must be the job's file sources, whose logs name
    the landing files read. It pays a query start and a state load per feed batch.
    """
    paths = feed.paths
    # One writer for every batch: building the plan (reading the schema, the transform and its
    # pandas function) cost about a second of each.
    writer = with_trigger(plan_job(feed.scratch, feed.spec), feed.spec, available_now=True)(spark)
    spark.conf.set(UNLOAD_ON_COMMIT, "true")
    last = feed.plan.batches[-1].index
    for batch in todo:
        started = time.monotonic()
        lines = stage_batch(feed, batch)
        first_batch = feed.first_batch(batch)
        spark.conf.set(NO_DATA_BATCHES, str(batch.index == last).lower())
        writer.start().awaitTermination()
        feed.finish(batch, first_batch, lines, started)
    # The input of the last batch is not needed any more: it committed.
    for landing in paths.landing.values():
        for present in landing.glob("*"):
            present.unlink()


def run_batches(spark: SparkSession, platform: PlatformConfig, run: BackfillRun) -> list[BatchDone]:
    """Feed every feed batch not yet done to the job's query, oldest first; the records of the run."""
    plan = run.read_plan()
    feed = Feed(
        run=run, plan=plan, spec=backfill_spec(run, plan), scratch=run.platform(platform), done=run.done()
    )
    todo = [batch for batch in plan.batches if batch.index not in feed.done]
    if todo:
        (feed_available_now if plan.bootstrap else feed_gated)(spark, feed, todo)
    records = [feed.done[index] for index in sorted(feed.done)]
    summary = {
        "batches": len(records),
        "partitions": sum(len(record.partitions) for record in records),
        "input_rows": sum(record.input_rows for record in records),
        "output_rows": sum(record.output_rows for record in records),
        "last_batch": max((record.last_batch for record in records), default=-1),
    }
    write_atomically(run.complete_file, json.dumps(summary, indent=1))
    return records


def main(argv: Sequence[str] | None = None) -> int:
    """Run a planned backfill to its end (or from where a killed attempt stopped)."""
    parser = argparse.ArgumentParser(prog="python -m jobs.backfill", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--run-dir", required=True, type=Path, help="the run directory `warden backfill` planned"
    )
    args = parser.parse_args(argv)
    run = BackfillRun(args.run_dir.resolve())
    try:
        platform = load_platform()
        plan = run.read_plan()
        spec = backfill_spec(run, plan)
    except (ConfigError, OSError) as exc:
        configure_logging(mode="backfill")
        log.error("cannot start the backfill", error=str(exc))
        return EXIT_CONFIG_ERROR
    configure_logging(job=plan.job, mode="backfill", run_id=plan.run_id)
    started = time.monotonic()
    heap = batch_heap(plan.max_batch_bytes, spec.operations.resources.task_memory(platform.spark))
    spark = build_session(platform, spec, heap=heap)
    try:
        records = run_batches(spark, platform, run)
    except ConfigError as exc:
        log.error("cannot plan the job's query", error=str(exc))
        push_task_outcome(platform.monitoring, BatchTask.BACKFILL, plan.job, succeeded=False)
        return EXIT_CONFIG_ERROR
    except Exception as exc:
        # The outermost loop: a failed batch, a feed batch that cannot be fed. What
        # completed stays recorded and a new attempt resumes after it.
        log.error("backfill failed", error_class=type(exc).__name__, error=str(exc).splitlines()[0])
        push_task_outcome(platform.monitoring, BatchTask.BACKFILL, plan.job, succeeded=False)
        return EXIT_QUERY_FAILED
    finally:
        spark.stop()
    log.info(
        "backfill done",
        batches=len(records),
        partitions=sum(len(r.partitions) for r in records),
        output_rows=sum(r.output_rows for r in records),
    )
    push_task_outcome(
        platform.monitoring,
        BatchTask.BACKFILL,
        plan.job,
        succeeded=True,
        duration_seconds=time.monotonic() - started,
    )
    return EXIT_STOPPED


if __name__ == "__main__":
    raise SystemExit(main())
