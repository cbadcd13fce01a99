"""Run a planned backfill's Spark application and check the output it staged.

`warden backfill` runs the application (`jobs.backfill`) as a child process and draws its
progress from the run directory (a bar over the partitions, with rows/s and the ETA); the
`warden_backfill` DAG submits the same application with the Spark provider's
`SparkSubmitOperator` (`submit_arguments`). Either way the run is checked by `verify_output`: every
file the staged sink's log lists is there and the rows per partition add up; then `publish_output`
runs the publish application (`ops.warehouse.publish`), which takes the staged output through
the quality gate into the warehouse table, or diffs a candidate's against it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pyarrow.parquet as pq
from botocore.client import BaseClient

from ops import progress
from ops.backfill.plan import BackfillRequest, fetch_partitions, plan_backfill, prepare_run
from ops.backfill.submit import (
    APPLICATION_MODULE,
    PUBLISH_MODULE,
    REPO_ROOT,
    application_env,
    submit_arguments,
)
from ops.driver.backfill import BackfillPlan, BackfillRun, BatchDone
from ops.driver.checkpoint import sink_files
from ops.exceptions import BackfillError
from ops.spec.job import find_job, load_job
from ops.spec.paths import JobPaths
from ops.spec.platform import PlatformConfig

POLL_SECONDS = 0.5
LOG_TAIL_LINES = 15


def _status(
    plan: BackfillPlan, records: list[BatchDone], since_start: list[BatchDone], elapsed: float
) -> str:
    """Batches done, rows, the rate since this attempt started, and the time left at that rate
    (by the bytes left, since batches differ in size)."""
    rate = sum(record.input_rows for record in since_start) / elapsed if elapsed > 0 else 0.0
    done = {record.index for record in records}
    left = sum(batch.bytes for batch in plan.batches if batch.index not in done)
    read = sum(plan.batches[record.index].bytes for record in since_start)
    eta = f"ETA {left * elapsed / read:,.0f} s" if read else "ETA unknown"
    rows = sum(record.input_rows for record in records)
    return f"{len(records)}/{len(plan.batches)} batches, {rows:,} rows, {rate:,.0f} rows/s, {eta}"


def run_application(platform: PlatformConfig, run: BackfillRun, plan: BackfillPlan) -> list[BatchDone]:
    """Run the Spark application to the end of the plan, showing progress (a bar over the
    partitions, advanced as the feed batches that complete them commit); the batches done.

    BackfillError (with the end of the application's log) when it fails; what it completed stays
    recorded, so running it again resumes.
    """
    log_path = run.root / "application.log"
    before = set(run.done())
    started = time.monotonic()
    with (
        log_path.open("ab") as log_file,
        progress.track(f"backfill {plan.job}", total=len(plan.partitions), unit="partitions") as task,
    ):
        shown = len(run.partitions_done())
        task.advance(shown)
        process = subprocess.Popen(
            [sys.executable, "-m", APPLICATION_MODULE, *submit_arguments(run)],
            cwd=REPO_ROOT,
            env={**os.environ, **application_env(platform.conf_dir)},
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
        while True:
            ended = process.poll() is not None
            done = run.done()
            records = [done[index] for index in sorted(done)]
            partitions = sum(len(record.partitions) for record in records)
            if partitions > shown:
                task.advance(partitions - shown)
                shown = partitions
                fresh = [record for record in records if record.index not in before]
                task.status(_status(plan, records, fresh, time.monotonic() - started))
            if ended:
                break
            time.sleep(POLL_SECONDS)
    if process.returncode != 0:
        tail = log_path.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
        raise BackfillError(
            f"the backfill application of {plan.job!r} exited {process.returncode} after "
            f"{shown} of {len(plan.partitions)} partitions (run it again to resume); "
            f"the end of {log_path}:\n" + "\n".join(tail)
        )
    return records


@dataclass(frozen=True)
class StagedOutput:
    """A finished run's staged output, checked: rows per feed batch and per sink partition."""

    run: BackfillRun
    sink: Path
    batches: tuple[BatchDone, ...]
    rows_by_target: dict[str, int]

    @property
    def rows(self) -> int:
        return sum(self.rows_by_target.values())


def verify_output(platform: PlatformConfig, run: BackfillRun) -> StagedOutput:
    """Check a finished run's staged sink: complete, every listed file there, rows adding up."""
    plan = run.read_plan()
    if not run.is_complete():
        raise BackfillError(
            f"backfill {plan.run_id} has not finished: {len(run.partitions_done())} of "
            f"{len(plan.partitions)} partitions done"
        )
    spec = load_job(run.spec_file(plan.job))
    paths = JobPaths.of(run.platform(platform), spec)
    files = sink_files(paths.sink_log)
    missing = sorted(path for path in files if not path.is_file())
    if missing:
        raise BackfillError(
            f"the staged output of {plan.run_id} lists {len(missing)} files that are gone, e.g. {missing[0]}"
        )
    by_target: Counter[str] = Counter()
    for path in files:
        by_target[str(path.parent.relative_to(paths.sink))] += pq.ParquetFile(path).metadata.num_rows
    done = run.done()
    records = tuple(done[index] for index in sorted(done))
    if sum(by_target.values()) != sum(record.output_rows for record in records):
        raise BackfillError(
            f"the staged output of {plan.run_id} holds {sum(by_target.values()):,} rows, its batches "
            f"recorded {sum(record.output_rows for record in records):,}"
        )
    return StagedOutput(run, paths.sink, records, dict(sorted(by_target.items())))


def report_lines(plan: BackfillPlan, output: StagedOutput) -> list[str]:
    """One line per feed batch (its arrival hours, query batches, rows, time), then the staged output."""
    lines = []
    for record in output.batches:
        batch = plan.batches[record.index]
        rate = f"{record.input_rows / record.seconds:,.0f} rows/s" if record.seconds else ""
        lines.append(
            f"{batch.describe(plan.partitions)}  {batch.bytes:,} bytes  query batches "
            f"{record.first_batch}..{record.last_batch}  {record.input_rows:,} rows in  "
            f"{record.output_rows:,} rows out  {record.seconds:.1f} s  {rate}"
        )
    lines.append(
        f"staged: {output.rows:,} rows in {len(output.rows_by_target)} sink partitions under {output.sink}"
    )
    return lines


def prepare_backfill(
    platform: PlatformConfig, request: BackfillRequest, now: datetime, client: BaseClient | None = None
) -> tuple[BackfillRun, BackfillPlan]:
    """Plan `request` and stage its partitions (or keep a killed run's, to resume it)."""
    run, plan, spec_bytes = plan_backfill(platform, request, now, client)
    prepare_run(run, plan, spec_bytes)
    fetch_partitions(platform, run, plan, client)
    return run, plan


def run_backfill(
    platform: PlatformConfig, request: BackfillRequest, now: datetime, client: BaseClient | None = None
) -> tuple[BackfillPlan, StagedOutput]:
    """Plan `request`, stage its partitions, run (or resume) the application and check its output."""
    run, plan = prepare_backfill(platform, request, now, client)
    run_application(platform, run, plan)
    return plan, verify_output(platform, run)


def publishes(platform: PlatformConfig, plan: BackfillPlan) -> bool:
    """Whether the run ends in the warehouse table: a candidate's is diffed with it, and a job
    without a table (no `operations.compaction`) ends at its staged output."""
    return plan.candidate or find_job(plan.job, platform.conf_dir).operations.compaction is not None


def publish_output(platform: PlatformConfig, run: BackfillRun, plan: BackfillPlan) -> None:
    """Run the publish application on a finished, verified run (`run.published_file`, or a
    candidate's `run.diff_file`, holds the outcome). BackfillError, with the end of its log, when it
    fails; a gate that blocked is an outcome, not a failure (`publication_lines` says so)."""
    log_path = run.root / "publish.log"
    with log_path.open("ab") as log_file:
        finished = subprocess.run(
            [sys.executable, "-m", PUBLISH_MODULE, *submit_arguments(run)],
            cwd=REPO_ROOT,
            env={**os.environ, **application_env(platform.conf_dir)},
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            check=False,
        )
    if finished.returncode != 0:
        tail = log_path.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
        raise BackfillError(
            f"publishing backfill {plan.run_id} exited {finished.returncode} (run it again: the "
            f"warehouse table keeps what it showed); the end of {log_path}:\n" + "\n".join(tail)
        )


def publication_lines(run: BackfillRun) -> tuple[list[str], bool]:
    """What the publish did, a line per target partition; and whether its gate blocked it."""
    if not run.published_file.is_file():
        return [], False
    document = json.loads(run.published_file.read_text())
    lines = [
        f"{entry['partition']}  v{entry['version']} {entry['status']}  {entry['rows']:,} rows"
        + ("" if entry["rows_before"] is None else f" (before {entry['rows_before']:,})")
        for entry in document["partitions"]
    ]
    blocked = document["status"] != "published"
    if blocked:
        lines.append(f"{document['table']}: NOTHING PUBLISHED, the quality gate blocked the backfill:")
        lines += [f"  {reason}" for reason in document["blocked"]]
    else:
        lines.append(f"{document['table']}: {len(document['partitions'])} partitions published")
    if document["left_out"]:
        lines.append(f"left out (no event time, never published): {', '.join(document['left_out'])}")
    if document["withheld"]:
        lines.append(
            "withheld (other arrival hours feed them too; a wider range recomputes them whole): "
            + ", ".join(document["withheld"])
        )
    return lines, blocked
