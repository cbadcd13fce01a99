"""Recording: what a reconcile pass writes to the ledger before it acts, so a crash mid-action
leaves a trail the next pass reads. The job's newest figures from its heartbeat, the run's
measured speeds and batches, the script UDF versions its batches ran, the decided state, an open
operation's step with the facts it established, and the autoscaler's recommendation; and what
the Airflow watcher saw, noted before the pass that reacts to it."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ops.control.context import Control
from ops.control.health import measured_speed
from ops.control.policy import JobView, Plan
from ops.control.scaling import low_since
from ops.driver.telemetry import Heartbeat

# The decisions that name the script UDF versions a job's batches ran.
UDF_VERSIONS_ACTION = "udf_versions"


def record_observation(control: Control, view: JobView) -> None:
    """The job's newest batch, rates and backlog, and its open run's speeds and batches."""
    heartbeat, run = view.observation.heartbeat, view.observation.run
    if heartbeat is None or run is None:
        return
    sample = heartbeat.last_sample
    control.ledger.update_job(
        view.spec.name,
        last_batch_id=heartbeat.batch_id,
        input_rate=sample.input_rows_per_second if sample else None,
        processed_rate=sample.processed_rows_per_second if sample else None,
        backlog=view.observation.backlog_files,
        heartbeat_at=datetime.fromtimestamp(heartbeat.at, tz=control.clock().tzinfo),
    )
    columns: dict[str, Any] = dict(measured_speed(view.observation))
    if heartbeat.batch_id is not None and heartbeat.event == "progress":
        columns.update(first_batch_id=run.first_batch_id, last_batch_id=run.last_batch_id)
    if columns:
        control.ledger.update_run(run.run_id, **columns)
    _record_udf_versions(control, view.spec.name, heartbeat)


def _record_udf_versions(control: Control, job: str, heartbeat: Heartbeat) -> None:
    """A decision each time the job's batches run other script UDF versions than the ledger's
    newest `udf_versions` decision names: from which batch of which run, and the versions.

    The heartbeat's window of recent batches covers the batches between two passes; the run's
    batches a decision already covers are not looked at again.
    """
    if all(sample.udf_versions is None for sample in heartbeat.recent):
        return
    newest = next(iter(control.ledger.decisions(job, limit=1, action=UDF_VERSIONS_ACTION)), None)
    known = newest.inputs["versions"] if newest else None
    after = newest.inputs["from_batch"] if newest and newest.run_id == heartbeat.run_id else -1
    for sample in heartbeat.recent:
        versions = sample.udf_versions
        if versions is None or versions == known or sample.batch_id <= after:
            continue
        named = ", ".join(f"{name} {version}" for name, version in sorted(versions.items()))
        control.ledger.record_decision(
            job,
            UDF_VERSIONS_ACTION,
            f"script UDFs from batch {sample.batch_id}: {named}",
            {"from_batch": sample.batch_id, "versions": versions, "before": known},
            heartbeat.run_id,
        )
        known = versions


def record_plan(control: Control, view: JobView, plan: Plan) -> None:
    """The decided state with its reason, an open operation's step and facts, and the
    autoscaler's recommendation (with when it first fell below the cores, for the scale-down
    delay)."""
    job, ledger = view.spec.name, control.ledger
    ledger.update_job(
        job, state=plan.state.name, state_reason=plan.reason, config_version=view.spec.config_version
    )
    if view.operation is not None and plan.step is not None:
        ledger.update_operation(view.operation.id, step=plan.step, **plan.facts)
    if plan.scaling is not None:
        decision = plan.scaling
        ledger.update_job(
            job,
            recommended_cores=decision.recommended,
            scale_low_since=low_since(
                decision.recommended, decision.cores, view.job.scale_low_since, control.clock()
            ),
        )


def record_detection(control: Control, job: str, reason: str, detected_at: str) -> None:
    """Note in the ledger what the watcher saw and when, before the pass that reacts to it."""
    run = control.ledger.current_run(job)
    control.ledger.record_decision(
        job, "detect", reason, {"detected_at": detected_at}, run.run_id if run else None
    )
