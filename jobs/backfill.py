"""`python -m jobs.backfill --run-dir DIR` (or `spark-submit jobs/backfill.py`): a Kappa+ backfill.

The job's own streaming query (`jobs.runner.plan_job`, the same transform, state and sink
layout) over archived input: the control side (`ops.backfill`) has planned the range and staged
each archive partition under the run directory (`ops.driver.backfill` has the layout). This
application runs ONE query for the whole range and feeds it one partition per micro-batch, every
input of the job at once (lockstep), oldest first: each input is read by the gated archive source
(`jobs.archive_source`), and the driver releases the next partition once the previous batch has
committed. The watermark moves to the partition's end after it (Spark's own rule, `max event time
- allowed lateness`), so the next partition's batch runs under it; no no-data batch runs between
partitions, and one closes the range (the empty position after the last partition). State carries
across partitions, so a session or a join spanning a partition boundary is whole, while memory is
bounded by one partition; the query starts, plans and loads its state once, not per partition.

A bootstrap backfill (`--bootstrap`) feeds the job's file-source query instead, an available-now
run per partition (`feed_per_partition`): its checkpoint becomes the live job's savepoint.

Each partition is recorded as done once its batches commit; a killed run started again skips the
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
from jobs.archive_source import register as register_archive_source
from jobs.runner import plan_job
from jobs.runtime import with_trigger
from ops.atomic import write_atomically
from ops.driver.backfill import BackfillPlan, BackfillRun, PartitionDone, PlannedPartition
from ops.driver.checkpoint import log_entries, sink_files
from ops.driver.session import (
    EXIT_CONFIG_ERROR,
    EXIT_QUERY_FAILED,
    EXIT_STOPPED,
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
# one ran between two partitions would depend on how fast the driver opened the gate, and it is
# redundant: the next partition's data batch starts under the same watermark (the commit
# log carries it) and Spark evicts and fires every timeout under it in that batch, before the new
# watermark applies, so the rows are the same; skipping it saved 1.4-2.7 s of each partition
# (a batch: query planning, state store load and commit, a Parquet sink commit). After the range's
# last partition it does run, so the final state and output are those of the streaming job.
NO_DATA_BATCHES = "spark.sql.streaming.noDataMicroBatches.enabled"
# Close a query's state stores when its tasks commit instead of leaving them to the maintenance
# thread (every 60 s, and only once their query run has ended). Every partition's query is a new
# run that loads the state anew, so a loaded store is never used again; left loaded, their RocksDB
# instances grew the JVM by 15-20 MiB per partition (16 partitions of 30,000 events: 926 -> 1,253
# MiB; closed on commit: 892 -> 989 MiB), i.e. with the range, not with one partition.
UNLOAD_ON_COMMIT = "spark.sql.streaming.stateStore.unloadOnCommit"
# How often the driver looks for the commit of the batch it fed (a file in the checkpoint).
COMMIT_POLL_SECONDS = 0.01
# How long the driver waits for a committed batch's progress report, for its log line.
PROGRESS_WAIT_SECONDS = 0.1


def backfill_spec(run: BackfillRun, plan: BackfillPlan) -> JobSpec:
    """The spec the run computes with, checked against the version the plan recorded; without a
    per-trigger file limit, so that one micro-batch reads a whole partition."""
    spec = load_job(run.spec_file(plan.job))
    if spec.config_version != plan.config_version:
        raise ConfigError(
            run.spec_file(plan.job),
            f"config {spec.config_version} is not the config {plan.config_version} "
            "the backfill was planned with",
        )
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
class PartitionFeed:
    """What feeding partitions needs, and the bookkeeping every partition ends with."""

    run: BackfillRun
    plan: BackfillPlan
    spec: JobSpec
    scratch: PlatformConfig
    done: dict[int, PartitionDone]

    @property
    def paths(self) -> JobPaths:
        return JobPaths.of(self.scratch, self.spec)

    def first_batch(self, partition: PlannedPartition) -> int:
        """The first batch of `partition`, recorded before anything of it is logged: a killed
        attempt's record stands (its batches may have been logged or committed since)."""
        running = self.run.running()
        if running is not None and running[0] == partition.index:
            return running[1]
        first_batch = _next_batch(self.paths)
        self.run.record_running(partition.index, first_batch)
        return first_batch

    def finish(
        self,
        partition: PlannedPartition,
        first_batch: int,
        input_rows: int,
        started: float,
        phases_ms: dict[str, int] | None = None,
    ) -> None:
        """Record `partition` done once its batches committed, log it (with Spark's time per phase
        of its last batch, when known) and throttle."""
        paths = self.paths
        last_batch = max(log_entries(paths.commits), default=-1)
        record = PartitionDone(
            index=partition.index,
            first_batch=first_batch,
            last_batch=last_batch,
            input_rows=input_rows,
            output_rows=_rows_written(paths, first_batch, last_batch) if last_batch >= first_batch else 0,
            seconds=round(time.monotonic() - started, 3),
        )
        self.run.record_done(record)
        self.done[partition.index] = record
        log.info(
            "partition done",
            partition=f"{partition.index + 1}/{len(self.plan.partitions)}",
            arrival_hour=partition.label,
            batches=f"{first_batch}..{last_batch}",
            input_rows=record.input_rows,
            output_rows=record.output_rows,
            seconds=record.seconds,
            rows_per_second=round(record.input_rows / record.seconds) if record.seconds else None,
            phases_ms=phases_ms,
        )
        if self.plan.throttle_seconds:
            time.sleep(self.plan.throttle_seconds)


def _staged_lines(feed: PartitionFeed, partition: PlannedPartition) -> int:
    """The lines of `partition`'s staged files; BackfillError if one is missing."""
    lines = 0
    for name, file_names in partition.files.items():
        staged = feed.run.staged(name, partition.index)
        for file_name in file_names:
            path = staged / file_name
            if not path.is_file():
                raise BackfillError(
                    f"partition {partition.label} of input {name!r}: {file_name} is not staged in "
                    f"{staged}; plan the backfill again"
                )
            lines += count_lines(path)
    return lines


def _await_commit(query: StreamingQuery, paths: JobPaths, batch: int) -> None:
    """Block until batch `batch` commits; raise if the query fails or ends before."""
    commit = paths.commits / str(batch)
    while not commit.is_file():
        if not query.isActive:
            query.awaitTermination()  # raises the query's failure, if it failed
            raise BackfillError(f"the backfill's query ended before its batch {batch} committed")
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


def feed_gated(spark: SparkSession, feed: PartitionFeed, todo: list[PlannedPartition]) -> None:
    """Feed `todo` to ONE long-running query of the job, a partition per batch through the gate.

    The query's inputs read the staged partitions (`jobs.archive_source`); the driver releases one
    partition, waits for its batch's commit, records it and releases the next. The query starts,
    plans and loads its state once for the whole range; its state stores stay loaded between
    batches. The last partition is released with the empty position after it, whose batch is the
    closing no-data batch, and with the gate closed.
    """
    run, paths = feed.run, feed.paths
    last = feed.plan.partitions[-1].index
    register_archive_source(spark)
    spark.conf.set(NO_DATA_BATCHES, "false")
    # Released: the positions before the first partition to feed; the sources wait there.
    run.set_gate(todo[0].index)
    writer = plan_job(feed.scratch, feed.spec, read_archive(run))(spark)
    query = writer.trigger(processingTime="0 seconds").start()
    try:
        for partition in todo:
            started = time.monotonic()
            lines = _staged_lines(feed, partition)
            first_batch = feed.first_batch(partition)
            closing = partition.index == last
            run.set_gate(partition.index + 1 + int(closing), closed=closing)
            _await_commit(query, paths, first_batch + int(closing))
            feed.finish(partition, first_batch, lines, started, _phases_ms(query, first_batch + int(closing)))
            # Committed: Spark never reads these files again.
            for name in partition.files:
                shutil.rmtree(run.staged(name, partition.index), ignore_errors=True)
    finally:
        # A closed gate lets a waiting source answer, so the query stops at once.
        run.set_gate(run.read_gate()[0], closed=True)
        query.stop()


def stage_partition(run: BackfillRun, paths: JobPaths, partition: PlannedPartition) -> int:
    """Make the query's landing directories hold exactly `partition`'s files; their lines.

    Files of earlier partitions are removed first (their batches committed, and the file source
    never reads a file twice), so listing the input costs one partition whatever the range. Moving
    is a rename within the run directory; a file already moved by a killed attempt stays.
    """
    lines = 0
    for name, landing in paths.landing.items():
        wanted = set(partition.files.get(name, ()))
        landing.mkdir(parents=True, exist_ok=True)
        for present in landing.iterdir():
            if present.is_file() and present.name not in wanted:
                present.unlink()
        staged = run.staged(name, partition.index)
        for file_name in sorted(wanted):
            target = landing / file_name
            if not target.is_file():
                source = staged / file_name
                if not source.is_file():
                    raise BackfillError(
                        f"partition {partition.label} of input {name!r}: {file_name} is neither staged "
                        f"in {staged} nor in the query's input {landing}; plan the backfill again"
                    )
                source.rename(target)
            lines += count_lines(target)
    return lines


def feed_per_partition(spark: SparkSession, feed: PartitionFeed, todo: list[PlannedPartition]) -> None:
    """Feed `todo` to the job's own file-source query, an available-now run of it per partition.

    A bootstrap backfill runs this way: its checkpoint becomes the live job's savepoint
    (`ops.backfill.bootstrap`), so its sources must be the job's file sources, whose logs name
    the landing files read. It pays a query start and a state load per partition.
    """
    paths = feed.paths
    # One writer for every partition: building the plan (reading the schema, the transform and its
    # pandas function) cost about a second of each partition.
    writer = with_trigger(plan_job(feed.scratch, feed.spec), feed.spec, available_now=True)(spark)
    spark.conf.set(UNLOAD_ON_COMMIT, "true")
    last = feed.plan.partitions[-1].index
    for partition in todo:
        started = time.monotonic()
        lines = stage_partition(feed.run, paths, partition)
        first_batch = feed.first_batch(partition)
        spark.conf.set(NO_DATA_BATCHES, str(partition.index == last).lower())
        writer.start().awaitTermination()
        feed.finish(partition, first_batch, lines, started)
    # The input of the last partition is not needed any more: its batches committed.
    for landing in paths.landing.values():
        for present in landing.glob("*"):
            present.unlink()


def run_partitions(spark: SparkSession, platform: PlatformConfig, run: BackfillRun) -> list[PartitionDone]:
    """Feed every partition not yet done to the job's query, oldest first; the records of the run."""
    plan = run.read_plan()
    feed = PartitionFeed(
        run=run, plan=plan, spec=backfill_spec(run, plan), scratch=run.platform(platform), done=run.done()
    )
    todo = [partition for partition in plan.partitions if partition.index not in feed.done]
    if todo:
        (feed_per_partition if plan.bootstrap else feed_gated)(spark, feed, todo)
    records = [feed.done[index] for index in sorted(feed.done)]
    summary = {
        "partitions": len(records),
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
    spark = build_session(platform, spec)
    try:
        records = run_partitions(spark, platform, run)
    except ConfigError as exc:
        log.error("cannot plan the job's query", error=str(exc))
        push_task_outcome(platform.monitoring, BatchTask.BACKFILL, plan.job, succeeded=False)
        return EXIT_CONFIG_ERROR
    except Exception as exc:
        # The outermost loop: a failed batch, a partition that cannot be fed. What
        # completed stays recorded and a new attempt resumes after it.
        log.error("backfill failed", error_class=type(exc).__name__, error=str(exc).splitlines()[0])
        push_task_outcome(platform.monitoring, BatchTask.BACKFILL, plan.job, succeeded=False)
        return EXIT_QUERY_FAILED
    finally:
        spark.stop()
    log.info("backfill done", partitions=len(records), output_rows=sum(r.output_rows for r in records))
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
