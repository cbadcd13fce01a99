"""The autoscaler's pure policy: how many cores a streaming job should have (docs/architecture.md §6).

Spark's dynamic allocation is not streaming-aware, so the platform sizes a job itself, after the
Flink Kubernetes Operator's autoscaler, adapted to micro-batches:

    batch time  = fixed + rows / per-row rate        (fitted over the window's batches)
    target rate = arrival rate + backlog / catch-up  (what the job must process to drain in time)
    fixed share = fixed * batches per second          (whatever the cores)
    new cores   = ceil(cores * target rate / (per-row rate * (target utilization - fixed share))),
                  bounded

A batch's duration is a fixed part (planning, the commit, the sink's per-batch work: the same
for 10 rows as for 10,000) plus a per-row part, fitted by least squares over the window's batches
(`BatchCost`). Only the per-row part shrinks with more cores: the fixed part takes its share of the
time whatever the cores (`fixed / trigger` for a job with a backlog, which runs a batch every
trigger; less for one whose input arrives less often), and the per-row part must fit in what the
target utilization leaves. A job whose fixed part alone exceeds the target utilization is not
given more cores (they would not shorten it; the decision says so). Without a fixed part this is
the Flink autoscaler's `true rate = rows / busy time`; a window whose batches all had the same
size cannot tell the two parts apart and counts all of it per row.

The bounds are the policy's min/max cores and its max factor per step. Guardrails against the
failures users of other scalers report (rescaling all day, scaling down mid-backlog, restarts
that cost more than they gain) each block a change and say so in the decision:

- **stabilization**: no decision from less than a full metrics window, none within a window of
  the last rescale (the restart itself distorts the rates);
- **no scale-down while a backlog drains**, and none before a lower recommendation has held for
  the scale-down delay;
- **ineffective scaling**: a scale-up that did not raise the true rate by at least a tenth of what
  it promised blocks further scale-ups (more cores are not the lever: skew, the source, the sink);
- **restart cost**: a rescale stops the job for its measured cost (stop -> next committed batch);
  a job that would drain its backlog anyway rescales only if that drains it sooner.

`decide_scale` sees only values; the reconcile loop measures (`LoadWindow.from_samples`), records
the decision with its numbers in the ledger (`ScalingDecision.inputs`) and, in `apply` mode,
rescales. The batch size (`max_files_per_trigger`) scales with the cores, so a bigger driver also
reads bigger batches.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ops.driver.telemetry import BatchSample
from ops.spec.job import AutoscalingPolicy

# A scale-up must deliver at least this share of the true-rate gain it promised (cores ratio - 1).
INEFFECTIVE_GAIN_SHARE = 0.1
# Below this many rows waiting, a backlog counts as drained.
DRAINED_BACKLOG_ROWS = 1.0


# The fit separates fixed from per-row cost only over at least this many batches whose largest
# read this many times the rows of the smallest; otherwise all of a batch's time counts per row.
FIT_MIN_BATCHES = 3
FIT_MIN_SPREAD = 1.5


@dataclass(frozen=True)
class BatchCost:
    """A batch's duration as a fixed part plus a per-row part."""

    fixed_seconds: float
    seconds_per_row: float

    @classmethod
    def fit(cls, batches: Sequence[tuple[int, float]]) -> BatchCost:
        """Least squares over (rows, seconds) of batches that read rows, both parts kept >= 0."""
        read = [(rows, seconds) for rows, seconds in batches if rows > 0]
        rows_total, seconds_total = sum(r for r, _ in read), sum(s for _, s in read)
        through_origin = cls(0.0, seconds_total / rows_total if rows_total else 0.0)
        smallest, largest = min((r for r, _ in read), default=0), max((r for r, _ in read), default=0)
        if len(read) < FIT_MIN_BATCHES or largest < FIT_MIN_SPREAD * smallest:
            return through_origin
        mean_rows, mean_seconds = rows_total / len(read), seconds_total / len(read)
        covariance = sum((r - mean_rows) * (s - mean_seconds) for r, s in read)
        variance = sum((r - mean_rows) ** 2 for r, _ in read)
        slope = covariance / variance
        if slope <= 0:
            # Larger batches took no longer: all of it is fixed cost.
            return cls(mean_seconds, 0.0)
        fixed = mean_seconds - slope * mean_rows
        return cls(fixed, slope) if fixed > 0 else through_origin

    def describe(self) -> str:
        return f"{self.fixed_seconds:.2f} s + {self.seconds_per_row * 1000:.3f} ms/row"


@dataclass(frozen=True)
class LoadWindow:
    """What a job did over the window a decision looks at; `cost` is its batches' fitted cost
    (a window built without one counts all of its busy time per row) and `interval_seconds` its
    trigger interval."""

    seconds: float
    rows: int
    busy_seconds: float
    backlog_start_rows: float
    backlog_end_rows: float
    cost: BatchCost | None = None
    interval_seconds: float | None = None
    batches: int = 0

    @classmethod
    def from_samples(
        cls,
        samples: Sequence[BatchSample],
        interval_seconds: float,
        rows_per_backlog_file: float,
    ) -> LoadWindow:
        """The window the heartbeat's recent batches cover.

        A micro-batch starts every trigger interval, or when the previous one ends if it ran
        longer, so the last batch covers max(duration, interval) of wall time, and each one before
        it the time to the next batch's start. A trigger that finds no new input runs no batch and
        leaves no sample, so the gaps between starts count that idle time: summing every sample's
        max(duration, interval) instead would leave it out and overstate the arrival rate (a job
        reading a file every 4 s with a 2 s trigger would look twice as loaded as it is). Samples
        without start times (older drivers) fall back to that sum. Backlogs are counted in files
        by the health pass; `rows_per_backlog_file` converts them to rows.
        """
        backlogs = [sample.backlog_files for sample in samples if sample.backlog_files is not None]
        covered = [max(sample.duration_ms / 1000, interval_seconds) for sample in samples]
        starts = [sample.started_at for sample in samples]
        if samples and all(start is not None for start in starts):
            first, last = starts[0], starts[-1]
            assert first is not None and last is not None
            seconds = max(last - first, 0.0) + covered[-1]
        else:
            seconds = sum(covered)
        return cls(
            seconds=seconds,
            rows=sum(sample.num_input_rows for sample in samples),
            busy_seconds=sum(sample.duration_ms for sample in samples) / 1000,
            backlog_start_rows=(backlogs[0] if backlogs else 0) * rows_per_backlog_file,
            backlog_end_rows=(backlogs[-1] if backlogs else 0) * rows_per_backlog_file,
            cost=BatchCost.fit([(sample.num_input_rows, sample.duration_ms / 1000) for sample in samples]),
            interval_seconds=interval_seconds,
            batches=len(samples),
        )

    @property
    def backlog_growth(self) -> float:
        """Rows per second the backlog grew by (negative while it drains)."""
        return (self.backlog_end_rows - self.backlog_start_rows) / self.seconds if self.seconds else 0.0

    @property
    def arrival_rate(self) -> float:
        """Rows per second arriving: what was read plus what piled up (Spark reports only the former)."""
        return max(0.0, self.rows / self.seconds + self.backlog_growth) if self.seconds else 0.0

    @property
    def true_rate(self) -> float:
        """Rows the current cores process per busy second (0 when nothing was read)."""
        return self.rows / self.busy_seconds if self.busy_seconds else 0.0

    @property
    def per_row_rate(self) -> float:
        """Rows the current cores process per second of per-row work (the true rate without the
        batches' fixed part; 0 when nothing was read)."""
        if self.cost is None:
            return self.true_rate
        return 1 / self.cost.seconds_per_row if self.cost.seconds_per_row > 0 else math.inf

    @property
    def fixed_share(self) -> float:
        """The share of the wall time the batches' fixed part takes, whatever the cores: the fixed
        part times the batches a second. A job with a backlog runs a batch every trigger; one
        without runs one only when input arrived (a trigger that finds none runs no batch), as
        often as the window's batches came, at most every trigger."""
        if self.cost is None or not self.interval_seconds or not self.seconds:
            return 0.0
        per_trigger = 1 / self.interval_seconds
        behind = self.backlog_end_rows >= DRAINED_BACKLOG_ROWS
        cadence = per_trigger if behind else min(per_trigger, self.batches / self.seconds)
        return self.cost.fixed_seconds * cadence


@dataclass(frozen=True)
class LastRescale:
    """The job's previous rescale, as the ledger recorded it (`applied`: carried out, not
    abandoned before its stop; either one spaces the next by the stabilization window)."""

    at: float
    from_cores: int
    to_cores: int
    true_rate_before: float
    applied: bool = True


@dataclass(frozen=True)
class ScalingDecision:
    """What the autoscaler recommends and whether it may be applied; `blocked_by` says why not."""

    cores: int
    recommended: int
    max_files_per_trigger: int | None
    blocked_by: str | None
    inputs: dict[str, Any]

    @property
    def changes(self) -> bool:
        return self.recommended != self.cores and self.blocked_by is None


def decide_scale(
    policy: AutoscalingPolicy,
    *,
    cores: int,
    window: LoadWindow,
    now: float,
    last: LastRescale | None,
    low_since: float | None,
    max_files_per_trigger: int | None,
    restart_cost_seconds: float | None,
) -> ScalingDecision:
    """The cores the job should run with, from one window of its load.

    `low_since` is when the recommendation first fell below `cores` without rising since (the
    caller keeps it from the previous decisions), for the scale-down delay. `restart_cost_seconds`
    is the job's measured stop -> next committed batch (None before the first measurement).
    """
    target_rate = window.arrival_rate + window.backlog_end_rows / policy.catch_up_seconds
    headroom = policy.target_utilization - window.fixed_share
    capacity_rate = window.per_row_rate * headroom
    # No headroom: the fixed part alone fills the target (more cores would not shorten it); no
    # capacity: nothing was read. Either way the cores stay.
    fits = headroom > 0 and capacity_rate > 0
    wanted = math.ceil(cores * target_rate / capacity_rate) if fits else cores
    step_up = math.floor(cores * policy.max_factor_per_step)
    step_down = math.ceil(cores / policy.max_factor_per_step)
    recommended = max(policy.min_cores, min(policy.max_cores, step_up, max(step_down, wanted)))
    blocked_by = _guard(policy, cores, recommended, window, now, last, low_since, restart_cost_seconds)
    inputs = {
        "cores": cores,
        "window_seconds": round(window.seconds, 3),
        "rows": window.rows,
        "busy_seconds": round(window.busy_seconds, 3),
        "arrival_rate": round(window.arrival_rate, 3),
        "true_rate": round(window.true_rate, 3),
        "backlog_rows": round(window.backlog_end_rows, 1),
        "backlog_growth": round(window.backlog_growth, 3),
        "target_rate": round(target_rate, 3),
        "batch_cost": window.cost.describe() if window.cost is not None else None,
        "fixed_share": round(window.fixed_share, 3),
        "per_row_rate": round(window.per_row_rate, 3),
        "restart_cost_seconds": restart_cost_seconds,
        "formula": _formula(policy, cores, target_rate, window, wanted, recommended),
    }
    return ScalingDecision(
        cores=cores,
        recommended=recommended,
        max_files_per_trigger=_scaled_batch(max_files_per_trigger, cores, recommended),
        blocked_by=blocked_by,
        inputs=inputs,
    )


def _formula(
    policy: AutoscalingPolicy,
    cores: int,
    target_rate: float,
    window: LoadWindow,
    wanted: int,
    recommended: int,
) -> str:
    """The sizing with its numbers, as the decision row and `warden decisions` show it."""
    utilization, fixed = policy.target_utilization, window.fixed_share
    if not math.isfinite(window.per_row_rate):
        return (
            f"the batches took no longer for more rows ({window.cost.describe() if window.cost else ''}): "
            f"no per-row work for more cores to share; {wanted}, bounded to {recommended}"
        )
    if fixed >= utilization:
        return (
            f"the fixed part of a batch ({window.cost.describe() if window.cost else ''}) takes {fixed:.2f} "
            f"of the time, above the {utilization:g} target: more cores would not shorten it; "
            f"{wanted}, bounded to {recommended}"
        )
    headroom = f"{utilization:g}" if fixed == 0 else f"({utilization:g} - {fixed:.2f} fixed)"
    return (
        f"ceil({cores} x {target_rate:.1f} / ({window.per_row_rate:.1f} x {headroom})) = {wanted}, "
        f"bounded to {recommended}"
    )


def _guard(
    policy: AutoscalingPolicy,
    cores: int,
    recommended: int,
    window: LoadWindow,
    now: float,
    last: LastRescale | None,
    low_since: float | None,
    restart_cost_seconds: float | None,
) -> str | None:
    """Why the recommendation may not be applied now, or None."""
    if window.seconds < policy.stabilization_seconds:
        return (
            f"stabilization: {window.seconds:.0f} s of metrics, a decision needs "
            f"{policy.stabilization_seconds:g} s"
        )
    if last is not None and now - last.at < policy.stabilization_seconds:
        return f"stabilization: the last rescale was {now - last.at:.0f} s ago"
    if recommended > cores:
        return _ineffective(window, last) or _not_worth_a_restart(
            cores, recommended, window, restart_cost_seconds
        )
    if recommended < cores:
        if window.backlog_end_rows >= DRAINED_BACKLOG_ROWS:
            return f"backlog: {window.backlog_end_rows:.0f} rows still draining"
        held = now - low_since if low_since is not None else 0.0
        if held < policy.scale_down_delay_seconds:
            return (
                f"scale-down delay: lower for {held:.0f} s of the "
                f"{policy.scale_down_delay_seconds:g} s it must hold"
            )
    return None


def _ineffective(window: LoadWindow, last: LastRescale | None) -> str | None:
    """Why the previous scale-up counts as ineffective, or None."""
    if last is None or not last.applied or last.to_cores <= last.from_cores or last.true_rate_before <= 0:
        return None
    promised = last.to_cores / last.from_cores - 1
    delivered = window.true_rate / last.true_rate_before - 1
    if delivered >= INEFFECTIVE_GAIN_SHARE * promised:
        return None
    return (
        f"ineffective scaling: {last.from_cores} -> {last.to_cores} cores moved the true rate from "
        f"{last.true_rate_before:.0f} to {window.true_rate:.0f} rows/s"
    )


def _not_worth_a_restart(
    cores: int, recommended: int, window: LoadWindow, restart_cost_seconds: float | None
) -> str | None:
    """Why a scale-up saves less time than its restart costs, or None.

    Only a job that would drain its backlog anyway can lose by rescaling: it compares the drain
    time as is with the restart's downtime plus the drain at the new rate of the backlog, grown
    by what arrives meanwhile. A job that cannot keep up, or has no backlog (the scale-up buys the
    headroom the target utilization asks for), rescales. Throughput is taken to scale with cores.
    """
    backlog, arrival, rate = window.backlog_end_rows, window.arrival_rate, window.true_rate
    if restart_cost_seconds is None or backlog < DRAINED_BACKLOG_ROWS or rate <= arrival:
        return None
    as_is = backlog / (rate - arrival)
    rescaled_rate = rate * recommended / cores
    rescaled = restart_cost_seconds + (backlog + arrival * restart_cost_seconds) / (rescaled_rate - arrival)
    if rescaled < as_is:
        return None
    return (
        f"restart cost: the backlog drains in {as_is:.0f} s as is, {rescaled:.0f} s with a "
        f"{recommended}-core restart ({restart_cost_seconds:.0f} s down)"
    )


def _scaled_batch(max_files: int | None, cores: int, recommended: int) -> int | None:
    """The batch-size limit for `recommended` cores, in proportion to the current one."""
    if max_files is None:
        return None
    return max(1, round(max_files * recommended / cores))
