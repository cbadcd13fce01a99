"""Stateful upgrade: deploy a new version of a job's spec from a fresh savepoint, or roll back.

`upgrade(supervisor, job, candidate)`:

1. Validate the candidate file (same job name; it becomes `conf/jobs/<job>.yaml`).
2. Take a savepoint of the running version (online).
3. Dry run, while the running version keeps running: restore that savepoint into a scratch
   platform and have the candidate's driver replay one more batch on it (`--replay-only`), with
   the savepoint's offsets and so no new input. That batch loads every state store and plans every
   operator, so a state schema or operator change Spark cannot restore from fails here, and the
   upgrade is refused with Spark's reason before the running version is touched.
4. Stop the running version, install the candidate, start it.
5. Readiness: the new version must commit `restart.stable_batches` batches (or idle with nothing to
   read) in one run, without a restart, within the readiness timeout. Otherwise roll back: stop
   it, reinstall the previous spec, rewind to the savepoint (so whatever the new version wrote is
   recomputed by the old one), start, and page.

The whole sequence is one `upgrade` decision in the ledger; the previous spec is kept in
`<runtime>/jobs/<job>/upgrade/previous.yaml` until the next upgrade.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml
from botocore.client import BaseClient

from ops.control.alerts import Alert
from ops.control.locks import job_lock
from ops.control.supervisor import Supervisor
from ops.driver.checkpoint import write_log_entry
from ops.driver.telemetry import read_heartbeat
from ops.exceptions import ConfigError, UpgradeError, WardenError
from ops.ledger.store import SavepointRecord
from ops.ports import free_loopback_port
from ops.recovery.rewind import rewind_job
from ops.savepoints.store import fetch_savepoint, take_savepoint
from ops.spec.job import JobSpec, find_job, load_job
from ops.spec.paths import JobPaths
from ops.spec.platform import CONF_DIR_ENV, PlatformConfig, load_platform

DRY_RUN_TIMEOUT_SECONDS = 300.0
READINESS_POLL_SECONDS = 2.0
_REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class UpgradeResult:
    """How an upgrade ended: `upgraded` or `rolled back`, with the savepoint it started from."""

    job: str
    outcome: str
    savepoint: SavepointRecord
    detail: str

    def line(self) -> str:
        return f"{self.job}: {self.outcome} ({self.detail}); savepoint {self.savepoint.id}"


def _candidate_spec(platform: PlatformConfig, job: str, candidate: Path) -> tuple[JobSpec, bytes]:
    """The candidate spec, validated as `conf/jobs/<job>.yaml` would be."""
    content = candidate.read_bytes()
    with tempfile.TemporaryDirectory() as scratch:
        as_installed = Path(scratch) / f"{job}.yaml"
        as_installed.write_bytes(content)
        try:
            spec = load_job(as_installed)
        except ConfigError as exc:
            raise UpgradeError(
                f"candidate {candidate} is not a valid spec for {job!r}: {exc.problem}"
            ) from exc
    if spec.pipeline.sink != find_job(job, platform.conf_dir).pipeline.sink:
        raise UpgradeError(f"candidate {candidate} moves the sink of {job!r}; a new sink is a new job")
    return spec, content


def _scratch_conf(platform: PlatformConfig, job: str, candidate: bytes, root: Path) -> Path:
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
    settings["ledger_url"] = f"sqlite:///{root / 'ledger.db'}"
    (conf_dir / "platform.yaml").write_text(yaml.safe_dump(settings))
    spec = yaml.safe_load(candidate)
    # The running version holds the metrics port; the dry run serves its metrics elsewhere.
    spec["operations"]["metrics_port"] = free_loopback_port()
    (conf_dir / "jobs" / f"{job}.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return conf_dir


def dry_run(
    platform: PlatformConfig,
    job: str,
    candidate: bytes,
    savepoint: SavepointRecord,
    *,
    s3: BaseClient | None = None,
) -> None:
    """Run the candidate on a scratch copy of `savepoint` for one batch; UpgradeError with Spark's reason.

    The batch reuses the savepoint's offsets, so it reads no input but loads the state of every
    stateful operator and plans the whole query against the checkpoint.
    """
    platform.runtime_root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=platform.runtime_root, prefix=f"upgrade-{job}-") as scratch:
        root = Path(scratch)
        conf_dir = _scratch_conf(platform, job, candidate, root)
        scratch_platform = load_platform(conf_dir)
        spec = find_job(job, conf_dir)
        scratch_paths = JobPaths.of(scratch_platform, spec)
        sink_log, checkpoint = scratch_paths.sink_log, scratch_paths.checkpoint
        fetch_savepoint(platform, savepoint, root / "savepoint", s3=s3)
        for restored, target in (
            (root / "savepoint" / "checkpoint", checkpoint),
            (root / "savepoint" / "sink" / "_spark_metadata", sink_log),
        ):
            target.parent.mkdir(parents=True, exist_ok=True)
            restored.rename(target)
        last = savepoint.batch_id
        write_log_entry(
            scratch_paths.replay / str(last + 1),
            (checkpoint / "offsets" / str(last)).read_bytes(),
        )
        try:
            result = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "jobs.runner",
                    "--job",
                    job,
                    "--run-id",
                    "upgrade-dry-run",
                    "--replay-only",
                ],
                cwd=_REPO_ROOT,
                env={**os.environ, CONF_DIR_ENV: str(conf_dir)},
                capture_output=True,
                text=True,
                timeout=DRY_RUN_TIMEOUT_SECONDS,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise UpgradeError(
                f"dry run of the candidate for {job!r} did not finish within {exc.timeout:g}s"
            ) from exc
        if result.returncode != 0:
            heartbeat = read_heartbeat(scratch_paths.heartbeat)
            why = (
                heartbeat.error_message
                if heartbeat is not None and heartbeat.error_message
                else result.stderr.strip()[-2000:]
            )
            raise UpgradeError(f"candidate for {job!r} cannot take over its current state: {why}")


def _await_ready(supervisor: Supervisor, spec: JobSpec, timeout: float) -> str | None:
    """None once the new run is ready; otherwise why it is not (a restart, or the timeout)."""
    job, needed = spec.name, spec.operations.restart.stable_batches
    supervisor.reconcile(job)
    first = supervisor.ledger.current_run(job)
    if first is None:
        return "the new version was not launched"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = supervisor.ledger.current_run(job)
        if run is None or run.run_id != first.run_id:
            ended = next((r for r in supervisor.ledger.runs(job) if r.run_id == first.run_id), first)
            return f"the new version did not stay up ({ended.exit_reason or 'restarted'})"
        heartbeat = read_heartbeat(JobPaths.of(supervisor.platform, spec).heartbeat)
        idle = heartbeat is not None and heartbeat.run_id == run.run_id and heartbeat.event == "idle"
        if run.batches_committed >= needed or idle:
            return None
        time.sleep(READINESS_POLL_SECONDS)
        supervisor.reconcile(job)
    return f"the new version did not commit {needed} batches within {timeout:g}s"


def upgrade(
    supervisor: Supervisor,
    job: str,
    candidate: Path,
    *,
    reason: str,
    readiness_timeout: float = 300.0,
    s3: BaseClient | None = None,
) -> UpgradeResult:
    """Deploy `candidate` as the job's spec from a fresh savepoint; roll back if it is not ready.

    Raises UpgradeError, with the running version untouched, when the candidate is invalid or
    cannot take over the job's state. Returns how the upgrade ended otherwise; a rollback pages.
    """
    platform, ledger = supervisor.platform, supervisor.ledger
    spec, content = _candidate_spec(platform, job, candidate)
    installed = platform.conf_dir / "jobs" / f"{job}.yaml"
    previous = installed.read_bytes()
    running = find_job(job, platform.conf_dir)
    old_version = running.config_version
    decision = ledger.record_decision(
        job, "upgrade", reason, {"from": old_version, "to": spec.config_version, "candidate": str(candidate)}
    )
    with job_lock(platform, job, "upgrade"):
        try:
            savepoint = take_savepoint(platform, ledger, running, s3=s3)
            dry_run(platform, job, content, savepoint, s3=s3)
        except WardenError as exc:
            ledger.set_outcome(decision, f"refused: {exc}")
            raise UpgradeError(str(exc)) from exc
        kept = platform.job_runtime_dir(job) / "upgrade" / "previous.yaml"
        write_log_entry(kept, previous)
        write_log_entry(installed, content)
    supervisor.request(job, "restart", f"upgrade to config {spec.config_version}: {reason}")
    not_ready = _await_ready(supervisor, spec, readiness_timeout)
    if not_ready is None:
        detail = f"config {old_version} -> {spec.config_version}"
        ledger.set_outcome(decision, f"upgraded: {detail}")
        return UpgradeResult(job, "upgraded", savepoint, detail)

    why = f"rollback of upgrade to config {spec.config_version}: {not_ready}"
    supervisor.request(job, "suspend", why)
    supervisor.reconcile(job)
    write_log_entry(installed, previous)
    rewind_job(supervisor, job, reason=why, savepoint_id=savepoint.id, s3=s3)
    supervisor.request(job, "resume", why)
    supervisor.reconcile(job)
    previous_spec = find_job(job, platform.conf_dir)
    supervisor.alerts.raise_alert(
        Alert(
            job=job,
            kind="upgrade_rolled_back",
            severity="critical",
            state="RUNNING",
            reason=f"{not_ready}; back on config {old_version} from savepoint {savepoint.id}",
            last_batch=savepoint.batch_id,
            run_url=None,
            runbook=previous_spec.operations.alerts.runbook,
            channel=previous_spec.operations.alerts.channel,
        )
    )
    supervisor.alerts.deliver_due()
    ledger.set_outcome(decision, f"rolled back: {not_ready}")
    return UpgradeResult(job, "rolled back", savepoint, not_ready)
