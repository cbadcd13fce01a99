"""Launching and stopping drivers: a launch is recorded as the job's run (a launch that fails is a
failed run, so it backs off and counts towards a restart storm like a crash), and a stopped,
killed or vanished driver's run is closed with its exit reason; the orphaned output of batches
that never committed goes before a launch and after a stop (`ops.control.sink_cleanup`)."""

from __future__ import annotations

from dataclasses import replace

from ops.control.context import Control
from ops.control.sink_cleanup import clean_sink
from ops.exceptions import LaunchError, LedgerError
from ops.ledger.records import RunRecord
from ops.spec.job import JobSpec
from ops.states import FAILURE


def launch(control: Control, spec: JobSpec) -> str:
    """Launch the job's driver at its scale and record it as the job's run."""
    clean_sink(control, spec, "before a launch: output of batches that never committed")
    run_id, scale = control.run_id(spec), control.scale_of(spec)
    run = RunRecord(
        run_id=run_id,
        job=spec.name,
        backend=control.backend.name,
        pid=None,
        app_id=None,
        metrics_port=spec.operations.metrics_port,
        log_path=None,
        config_version=spec.config_version,
        started_at=control.clock(),
        stopped_at=None,
        exit_reason=None,
        cores=scale.cores,
        max_files_per_trigger=scale.max_files_per_trigger,
    )
    try:
        driver = control.backend.launch(spec.with_scale(scale.cores, scale.max_files_per_trigger), run_id)
    except LaunchError as error:
        # Recorded as a failed run, so it backs off and counts towards a restart storm
        # like a crash instead of being retried on every watch poll.
        exit_reason = f"{FAILURE}launch: {error}"
        control.ledger.start_run(replace(run, stopped_at=control.clock(), exit_reason=exit_reason))
        return exit_reason
    launched = replace(run, pid=driver.pid, app_id=driver.app_id, log_path=str(driver.log_path))
    try:
        control.ledger.start_run(launched)
    except LedgerError:
        # A driver the ledger does not know of would be launched again once it is back.
        control.backend.kill(launched)
        raise
    return f"run {run_id} pid {driver.pid}"


def stop(control: Control, spec: JobSpec, run: RunRecord, *, graceful: bool, exit_reason: str) -> str:
    """Stop the run's driver (gracefully: its query finishes its batch, within the spec's
    shutdown timeout; or killed) and close the run."""
    if graceful:
        ended = control.backend.stop(run, spec.operations.shutdown_timeout_seconds)
    else:
        control.backend.kill(run)
        ended = "killed"
    control.ledger.finish_run(run.run_id, exit_reason)
    clean_sink(control, spec, "driver stopped: output of batches that never committed", run.run_id)
    return ended


def close(control: Control, spec: JobSpec, run: RunRecord, exit_reason: str) -> str:
    """Close the run of a driver found gone (or past saving): whatever of its group is left is
    killed first."""
    control.backend.kill(run)
    control.ledger.finish_run(run.run_id, exit_reason)
    clean_sink(control, spec, "driver gone: output of batches that never committed", run.run_id)
    return "closed"
