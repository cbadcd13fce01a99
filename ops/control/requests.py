"""Requests: what operators, the CLI and the Airflow forms ask of a job, recorded for the loop to
carry out (a suspend, resume or restart; a scale pinned or released; a rewind, restate or upgrade
as an operation). Each is a decision row with its reason; nothing here stops or starts a driver:
the next reconcile pass does."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import structlog

from ops.control.context import Control
from ops.control.scaling import desired_scale
from ops.exceptions import ConfigError, OperationInProgressError, WardenError
from ops.ledger.locks import job_lock
from ops.ledger.records import OperationRecord
from ops.spec.job import find_job, job_file
from ops.states import Desired, OperationKind, Step

log = structlog.get_logger("streamwarden.supervisor")


def request(control: Control, job: str, action: str, reason: str) -> str:
    """Record an operator request (suspend, resume, restart); the next pass carries it out."""
    control.known_job(find_job(job, control.platform.conf_dir))
    now = control.clock()
    changes: dict[str, Any]
    match action:
        case "suspend":
            changes = {"desired_state": Desired.SUSPENDED}
        case "resume":
            # A resume also resets the restart budget, so a job suspended by a storm can run.
            changes = {"desired_state": Desired.RUNNING, "restart_requested_at": now}
        case "restart":
            changes = {"desired_state": Desired.RUNNING, "restart_requested_at": now}
        case _:
            raise WardenError(f"unknown request {action!r}: expected suspend, resume or restart")
    control.ledger.record_decision(job, f"request_{action}", reason, {"requested_at": now.isoformat()})
    control.ledger.update_job(job, **changes)
    return f"{job}: {action} requested ({reason}); the supervisor carries it out within seconds"


def scale(control: Control, job: str, cores: int | None, reason: str) -> str:
    """An operator's scale: pin the job at `cores` until released, or release it (None) to the
    autoscaler (or the job file's scale when autoscaling is off). The next passes rescale a
    running job to it; the batch size follows the cores in proportion."""
    platform, ledger = control.platform, control.ledger
    spec = find_job(job, platform.conf_dir)
    partitions = spec.operations.resources.shuffle_partitions
    if cores is not None and spec.operations.stateful and cores > partitions:
        raise ConfigError(
            job_file(job, platform.conf_dir),
            f"cannot pin {cores} cores: a stateful job uses at most its "
            f"resources.shuffle_partitions ({partitions}) cores, which the checkpoint fixes",
        )
    with job_lock(platform, job, "scale request"):
        record = control.known_job(spec)
        current = desired_scale(spec, record)
        changes: dict[str, Any]
        if cores is None:
            changes = {"scale_pinned": False}
            action, said = "scale_release", "pin released"
        else:
            base_files, base_cores = current.max_files_per_trigger, current.cores or cores
            max_files = None if base_files is None else max(1, round(base_files * cores / base_cores))
            changes = {"scale_pinned": True, "scale_cores": cores, "scale_max_files": max_files}
            action, said = "scale_pin", "pinned until released"
        inputs = {"cores": cores, "before": current.describe(), "pinned_before": record.scale_pinned}
        decision = ledger.record_decision(job, action, reason, inputs)
        ledger.update_job(job, **changes)
        after = desired_scale(spec, ledger.job(job))
        outcome = f"{said}: the job runs at {after.describe()}"
        ledger.set_outcome(decision, outcome)
    return f"{job}: {outcome} ({reason}); the supervisor rescales a running driver within seconds"


def ensure_no_operation(control: Control, job: str) -> None:
    """Raise OperationInProgressError while `job` has an open rewind, restate or upgrade."""
    operation = control.ledger.operation(job)
    if operation is not None:
        raise OperationInProgressError(job, operation.kind, operation.step, operation.requested_at)


def start_operation(
    control: Control,
    job: str,
    kind: OperationKind | str,
    reason: str,
    inputs: Mapping[str, Any],
    **facts: Any,
) -> OperationRecord:
    """Record a rewind, restate or upgrade of `job` for the loop to carry out; the caller
    checked it. Its decision row (action `kind`) gets the outcome when it is closed. The job's
    desired state is not changed here. Refuses while another is open.
    """
    spec = find_job(job, control.platform.conf_dir)
    with job_lock(control.platform, job, f"{kind} request"):
        control.known_job(spec)
        ensure_no_operation(control, job)
        decision = control.ledger.record_decision(job, str(kind), reason, inputs)
        operation = control.ledger.start_operation(job, str(kind), reason, decision, Step.REQUESTED, **facts)
    log.info("operation requested", job=job, kind=str(kind), operation=operation.id, reason=reason)
    return operation
