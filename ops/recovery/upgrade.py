"""Stateful upgrade: deploy a new version of a job's spec from a fresh savepoint, or roll back.

An upgrade is a recovery operation (`upgrade`) that the supervisor's reconcile loop carries out
step by step (`ops.control.policy` has the state machine); this module holds its pieces:

1. `upgrade` validates the candidate file (same job name and sink; it becomes
   `conf/jobs/<job>.yaml`), records the operation and runs reconcile passes until it is closed.
2. The loop takes a savepoint of the running version (online).
3. Dry run, while the running version keeps running: `prepare_dry_run` restores that savepoint
   into a scratch platform and queues one more batch on it with the savepoint's own offsets, so
   it reads no input; the launch backend starts the candidate's driver there (`--replay-only`).
   That batch loads every state store and plans every operator, so a state schema or operator
   change Spark cannot restore from fails here (`dry_run_verdict` quotes Spark), and the upgrade
   is refused before the running version is touched. A job with `operations.upgrade.output_check`
   is also refused when the candidate's output over the savepoint's newest input moved too far
   from the running version's (`ops.driver.output_shift`).
4. The loop stops the running version, installs the candidate (`install_spec`, keeping the
   previous spec in `<runtime>/jobs/<job>/upgrade/previous.yaml`) and starts it.
5. Readiness: the new version must commit `restart.stable_batches` batches (or idle with nothing
   to read) in one run, without a restart, within the readiness timeout. Otherwise the loop rolls
   back: stop it, reinstall the previous spec, rewind to the savepoint (so whatever the new
   version wrote is recomputed by the old one), start, and page.

If the process running `upgrade` dies, the next reconcile pass by anyone carries on from the step
the ledger records; the dry-run driver, detached like any driver, is watched by that pass.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml
from botocore.client import BaseClient

from ops.atomic import write_atomically
from ops.driver.checkpoint import write_log_entry
from ops.driver.output_shift import OutputShift
from ops.driver.telemetry import read_heartbeat
from ops.exceptions import ConfigError, OperationInProgressError, UpgradeError
from ops.ledger.records import SavepointRecord
from ops.ports import free_loopback_port
from ops.recovery.loop import ControlLoop
from ops.recovery.refusals import Cause, Refusal, record_refusal
from ops.savepoints.store import fetch_savepoint
from ops.spec.job import JobSpec, anchor_paths, find_job, load_job
from ops.spec.paths import JobPaths
from ops.spec.platform import PlatformConfig, load_platform

VERDICT_LOG_CHARS = 2000


@dataclass(frozen=True)
class UpgradeResult:
    """How an upgrade ended: `upgraded` or `rolled back`, with the savepoint it started from."""

    job: str
    outcome: str
    savepoint: SavepointRecord
    detail: str

    def line(self) -> str:
        return f"{self.job}: {self.outcome} ({self.detail}); savepoint {self.savepoint.id}"


def _candidate_spec(platform: PlatformConfig, job: str, candidate: Path) -> tuple[JobSpec, str]:
    """The candidate spec, validated as `conf/jobs/<job>.yaml` would be, and its text."""
    raw = candidate.read_bytes()
    try:
        content = raw.decode()
    except UnicodeDecodeError as exc:
        raise UpgradeError(f"candidate {candidate} is not UTF-8 text: {exc}") from exc
    with tempfile.TemporaryDirectory() as scratch:
        as_installed = Path(scratch) / f"{job}.yaml"
        as_installed.write_bytes(raw)
        try:
            # Its relative paths are taken from where it is installed.
            spec = load_job(as_installed, platform.conf_dir / "jobs")
        except ConfigError as exc:
            raise UpgradeError(
                f"candidate {candidate} is not a valid spec for {job!r}: {exc.problem}"
            ) from exc
    if spec.pipeline.sink != find_job(job, platform.conf_dir).pipeline.sink:
        raise UpgradeError(f"candidate {candidate} moves the sink of {job!r}; a new sink is a new job")
    return spec, content


# --- the steps' pieces (called by the supervisor) -----------------------------------------------


def dry_runs_dir(platform: PlatformConfig, job: str) -> Path:
    """Where dry runs keep their scratch platforms, one directory per attempt."""
    return JobPaths.of(platform, find_job(job, platform.conf_dir)).upgrade / "dry-runs"


def _scratch_conf(platform: PlatformConfig, job: str, candidate: str, root: Path) -> Path:
    """A conf dir for the dry run: storage under `root` (landing shared, read only) and the candidate."""
    conf_dir = root / "conf"
    (conf_dir / "jobs").mkdir(parents=True)
    settings = platform.model_dump(mode="json")
    settings["storage"] = {
        "runtime_root": str(root / "runtime"),
        "landing_root": str(platform.landing_root),
        "lake_root": str(root / "lake"),
        "checkpoint_root": str(root / "checkpoints"),
    }
    settings["ledger"] = {"url": f"sqlite:///{root / 'ledger.db'}"}
    (conf_dir / "platform.yaml").write_text(yaml.safe_dump(settings))
    spec = anchor_paths(yaml.safe_load(candidate), platform.conf_dir)
    # The running version holds the metrics port; the dry run serves its metrics elsewhere.
    spec["operations"]["metrics_port"] = free_loopback_port()
    (conf_dir / "jobs" / f"{job}.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return conf_dir


def prepare_dry_run(
    platform: PlatformConfig,
    job: str,
    candidate: str,
    savepoint: SavepointRecord,
    dry_run_id: str,
    *,
    s3: BaseClient | None = None,
) -> tuple[JobSpec, Path]:
    """A scratch platform holding a copy of `savepoint` with one batch queued; the candidate spec
    as loaded there, and the scratch conf dir to launch it with.

    The queued batch reuses the savepoint's offsets, so it reads no input but loads the state of
    every stateful operator and plans the whole query against the checkpoint. Earlier attempts'
    scratch copies are removed first: a dry run is redone from scratch.
    """
    attempts = dry_runs_dir(platform, job)
    shutil.rmtree(attempts, ignore_errors=True)
    root = attempts / dry_run_id
    conf_dir = _scratch_conf(platform, job, candidate, root)
    scratch_spec = find_job(job, conf_dir)
    scratch = JobPaths.of(load_platform(conf_dir), scratch_spec)
    fetch_savepoint(platform, savepoint, root / "savepoint", s3=s3)
    for restored, target in (
        (root / "savepoint" / "checkpoint", scratch.checkpoint),
        (root / "savepoint" / "sink" / "_spark_metadata", scratch.sink_log),
    ):
        target.parent.mkdir(parents=True, exist_ok=True)
        restored.rename(target)
    last = savepoint.batch_id
    write_log_entry(scratch.replay / str(last + 1), (scratch.offsets / str(last)).read_bytes())
    if scratch_spec.operations.upgrade.output_check is not None:
        running = (platform.conf_dir / "jobs" / f"{job}.yaml").read_text()
        anchored = anchor_paths(yaml.safe_load(running), platform.conf_dir)
        write_atomically(scratch.running_spec, yaml.safe_dump(anchored, sort_keys=False).encode())
    return scratch_spec, conf_dir


def dry_run_verdict(platform: PlatformConfig, job: str, dry_run_id: str, batch_id: int) -> str | None:
    """None if the dry run whose driver has exited committed the batch after `batch_id` (its
    savepoint's) on the scratch copy; otherwise why not, in Spark's words when the driver said.

    The commit decides, not the heartbeat: a detached driver leaves no exit code, and the
    listener's last progress event may land after the driver's own "terminated" record.
    """
    conf_dir = dry_runs_dir(platform, job) / dry_run_id / "conf"
    if not (conf_dir / "platform.yaml").is_file():
        return f"its scratch copy {conf_dir.parent} is gone"
    scratch_platform = load_platform(conf_dir)
    candidate = find_job(job, conf_dir)
    scratch = JobPaths.of(scratch_platform, candidate)
    if (scratch.commits / str(batch_id + 1)).is_file():
        return _output_shift_refusal(candidate, scratch)
    heartbeat = read_heartbeat(scratch.heartbeat)
    if heartbeat is not None and heartbeat.run_id == dry_run_id and heartbeat.error_class is not None:
        return heartbeat.error_message or heartbeat.error_class
    logs = sorted(scratch.runtime.glob("driver-*.log"))
    tail = logs[-1].read_text(errors="replace").strip()[-VERDICT_LOG_CHARS:] if logs else ""
    return f"the dry run did not commit batch {batch_id + 1}" + (f": {tail}" if tail else "")


def _output_shift_refusal(candidate: JobSpec, scratch: JobPaths) -> str | None:
    """Why the candidate's output moved too far from the running version's, by the comparison
    its dry-run driver wrote (`jobs.output_shift`); None when it did not, or the job has no check."""
    check = candidate.operations.upgrade.output_check
    if check is None:
        return None
    try:
        shift = OutputShift.model_validate_json(scratch.output_shift.read_text())
    except FileNotFoundError:
        heartbeat = read_heartbeat(scratch.heartbeat)
        why = heartbeat.error_message if heartbeat is not None and heartbeat.error_message else None
        return f"the dry run did not compare {check.column!r}" + (f": {why}" if why else "")
    return shift.refusal()


def discard_dry_runs(platform: PlatformConfig, job: str) -> None:
    shutil.rmtree(dry_runs_dir(platform, job), ignore_errors=True)


def install_spec(platform: PlatformConfig, job: str, content: str, *, keep_previous: bool) -> None:
    """Write `content` as the job's spec file in one rename; keep the file it replaces if asked."""
    installed = platform.conf_dir / "jobs" / f"{job}.yaml"
    if keep_previous:
        kept = JobPaths.of(platform, find_job(job, platform.conf_dir)).upgrade / "previous.yaml"
        write_atomically(kept, installed.read_bytes())
    write_atomically(installed, content.encode())


# --- the request ---------------------------------------------------------------------------------


def upgrade(
    supervisor: ControlLoop,
    job: str,
    candidate: Path,
    *,
    reason: str,
    readiness_timeout: float = 300.0,
    progress: Callable[[str], None] | None = None,
) -> UpgradeResult:
    """Deploy `candidate` as the job's spec from a fresh savepoint; roll back if it is not ready.

    Records the upgrade and runs reconcile passes until the loop has closed it. Raises
    UpgradeError, with the running version untouched, when the candidate is invalid or cannot take
    over the job's state, or another operation is open; a request refused here is also a
    `refused` decision row. Returns how the upgrade ended otherwise; a rollback pages.
    """
    platform = supervisor.platform
    asked = {"candidate": str(candidate)}
    try:
        spec, content = _candidate_spec(platform, job, candidate)
        old_version = find_job(job, platform.conf_dir).config_version
        if spec.config_version == old_version:
            raise UpgradeError(
                f"candidate {candidate} is the installed spec of {job!r} (config {old_version})"
            )
    except UpgradeError as invalid:
        refusal = Refusal(Cause.CANDIDATE_INVALID, str(invalid))
        raise UpgradeError(
            record_refusal(supervisor.ledger, job, "upgrade", reason, [refusal], asked)
        ) from invalid
    previous = (platform.conf_dir / "jobs" / f"{job}.yaml").read_text()
    try:
        operation = supervisor.start_operation(
            job,
            "upgrade",
            reason,
            {"from": old_version, "to": spec.config_version, **asked},
            candidate_spec=content,
            candidate_version=spec.config_version,
            previous_spec=previous,
            previous_version=old_version,
            readiness_timeout=readiness_timeout,
        )
    except OperationInProgressError as busy:
        refusal = Refusal(Cause.OPERATION_OPEN, str(busy))
        raise UpgradeError(
            record_refusal(supervisor.ledger, job, "upgrade", reason, [refusal], asked)
        ) from busy
    ended = supervisor.await_operation(operation.id, progress=progress)
    if ended.failure is not None and ended.dry_run_passed_at is None:
        raise UpgradeError(ended.failure)
    savepoint = next(sp for sp in supervisor.ledger.savepoints(job) if sp.id == ended.savepoint_id)
    if ended.failure is not None:
        return UpgradeResult(job, "rolled back", savepoint, ended.failure)
    return UpgradeResult(job, "upgraded", savepoint, f"config {old_version} -> {spec.config_version}")
