"""Restate: rewind a job to a savepoint and let the current code replay the later batches, then report.

A restatement is a recovery operation (`restate`) that the supervisor's reconcile loop carries out
step by step (`ops.control.policy` has the state machine): stop the driver, rewind, let the driver
replay the queue, and once the queue is empty and the last replayed batch is committed, write the
summary (batches, rows before and after, the script UDF versions the replay ran) to the ledger
and Slack. `restate` records the request and runs reconcile passes until the loop has finished
it; if that process dies, any later pass (the job's supervision DAG, `warden reconcile JOB`)
finishes it. `restate` then republishes the warehouse partitions the replay changed
(`republish_restated`); if it died first, the nightly compaction does, since their committed
files no longer match their published versions.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

import pyarrow.parquet as pq

from ops.driver.checkpoint import log_entries, query_id, sink_files
from ops.driver.udf_versions import previous_decision
from ops.exceptions import RewindError
from ops.ledger.store import Ledger
from ops.recovery.loop import ControlLoop
from ops.recovery.rewind import request_operation
from ops.spec.job import find_job
from ops.spec.paths import JobPaths
from ops.spec.platform import CONF_DIR_ENV, PlatformConfig
from ops.warehouse.sinklog import changed_since_published

# The compaction entry point a restatement runs (as a process: ops never imports jobs).
COMPACTION_MODULE = "ops.warehouse.compaction"
REPUBLISH_ACTION = "republish"


@dataclass(frozen=True)
class Restatement:
    """What a restatement changed: the batches recomputed and the rows they hold before and after."""

    job: str
    savepoint_id: str
    batch_id: int
    last_batch: int
    rows_before: int
    rows_after: int
    # The script UDF versions the replay ran: those installed when it ran (`ops.driver.udf_versions`).
    udf_versions: dict[str, str] = field(default_factory=dict)

    def summary(self) -> str:
        batches = range(self.batch_id + 1, self.last_batch + 1)
        span = f"batches {batches.start}..{batches.stop - 1}" if batches else "no batches"
        udfs = ", ".join(f"{name} {version}" for name, version in sorted(self.udf_versions.items()))
        return (
            f"restated {self.job} from savepoint {self.savepoint_id} (batch {self.batch_id}): "
            f"{span} recomputed; rows {self.rows_before:,} before, {self.rows_after:,} after"
            + (f"; script UDFs as installed now: {udfs}" if udfs else "")
        )


def replayed_udf_versions(platform: PlatformConfig, job: str, upto: int) -> dict[str, str]:
    """The script UDF versions the job's newest batch up to `upto` that called one ran."""
    paths = JobPaths.of(platform, find_job(job, platform.conf_dir))
    query = query_id(paths.checkpoint)
    decision = None if query is None else previous_decision(paths.udf_versions, query, upto + 1)
    return {} if decision is None else decision.versions


def last_commit(platform: PlatformConfig, job: str) -> int:
    """The job's highest committed batch, -1 before the first."""
    paths = JobPaths.of(platform, find_job(job, platform.conf_dir))
    return max(log_entries(paths.commits), default=-1)


def rows_written(platform: PlatformConfig, job: str, after: int, upto: int) -> int:
    """Rows in the sink files the job's batches `after` < id <= `upto` committed."""
    sink_log = JobPaths.of(platform, find_job(job, platform.conf_dir)).sink_log
    files = sink_files(sink_log, upto) - sink_files(sink_log, after)
    return sum(pq.ParquetFile(path).metadata.num_rows for path in files)


def restate(
    supervisor: ControlLoop,
    job: str,
    *,
    reason: str,
    savepoint_id: str | None = None,
    before: datetime | None = None,
    timeout: float = 1800.0,
    progress: Callable[[str], None] | None = None,
    republish: bool = True,
) -> str:
    """Restate `job` from a savepoint (by id, or the newest taken before `before`); the summary.

    The request is checked first (`preflight`: no other operation is open, the savepoint exists,
    is this job's and can be read, the replay can be exact), then recorded; a refusal is a
    `refused` decision row and a RewindError naming every cause, with the job left as it was. The
    reconcile passes run here (or after this process dies, by anyone) check it again, and only
    then stop the driver, rewind, replay and report; the rewind sets the job's desired state to
    running, since a restatement ends with the job running its replayed output. RewindError when
    the loop refused it, or when the replay has not finished within `timeout` seconds (the loop
    keeps at it and reports when it has). Then `republish_restated`, unless `republish` is False
    (the `warden_restate` DAG submits that Spark work as a task of its own).
    """
    operation, _ = request_operation(
        supervisor, job, "restate", reason=reason, savepoint_id=savepoint_id, before=before
    )
    ended = supervisor.await_operation(operation.id, timeout=timeout, progress=progress)
    if ended.finished_at is None:
        queued = log_entries(
            JobPaths.of(supervisor.platform, find_job(job, supervisor.platform.conf_dir)).replay
        )
        raise RewindError(
            f"restatement of {job!r} not finished within {timeout:g}s (step {ended.step}, "
            f"{len(queued)} batches still queued for replay); the supervisor keeps at it"
        )
    if ended.failure is not None:
        raise RewindError(ended.failure)
    assert ended.outcome is not None
    if not republish:
        return ended.outcome
    republished = republish_restated(supervisor.platform, supervisor.ledger, job, reason=reason)
    return ended.outcome if republished is None else f"{ended.outcome}\n{republished}"


@dataclass(frozen=True)
class Republish:
    """The warehouse partitions a finished restatement changed (`changed`: to compact again;
    `emptied`: every row removed) and the `republish` decision row that reports them."""

    job: str
    table: str
    decision: int
    changed: tuple[str, ...]
    emptied: tuple[str, ...]

    def compaction_args(self) -> list[str]:
        """The compaction entry point's arguments: exactly the changed partitions, as a
        restatement's versions."""
        partitions = [arg for key in self.changed for arg in ("--partition", key)]
        return ["--job", self.job, "--source", "restatement", *partitions]


def plan_republish(platform: PlatformConfig, ledger: Ledger, job: str, *, reason: str) -> Republish | None:
    """The partitions a finished restatement changed, with a `republish` decision row recorded for
    them; None for a job without compaction or with nothing published that changed.

    Those are the published partitions whose committed files differ from what their version was
    made from (`changed_since_published`): every partition a replayed batch wrote, none other."""
    spec = find_job(job, platform.conf_dir)
    if spec.operations.compaction is None:
        return None
    changed, emptied = changed_since_published(ledger, job, JobPaths.of(platform, spec).sink)
    if not changed and not emptied:
        return None
    decision = ledger.record_decision(
        job, REPUBLISH_ACTION, reason, {"partitions": changed, "emptied": emptied}
    )
    return Republish(job, f"{platform.warehouse.database}.{job}", decision, tuple(changed), tuple(emptied))


def republish_failed(ledger: Ledger, plan: Republish, cause: str) -> RewindError:
    """Record on the decision row that the compaction of `plan` failed; the error to raise."""
    failure = (
        f"restated, but republishing {len(plan.changed)} partitions of {plan.table} failed "
        f"({cause}; the nightly compaction retries them)"
    )
    ledger.set_outcome(plan.decision, f"failed: {failure}")
    return RewindError(failure)


def republished(ledger: Ledger, plan: Republish) -> str:
    """Record on the decision row what `plan`'s compaction published: one line per partition
    (version, rows before -> after); the emptied ones are named and left as they are."""
    lines = [_version_line(ledger, plan.job, key) for key in plan.changed]
    lines += [
        f"{key}: every row removed, not republished (the table keeps its published version)"
        for key in plan.emptied
    ]
    text = f"republished {len(plan.changed)} partitions of {plan.table}: " + "; ".join(lines)
    ledger.set_outcome(plan.decision, text)
    return text


def republish_restated(platform: PlatformConfig, ledger: Ledger, job: str, *, reason: str) -> str | None:
    """Compact again the warehouse partitions a finished restatement changed (`plan_republish`);
    what it republished, None when nothing changed.

    The compaction entry point runs as its own local Spark process on the platform's master
    (write, audit, publish, under the table lock), its versions' source "restatement"; Slack hears
    it from the compaction (`warehouse_republished`). The `warden_restate` DAG submits the same
    work through SparkSubmitOperator instead (its `republish` task). A partition the restatement
    emptied cannot be compacted: the line says so, and the table keeps its version until an
    operator rolls it back or drops it. RewindError when the compaction fails: the restatement
    stands, and the nightly run republishes what is left.
    """
    plan = plan_republish(platform, ledger, job, reason=reason)
    if plan is None:
        return None
    if plan.changed:
        compaction = subprocess.run(
            [sys.executable, "-m", COMPACTION_MODULE, *plan.compaction_args()],
            env={**os.environ, CONF_DIR_ENV: str(platform.conf_dir), "PYSPARK_PYTHON": sys.executable},
            capture_output=True,
            text=True,
            check=False,
        )
        if compaction.returncode != 0:
            last_line = (compaction.stderr.strip().splitlines() or [""])[-1]
            raise republish_failed(ledger, plan, f"exit {compaction.returncode}: {last_line}")
    return republished(ledger, plan)


def _version_line(ledger: Ledger, job: str, key: str) -> str:
    newest = ledger.partition_versions(job, key)[0]
    before = "-" if newest.rows_before is None else f"{newest.rows_before:,}"
    after = "-" if newest.output_rows is None else f"{newest.output_rows:,}"
    return f"{key} v{newest.version} {newest.status}, rows {before} -> {after}"
