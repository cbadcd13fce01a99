"""Where a job's recent micro-batches spent their time, and what to change about it.

Input: the job's recent progress records (Spark's `StreamingQueryProgress` JSON, as the driver keeps
them in its history, `ops.driver.history`) and its spec. Each batch's `durationMs` is split into
phases:

- listing: `latestOffset` (the source finds what is new: a directory listing for files);
- planning: `queryPlanning` + `getBatch` (the batch's plan and its input DataFrame);
- state: the time the stateful operators spent updating, removing and committing state, summed
  over their tasks (`allUpdatesTimeMs` + `allRemovalsTimeMs` + `commitTimeMs`) and divided by
  the tasks that can run at once (the job's cores), at most `addBatch`;
- execution: the rest of `addBatch`: reading the input, the transform and writing the sink;
- commit: `walCommit` + `commitOffsets` (the checkpoint's offset and commit logs);
- other: what `triggerExecution` holds besides.

The verdict is one bottleneck, checked in this order, each with the lever an operator has:
`idle` (no batches), `keeping_up` (batches end well within the trigger interval), `skewed_key`
(state work filled the batches' execution but ran on about one task at a time although the job
has more cores: one key holds most rows), `state` (state dominates, spread over the tasks: more
cores or state partitions), `batch_size` (a rate limit caps every batch at a few rows: the
per-batch fixed costs of listing, planning, scheduling and committing dominate), then the largest
phase (`listing`, `planning`, `execution`, `commit`).
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ops.spec.job import JobSpec

LOCAL_MASTER = re.compile(r"^local\[(\d+|\*)(?:,\s*\d+)?\]$")
PHASES = ("listing", "planning", "execution", "state", "commit", "other")
# The share of the batch time state must take to be the bottleneck.
STATE_DOMINANT_SHARE = 0.4
# State work summed over its tasks that reaches this share of the batches' execution (`addBatch`)
# filled it: with one key holding most rows (all rows of a key go to one task) that task runs for
# nearly the whole execution while the others idle. Spread over the tasks, the sum would reach
# `cores` times the execution instead; below `SKEW_PARALLELISM_SHARE * cores` it did not spread.
# A heuristic: on a machine so loaded that the cores do not run at once, state work that is most
# of a job's work looks the same.
STATE_FILLS_EXECUTION = 0.8
SKEW_PARALLELISM_SHARE = 0.65
# Batches that ended within this share of the trigger interval leave it time to spare.
KEEPING_UP_SHARE = 0.8
# Rows per second per core below which a rate-limited batch is all fixed costs: any Spark job
# parses, transforms and writes thousands of rows per second per core.
FIXED_COST_ROWS_PER_CORE_SECOND = 100.0
# Rate-limited batches are alike in size: within this share of the median.
UNIFORM_BATCH_SHARE = 0.1
# A phase share that grew by more than this (newest half of the batches against the oldest) is named.
GROWTH_WORTH_NAMING = 0.1


@dataclass(frozen=True)
class BatchTime:
    """One batch's time by phase, in milliseconds."""

    batch_id: int
    rows: int
    total_ms: int
    phases_ms: dict[str, int]


@dataclass(frozen=True)
class Diagnosis:
    bottleneck: str
    summary: str
    lever: str
    shares: dict[str, float] = field(default_factory=dict)
    growth: dict[str, float] = field(default_factory=dict)
    batches: list[BatchTime] = field(default_factory=list)


def batch_time(progress: Mapping[str, Any], cores: int) -> BatchTime:
    """The phases of one progress record."""
    durations = {key: int(value) for key, value in (progress.get("durationMs") or {}).items()}
    add_batch = durations.get("addBatch", 0)
    state_task_ms = sum(
        int(operator.get("allUpdatesTimeMs", 0))
        + int(operator.get("allRemovalsTimeMs", 0))
        + int(operator.get("commitTimeMs", 0))
        for operator in progress.get("stateOperators") or ()
    )
    state = min(add_batch, round(state_task_ms / max(1, cores)))
    phases = {
        "listing": durations.get("latestOffset", 0),
        "planning": durations.get("queryPlanning", 0) + durations.get("getBatch", 0),
        "execution": add_batch - state,
        "state": state,
        "commit": durations.get("walCommit", 0) + durations.get("commitOffsets", 0),
    }
    total = max(durations.get("triggerExecution", 0), sum(phases.values()))
    phases["other"] = total - sum(phases.values())
    return BatchTime(int(progress.get("batchId", -1)), int(progress.get("numInputRows") or 0), total, phases)


def _shares(batches: Sequence[BatchTime]) -> dict[str, float]:
    total = sum(batch.total_ms for batch in batches)
    if not total:
        return dict.fromkeys(PHASES, 0.0)
    return {phase: sum(batch.phases_ms[phase] for batch in batches) / total for phase in PHASES}


def _started(progress: Mapping[str, Any]) -> datetime:
    return datetime.fromisoformat(str(progress["timestamp"]).replace("Z", "+00:00"))


def busy_share(records: Sequence[Mapping[str, Any]]) -> float | None:
    """The share of the wall time between the first and the last batch's start that batches ran."""
    if len(records) < 2:
        return None
    span = (_started(records[-1]) - _started(records[0])).total_seconds() * 1000
    if span <= 0:
        return None
    busy = sum(int(record.get("batchDuration") or 0) for record in records[:-1])
    return min(1.0, busy / span)


def master_cores(master: str) -> int | None:
    """The cores a Spark master URL gives the driver: N for `local[N]`, 1 for `local`; None when
    the cluster decides (standalone, YARN, Kubernetes) or for `local[*]` (the host's cores)."""
    if master == "local":
        return 1
    match = LOCAL_MASTER.match(master)
    if match is None or match.group(1) == "*":
        return None
    return int(match.group(1))


def diagnose(
    records: Sequence[Mapping[str, Any]], spec: JobSpec | None, cores: int | None = None
) -> Diagnosis:
    """The bottleneck of the job's recent batches (`records`, oldest first) and its lever; `cores`
    defaults to the spec's master's (1 when it does not say)."""
    records = [record for record in records if int(record.get("numInputRows") or 0) > 0]
    # The first batch of a driver carries its start-up (JVM, code paths compiled): not a pattern.
    records = records[1:] if len(records) > 2 else records
    if not records:
        return Diagnosis("idle", "No batch with input in the recent history: nothing to diagnose.", "")
    master = spec.operations.resources.master if spec else None
    cores = cores or (master_cores(master) if master else None) or 1
    batches = [batch_time(record, cores) for record in records]
    shares = _shares(batches)
    half = len(batches) // 2
    older, newer = _shares(batches[:half]), _shares(batches[half:])
    growth = {phase: newer[phase] - older[phase] for phase in PHASES} if half else {}
    grown = max(growth, key=lambda phase: growth[phase]) if growth else None
    growth_note = (
        f" The {grown} share grew by {growth[grown] * 100:.0f} points over these batches."
        if grown and growth[grown] > GROWTH_WORTH_NAMING
        else ""
    )

    def verdict(bottleneck: str, summary: str, lever: str) -> Diagnosis:
        return Diagnosis(bottleneck, summary + growth_note, lever, shares, growth, batches)

    mean_ms = statistics.fmean(batch.total_ms for batch in batches)
    rows = [batch.rows for batch in batches]
    median_rows = statistics.median(rows)
    rows_per_core_second = sum(rows) / max(1.0, sum(b.total_ms for b in batches) / 1000) / cores
    busy = busy_share(records)
    interval_ms = spec.operations.trigger.interval_seconds * 1000 if spec else None
    described = f"{len(batches)} recent batches took {mean_ms / 1000:.1f} s each for {median_rows:.0f} rows"

    if (
        interval_ms
        and mean_ms <= KEEPING_UP_SHARE * interval_ms
        and (busy is None or busy < KEEPING_UP_SHARE)
    ):
        return verdict(
            "keeping_up",
            f"Keeping up: {described}, within the {interval_ms / 1000:g} s trigger interval.",
            "",
        )

    state_task_ms = sum(
        int(operator.get("allUpdatesTimeMs", 0)) + int(operator.get("allRemovalsTimeMs", 0))
        for record in records
        for operator in record.get("stateOperators") or ()
    )
    add_batch_ms = sum(int((record.get("durationMs") or {}).get("addBatch", 0)) for record in records)
    # Tasks busy with state at once, on average over the batches' execution.
    parallelism = state_task_ms / add_batch_ms if add_batch_ms else 0.0
    if shares["state"] >= STATE_DOMINANT_SHARE or parallelism >= STATE_FILLS_EXECUTION:
        if cores > 1 and STATE_FILLS_EXECUTION <= parallelism < SKEW_PARALLELISM_SHARE * cores:
            updated = statistics.median(
                sum(int(op.get("numRowsUpdated", 0)) for op in r.get("stateOperators") or ()) for r in records
            )
            return verdict(
                "skewed_key",
                f"State is the bottleneck and one key holds it up: {described}; state work filled the "
                f"batches' execution but ran on {parallelism:.1f} tasks at a time of {cores} cores "
                f"({median_rows:.0f} rows updated {updated:.0f} keys per batch), so one task carried "
                "most of it.",
                "a skewed key: find the key with most rows (the preview tap's newest records, or a "
                "count by key) and split it (salt it, or pre-aggregate it before the stateful step); "
                "more cores or state partitions do not help a single key",
            )
        return verdict(
            "state",
            f"State is the bottleneck: {described}, {shares['state'] * 100:.0f} % of it in the stateful "
            f"operators, spread over {parallelism:.1f} tasks at a time.",
            "cores (operations.resources.master) for more tasks at a time; a new job's state partitions "
            "(spark.sql.shuffle.partitions, fixed by the checkpoint) for smaller state per task",
        )

    limit = spec.operations.trigger.max_files_per_trigger if spec else None
    uniform = all(abs(count - median_rows) <= UNIFORM_BATCH_SHARE * median_rows for count in rows)
    if limit is not None and uniform and rows_per_core_second < FIXED_COST_ROWS_PER_CORE_SECOND:
        fixed = shares["listing"] + shares["planning"] + shares["commit"] + shares["other"]
        return verdict(
            "batch_size",
            f"Batches are too small: {described}, {rows_per_core_second:.0f} rows/s per core, because "
            f"max_files_per_trigger = {limit} caps each batch, so the fixed costs every batch pays "
            f"(listing, planning, a Spark job to schedule, commits; {fixed * 100:.0f} % of the time is "
            "spent outside addBatch) dominate.",
            f"batch size: raise operations.trigger.max_files_per_trigger (now {limit}) or remove it",
        )

    largest = max(("listing", "planning", "execution", "commit"), key=lambda phase: shares[phase])
    levers = {
        "listing": "the source's listing: fewer files in the landing directory (archive read ones) or a "
        "larger batch size so each listing pays for more rows",
        "planning": "planning: a larger batch size so each plan pays for more rows, or a simpler plan",
        "execution": "cores (operations.resources.master): reading, transforming and writing the input "
        "take the time",
        "commit": "the checkpoint store: its log writes are slow (a local disk, or fewer, larger batches)",
    }
    return verdict(
        largest,
        f"{largest.capitalize()} takes the most time: {described}, {shares[largest] * 100:.0f} % of it in "
        f"{largest}.",
        levers[largest],
    )
