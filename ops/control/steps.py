"""The steps of recovery operations (rewind, restate, upgrade; `ops.control.policy` has their state
machines), as the loop carries them out. Each pass writes the operation's step before acting and
the facts each step establishes after it, so whichever process runs the next pass carries on where
the last stopped. A rewind or restate is checked for every refusal before its driver is stopped
(`stop_after_check`) and again before the rewind (`restore`): a refused one is closed with the
driver and the desired state as they were.

The recovery wing is imported where a step runs: importing the loop (the DAG parser, `warden
status`) must not load its clients (Parquet, S3). The loop calls these steps; nothing in
`ops.recovery` imports the loop.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from ops.alerts import Alert
from ops.control.context import Control
from ops.control.drivers import stop
from ops.control.observer import dry_run_driver
from ops.control.policy import JobView
from ops.control.rescale import rescale_outcome
from ops.control.savepointing import find_savepoint
from ops.control.scaling import run_scale
from ops.exceptions import ConfigError, LaunchError, SavepointError, UpgradeError
from ops.ledger.records import OperationRecord
from ops.spec.job import find_job
from ops.states import Desired, Lifecycle, OperationKind, Result

if TYPE_CHECKING:
    from ops.recovery.rewind import Preflight


def open_operation(view: JobView) -> OperationRecord:
    """The operation an operation step acts on (decide returns those steps only when one is open)."""
    assert view.operation is not None, "an operation step without an open operation"
    return view.operation


def check(control: Control, view: JobView) -> Preflight:
    """The open rewind, restate or rollback checked for every refusal (this pass holds the lock)."""
    from ops.recovery.rewind import preflight

    operation = open_operation(view)
    return preflight(
        control, view.spec.name, operation.kind, savepoint_id=operation.savepoint_id, operation=operation
    )


def stop_after_check(control: Control, view: JobView, exit_reason: str) -> str:
    """Stop the open run for a rewind or restate, only if its check finds no refusal."""
    checked, run = check(control, view), view.observation.run
    assert run is not None
    if checked.plan is None:
        control.ledger.update_operation(open_operation(view).id, failure=checked.text())
        return f"not stopped, the driver runs on: {checked.text()}"
    ended = stop(control, view.spec, run, graceful=True, exit_reason=exit_reason)
    plan = checked.plan
    return f"check passed (savepoint {plan.savepoint.id}, batch {plan.batch_id}), then stopped: {ended}"


def restore(control: Control, view: JobView, savepoint_id: str) -> str:
    """Rewind the stopped job (this pass holds its lock); a refusal fails the operation.

    A restatement's rewind also sets the desired state to running with a fresh restart budget
    (a resume request): it ends with the job running its replayed output. Only here, so a
    refused restatement leaves the desired state as it was.
    """
    from ops.recovery.rewind import complete_rewind

    operation, job, ledger = open_operation(view), view.spec.name, control.ledger
    assert savepoint_id == operation.savepoint_id, "the rewind of an operation is to its savepoint"
    checked = check(control, view)
    if checked.plan is None:
        ledger.update_operation(operation.id, failure=checked.text())
        return f"refused: {checked.text()}"
    plan = checked.plan
    # The first plan is the true one: a rewind redone after a crash finds the files of the
    # later batches already gone, and must still report the rows they held.
    ledger.update_operation(
        operation.id,
        savepoint_batch=plan.batch_id,
        replay_to=plan.last_batch if operation.replay_to is None else operation.replay_to,
        rows_before=plan.sink_rows if operation.rows_before is None else operation.rows_before,
    )
    complete_rewind(control.platform, ledger, plan)
    if operation.kind == OperationKind.RESTATE:
        ledger.update_job(job, desired_state=Desired.RUNNING, restart_requested_at=control.clock())
    ledger.update_operation(operation.id, rewound_at=control.clock())
    return plan.outcome()


def upgrade_savepoint(control: Control, view: JobView) -> str:
    """The savepoint an upgrade starts from (and rolls back to); a failure refuses the upgrade."""
    from ops.savepoints.store import take_savepoint

    operation = open_operation(view)
    try:
        savepoint = take_savepoint(control.platform, control.ledger, view.spec)
    except SavepointError as error:
        control.ledger.update_operation(operation.id, failure=str(error))
        return f"failed, the upgrade is refused: {error}"
    control.ledger.update_operation(
        operation.id, savepoint_id=savepoint.id, savepoint_batch=savepoint.batch_id
    )
    return f"savepoint {savepoint.id} at batch {savepoint.batch_id}"


def start_dry_run(control: Control, view: JobView) -> str:
    """Launch the candidate as a replay-only driver on a copy of the upgrade's savepoint."""
    from ops.recovery.upgrade import prepare_dry_run

    operation, job = open_operation(view), view.spec.name
    assert operation.candidate_spec is not None, "an upgrade carries its candidate"
    savepoint = find_savepoint(control, job, operation.savepoint_id)
    dry_run_id = f"{job}-dry-run-{control.clock():%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"
    try:
        candidate, conf_dir = prepare_dry_run(
            control.platform, job, operation.candidate_spec, savepoint, dry_run_id
        )
        driver = control.backend.launch_replay_only(candidate, dry_run_id, conf_dir)
    except (ConfigError, SavepointError, LaunchError) as error:
        control.ledger.update_operation(operation.id, failure=f"dry run could not start: {error}")
        return f"failed, the upgrade is refused: {error}"
    control.ledger.update_operation(
        operation.id,
        dry_run_id=dry_run_id,
        dry_run_pid=driver.pid,
        dry_run_app_id=driver.app_id,
        dry_run_started_at=control.clock(),
    )
    return f"dry run {dry_run_id} pid {driver.pid} on a copy of savepoint {savepoint.id}"


def end_dry_run(control: Control, view: JobView, failure: str | None) -> str:
    """Kill what is left of the dry run, discard its copy, and record its verdict."""
    from ops.recovery.upgrade import discard_dry_runs

    operation = open_operation(view)
    driver = dry_run_driver(control, operation)
    if driver is not None:
        control.backend.kill(driver)
    discard_dry_runs(control.platform, view.spec.name)
    if failure is not None:
        control.ledger.update_operation(operation.id, failure=failure)
        return f"refused: {failure}"
    control.ledger.update_operation(operation.id, dry_run_passed_at=control.clock())
    return "passed"


def install(control: Control, view: JobView, config_version: str) -> str:
    """Install the upgrade's candidate (deploying) or its previous spec (rolling back)."""
    from ops.recovery.upgrade import install_spec

    operation, job = open_operation(view), view.spec.name
    candidate = config_version == operation.candidate_version
    content = operation.candidate_spec if candidate else operation.previous_spec
    if content is None or config_version not in (operation.candidate_version, operation.previous_version):
        raise UpgradeError(f"upgrade of {job!r} has no spec of config {config_version}")
    install_spec(control.platform, job, content, keep_previous=candidate)
    installed = find_job(job, control.platform.conf_dir).config_version
    if installed != config_version:
        raise UpgradeError(f"installed spec of {job!r} has config {installed}, not {config_version}")
    if candidate:
        # Deploying: from here on the job is to run (the candidate), with a fresh restart budget.
        control.ledger.update_job(job, desired_state=Desired.RUNNING, restart_requested_at=control.clock())
    return f"installed config {config_version}"


def roll_back(control: Control, view: JobView, reason: str) -> str:
    """Mark the open upgrade failed: the next passes roll it back to its savepoint."""
    control.ledger.update_operation(open_operation(view).id, failure=reason)
    return f"rolling back: {reason}"


def finish(control: Control, view: JobView, result: Result, reason: str, run_url: str | None) -> str:
    """Close the operation: the outcome on its decision row and its record. An abandoned
    rescale puts the job's scale (unless pinned) back to the one its driver runs at."""
    from ops.recovery.rewind import rewind_outcome

    operation = open_operation(view)
    kind, failure = operation.kind, operation.failure
    if result == Result.DONE and kind == OperationKind.SCALE:
        outcome = rescale_outcome(control, operation)
        _notify_done(control, view, "rescaled", f"{outcome}. Why: {operation.reason}", run_url)
    elif result == Result.DONE and kind == OperationKind.RESTATE:
        outcome = _restatement_summary(control, view, operation)
        _notify_done(control, view, "restated", f"{outcome}. Why: {operation.reason}", run_url)
    elif result == Result.DONE and kind == OperationKind.REWIND:
        assert operation.savepoint_batch is not None and operation.replay_to is not None
        outcome = rewind_outcome(operation.savepoint_batch, operation.replay_to)
    elif result == Result.DONE:
        outcome = f"upgraded: config {operation.previous_version} -> {operation.candidate_version}"
    elif result == Result.ABANDONED:
        outcome = reason
        run = view.observation.run
        if run is not None and not view.job.scale_pinned:
            running = run_scale(run, view.spec)
            control.ledger.update_job(
                view.spec.name, scale_cores=running.cores, scale_max_files=running.max_files_per_trigger
            )
    else:
        outcome = f"{result}: {failure}"
    control.ledger.set_outcome(operation.decision_id, outcome)
    control.ledger.finish_operation(operation.id, outcome)
    return outcome


def _restatement_summary(control: Control, view: JobView, operation: OperationRecord) -> str:
    """The restatement's summary: its savepoint, the batches replayed, the rows before and after
    and the script UDF versions the replay ran."""
    from ops.recovery.restate import Restatement, replayed_udf_versions, rows_written

    assert operation.savepoint_id is not None and operation.savepoint_batch is not None
    assert operation.replay_to is not None
    return Restatement(
        job=view.spec.name,
        savepoint_id=operation.savepoint_id,
        batch_id=operation.savepoint_batch,
        last_batch=operation.replay_to,
        rows_before=operation.rows_before or 0,
        rows_after=rows_written(
            control.platform, view.spec.name, operation.savepoint_batch, operation.replay_to
        ),
        udf_versions=replayed_udf_versions(control.platform, view.spec.name, operation.replay_to),
    ).summary()


def _notify_done(control: Control, view: JobView, kind: str, reason: str, run_url: str | None) -> None:
    """An info message (not an incident) that an operation finished and the job runs again."""
    control.alerts.notify(
        Alert(
            job=view.spec.name,
            kind=kind,
            severity="info",
            state=Lifecycle.RUNNING.name,
            reason=reason,
            last_batch=view.progress.last_commit,
            run_url=run_url,
            runbook=view.spec.operations.alerts.runbook,
            channel=view.spec.operations.alerts.channel,
        )
    )
