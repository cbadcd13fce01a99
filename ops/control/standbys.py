"""Warm standbys: a second driver of the job, at its scale, warmed up and waiting to take over.

`take_over` grants the job's checkpoint to its standby only after the backend has confirmed the
previous driver gone (pid with start ticks, and nothing left in its process group) and the
checkpoint lock free of it, under the job lock; the orphaned output is removed before the grant,
then the standby's driver is recorded as the job's run. `ops.driver.takeover` has the grant and
the checkpoint lock.
"""

from __future__ import annotations

import time

from ops.control.context import Control
from ops.control.policy import JobView
from ops.control.sink_cleanup import clean_sink
from ops.driver.takeover import Grant, checkpoint_lock_holder, write_grant
from ops.exceptions import TakeOverRefused
from ops.ledger.records import StandbyRecord
from ops.spec.job import JobSpec
from ops.spec.paths import JobPaths

# How long a take-over waits for the previous driver's group (its JVM) to exit after the kill.
TAKEOVER_CONFIRM_SECONDS = 10.0
# A standby has no query to finish: a stop that takes longer than this is a kill.
STANDBY_STOP_SECONDS = 10.0


def launch_standby(control: Control, spec: JobSpec) -> str:
    """Launch a standby of the job at the scale its next driver runs at, and record it."""
    run_id, scale = control.run_id(spec), control.scale_of(spec)
    driver = control.backend.launch_standby(spec.with_scale(scale.cores, scale.max_files_per_trigger), run_id)
    control.ledger.start_standby(
        StandbyRecord(
            run_id=run_id,
            job=spec.name,
            backend=control.backend.name,
            pid=driver.pid,
            app_id=driver.app_id,
            log_path=str(driver.log_path),
            config_version=spec.config_version,
            started_at=control.clock(),
        )
    )
    return f"standby {run_id} pid {driver.pid}"


def retire(control: Control, standby: StandbyRecord, exit_reason: str) -> str:
    """Stop a standby and close its record."""
    ended = control.backend.stop(standby.as_run(), STANDBY_STOP_SECONDS)
    control.ledger.finish_standby(standby.run_id, exit_reason)
    return ended


def take_over(control: Control, view: JobView) -> str:
    """Grant the checkpoint to the open standby, fenced: this pass holds the job lock, and the
    grant is written only once the previous driver is confirmed gone and no run is open."""
    spec, standby, backend = view.spec, view.standby.record, control.backend
    assert standby is not None
    previous = view.observation.run or (view.closed_runs[0] if view.closed_runs else None)
    if previous is not None and not backend.confirm_gone(previous, TAKEOVER_CONFIRM_SECONDS):
        raise TakeOverRefused(
            f"job {spec.name!r}: driver {previous.pid} of run {previous.run_id} (or a process of "
            f"its group) is still alive {TAKEOVER_CONFIRM_SECONDS:g}s after it was killed; "
            f"standby {standby.run_id} is not granted"
        )
    paths = JobPaths.of(control.platform, spec)
    # A killed JVM's main thread can read as a zombie while its other threads still exit and
    # hold its files: the lock says when it is really gone.
    deadline = time.monotonic() + TAKEOVER_CONFIRM_SECONDS
    while (holder := checkpoint_lock_holder(paths.runtime)) is not None and not backend.started_by(
        standby.as_run(), holder
    ):
        if time.monotonic() >= deadline:
            raise TakeOverRefused(
                f"job {spec.name!r}: process {holder}, not of standby {standby.run_id}, holds "
                f"{paths.runtime / 'checkpoint.lock'}: another driver's JVM still lives; no grant"
            )
        time.sleep(0.05)
    open_run = control.ledger.current_run(spec.name)
    if open_run is not None:
        raise TakeOverRefused(f"job {spec.name!r}: run {open_run.run_id} is open; no take-over beside it")
    if not backend.is_alive(standby.as_run()):
        raise TakeOverRefused(f"job {spec.name!r}: standby {standby.run_id} is gone")
    clean_sink(control, spec, "before a take-over: output of batches that never committed")
    replaces = previous.run_id if previous is not None else None
    write_grant(paths.runtime, Grant(standby.run_id, replaces, time.time()))
    run = control.ledger.promote_standby(standby, replaces, control.clock())
    # The standby was launched at the job's scale; a scale changed since is a rescale later.
    scale = control.scale_of(spec)
    control.ledger.update_run(
        run.run_id, cores=scale.cores, max_files_per_trigger=scale.max_files_per_trigger
    )
    return f"run {run.run_id} pid {run.pid}: standby took over from {replaces or 'no run'}"
