"""A job's scale: the cores and batch size it should run with, and what the autoscaler looks at.

The scale in force is the ledger's (`jobs.scale_*`), set by the autoscaler in `apply` mode or
pinned by an operator (`warden scale JOB --cores N`, the `warden_scale` form) until released
(`--auto`); otherwise it is the spec's `resources.cores` and `trigger.max_files_per_trigger` as
written. Each run records the scale it was launched with, so the reconcile loop sees a job that
runs at another scale than it should and rescales it (`ops.control.policy`, state SCALING): its
successor at the new scale starts as a warm standby beside it, then the old driver stops at a batch
boundary and the standby takes over the same checkpoint (Spark fixes the shuffle and state
partitions there; cores and batch-size limits may change on restart), so the job is down only for
the stop, the grant and a warm first batch, not for a cold start.

`ScalingView` is the autoscaler's observation, read by the supervisor's observe step: the load
window of the running driver's recent batches (`ops.control.autoscaler.LoadWindow`), the previous
rescale and the restart cost it measured, and the newest recommendation recorded (so an unchanged
one is not written again on every pass).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from ops.control.autoscaler import LastRescale, LoadWindow
from ops.driver.telemetry import Heartbeat
from ops.ledger.records import DecisionRecord, JobRecord, OperationRecord, RunRecord
from ops.ledger.store import Ledger
from ops.spec.job import JobSpec
from ops.states import OperationKind

# Operation kind of a rescale, and the decision rows of recommendations not applied.
RESCALE = str(OperationKind.SCALE)
RECOMMENDATION = "scale_recommendation"
# How the outcome of a rescale carried out begins (others were abandoned before their stop).
RESCALED = "rescaled"
# How many of the newest landing files are read to convert a backlog in files into rows.
SAMPLED_LANDING_FILES = 3


@dataclass(frozen=True)
class Scale:
    """Cores (None: the master's own) and batch-size limit (None: no limit) of a driver."""

    cores: int | None
    max_files_per_trigger: int | None

    def describe(self) -> str:
        cores = "default cores" if self.cores is None else f"{self.cores} cores"
        files = "" if self.max_files_per_trigger is None else f", {self.max_files_per_trigger} files/batch"
        return cores + files


def written_scale(spec: JobSpec) -> Scale:
    """The scale the job file gives."""
    return Scale(spec.operations.resources.cores, spec.operations.trigger.max_files_per_trigger)


def run_scale(run: RunRecord, spec: JobSpec) -> Scale:
    """The scale a run was launched at; a run that recorded none ran at the file's (runs from
    before scales were recorded, standbys promoted before they were)."""
    if run.cores is None and run.max_files_per_trigger is None:
        return written_scale(spec)
    return Scale(run.cores, run.max_files_per_trigger)


def cores_label(cores: int | None, pinned: bool) -> str:
    """A job's cores as `warden status` and the job board both show them: the number, `default`
    when neither the job file nor the ledger names one (the Spark master then decides), marked
    `pinned` when an operator pinned them."""
    return f"{'default' if cores is None else cores}{' pinned' if pinned else ''}"


def desired_scale(spec: JobSpec, job: JobRecord | None) -> Scale:
    """The scale the job should run at: pinned by an operator, else the autoscaler's (in `apply`
    mode, within the policy's bounds, starting at the written cores or the policy's minimum),
    else the job file's."""
    policy, written = spec.operations.autoscaling, written_scale(spec)
    if job is not None and job.scale_pinned and job.scale_cores is not None:
        return Scale(job.scale_cores, job.scale_max_files)
    if policy.mode != "apply":
        return written
    if job is None or job.scale_cores is None:
        cores = written.cores or policy.min_cores
        return Scale(min(max(cores, policy.min_cores), policy.max_cores), written.max_files_per_trigger)
    return Scale(min(max(job.scale_cores, policy.min_cores), policy.max_cores), job.scale_max_files)


@dataclass(frozen=True)
class ScalingView:
    """What the autoscaler decides from, read-only (None parts: not known yet)."""

    window: LoadWindow | None
    last: LastRescale | None
    restart_cost_seconds: float | None
    last_recommendation: DecisionRecord | None


def observe_scaling(
    spec: JobSpec, ledger: Ledger, run: RunRecord, heartbeat: Heartbeat | None, landing_dirs: list[Path]
) -> ScalingView | None:
    """The autoscaler's look at a job's open run (None when its autoscaling is off).

    The run's first batch is left out of the window: it reads what piled up while the driver
    started, on a cold JVM, so its rate says nothing of what the cores can do.
    """
    if spec.operations.autoscaling.mode == "off":
        return None
    samples = [
        sample
        for sample in (heartbeat.recent if heartbeat is not None else ())
        if run.first_batch_id is None or sample.batch_id > run.first_batch_id
    ]
    window = None
    if samples:
        window = LoadWindow.from_samples(
            samples, spec.operations.trigger.interval_seconds, rows_per_landing_file(landing_dirs)
        )
    rescales = [
        op for op in ledger.operations(spec.name) if op.kind == RESCALE and op.finished_at is not None
    ]
    measured = next((op.restart_cost_seconds for op in rescales if op.restart_cost_seconds is not None), None)
    recommendations = ledger.decisions(spec.name, limit=1, action=RECOMMENDATION)
    return ScalingView(
        window=window,
        last=last_rescale(rescales[0]) if rescales else None,
        restart_cost_seconds=measured,
        last_recommendation=recommendations[0] if recommendations else None,
    )


def rescale_applied(operation: OperationRecord) -> bool:
    """Whether a finished rescale was carried out (not abandoned before its stop)."""
    return operation.outcome is not None and operation.outcome.startswith(RESCALED)


def last_rescale(operation: OperationRecord) -> LastRescale | None:
    """A finished rescale as the autoscaler's guards read it (None if it changed no cores)."""
    if operation.from_cores is None or operation.to_cores is None or operation.finished_at is None:
        return None
    return LastRescale(
        at=operation.finished_at.timestamp(),
        from_cores=operation.from_cores,
        to_cores=operation.to_cores,
        true_rate_before=operation.true_rate_before or 0.0,
        applied=rescale_applied(operation),
    )


def rows_per_landing_file(landing_dirs: list[Path]) -> float:
    """Rows (lines) per landing file, from the newest few: the backlog is counted in files."""
    files = [path for landing in landing_dirs if landing.is_dir() for path in landing.glob("*.json")]
    newest = sorted(files, key=_mtime)[-SAMPLED_LANDING_FILES:]
    counted = [_lines(path) for path in newest]
    known = [lines for lines in counted if lines is not None]
    return sum(known) / len(known) if known else 0.0


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return 0.0


def _lines(path: Path) -> int | None:
    # Archiving may move a file between the listing and the read.
    try:
        with path.open("rb") as landing_file:
            return sum(1 for _ in landing_file)
    except FileNotFoundError:
        return None


def low_since(recommended: int, cores: int, previous: datetime | None, now: datetime) -> datetime | None:
    """When the recommendation first fell below the cores without rising since (None: not below)."""
    if recommended >= cores:
        return None
    return previous or now
