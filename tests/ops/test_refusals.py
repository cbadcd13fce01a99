"""Every refusal a rewind or restate can meet is found before anything is stopped (hardening 8).

The job runs (a fake driver: `tests/support/fake_backend.py`) under the real supervisor, ledger
and S3 server; its checkpoint, sink and savepoint are real, written by the session's Spark as in
`test_restate_differential.py`. For each cause the request (`restate`, what `warden restate` and
the Airflow form call) and the reconcile loop (an operation recorded before the cause appeared)
must leave the job exactly as it was: the same run, its driver never stopped or killed, the
desired state unchanged, the checkpoint and sink untouched; and the refusal must be one decision
row naming the cause, and an error saying it. `tests/dags/test_restate.py` does the same with a
real driver through the Airflow form and `warden restate`.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

import pytest
from pyspark.sql import SparkSession

import ops.ledger.store as ledger_module
from ops.alerts import AlertCenter
from ops.control.supervisor import Supervisor
from ops.exceptions import RewindError, WardenError
from ops.ledger.records import SavepointRecord
from ops.ledger.store import Ledger
from ops.recovery.restate import restate
from ops.recovery.rewind import rewind
from ops.s3 import s3_client
from ops.savepoints.store import STATUS_SUPERSEDED, read_manifest, take_savepoint
from ops.spec.job import find_job
from ops.spec.platform import PlatformConfig
from synthetic.generator import write_batch
from tests.ops.test_restate_differential import run_available
from tests.support.clock import FakeClock
from tests.support.drivers import edit_job
from tests.support.fake_backend import FakeBackend
from tests.support.platform import job_paths

JOB = "router"


def quiet_router(spec: dict[str, Any]) -> None:
    """One landing file per batch; no periodic savepoint, so passes take only the steps tested."""
    spec["operations"]["trigger"] = {"interval_seconds": 1, "max_files_per_trigger": 1}
    spec["operations"]["savepoints"]["interval_minutes"] = None


@dataclass
class RunningJob:
    """The router running under the supervisor (fake driver), and what it had when the test began."""

    platform: PlatformConfig
    ledger: Ledger
    backend: FakeBackend
    clock: FakeClock
    supervisor: Supervisor
    savepoint: SavepointRecord | None = None

    def start(self) -> None:
        assert self.supervisor.reconcile(JOB).state == "SUBMITTED"
        self.backend.commit(JOB)
        assert self.supervisor.reconcile(JOB).state == "RUNNING"

    def files(self) -> dict[str, bytes]:
        """Every file of the checkpoint and the sink, by path: what a refusal must not touch."""
        roots = (self.platform.checkpoint_root / JOB, job_paths(self.platform, JOB).sink)
        return {
            str(path): path.read_bytes()
            for root in roots
            if root.is_dir()
            for path in sorted(root.rglob("*"))
            if path.is_file()
        }

    def assert_refused(self, kind: str, cause: str, run_id: str, desired: str = "running") -> None:
        """One `refused` decision row naming `cause`; no open operation; the run and its driver as
        they were; the driver goes on committing and the next pass sees the same run RUNNING."""
        rows = self.ledger.decisions(JOB, action=kind)
        assert len(rows) == 1, [(row.action, row.outcome) for row in rows]
        assert rows[0].outcome is not None and rows[0].outcome.startswith("refused: "), rows[0].outcome
        assert f"[{cause}]" in rows[0].outcome
        assert [refusal["cause"] for refusal in rows[0].inputs["refused"]] == [cause]
        assert self.ledger.operation(JOB) is None
        assert (self.backend.stops, self.backend.kills) == (0, 0)
        assert self.backend.driver(JOB).alive and self.backend.driver(JOB).run_id == run_id
        job = self.ledger.job(JOB)
        assert job is not None and job.desired_state == desired
        self.clock.advance(1)
        batch = self.backend.commit(JOB)
        assert self.supervisor.reconcile(JOB).state == "RUNNING"
        current = self.ledger.current_run(JOB)
        assert current is not None and current.run_id == run_id
        assert current.last_batch_id == batch, "the heartbeat goes on advancing on the same run"


@pytest.fixture
def running(
    platform_conf: PlatformConfig,
    ledger: Ledger,
    fake_backend: FakeBackend,
    fake_clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
) -> RunningJob:
    """The router running, with savepoints only in the catalogue (no checkpoint, no S3)."""
    edit_job(platform_conf, JOB, quiet_router)
    monkeypatch.setattr(ledger_module, "utcnow", fake_clock)
    alerts = AlertCenter(ledger, platform_conf.slack, fake_clock)
    supervisor = Supervisor(platform_conf, ledger, fake_backend, alerts, clock=fake_clock)
    job = RunningJob(platform_conf, ledger, fake_backend, fake_clock, supervisor)
    job.start()
    return job


def catalogued(
    running: RunningJob, job: str, savepoint_id: str, hours_ago: float, status: str = "complete"
) -> None:
    """A savepoint row in the catalogue (these refusals never read its manifest)."""
    running.ledger.add_savepoint(
        SavepointRecord(
            id=savepoint_id,
            job=job,
            batch_id=3,
            created_at=running.clock() - timedelta(hours=hours_ago),
            manifest_key=f"sp/{job}/{savepoint_id}/manifest.json",
            total_bytes=1,
            uploaded_bytes=1,
            status=status,
            config_version="v",
        )
    )


# --- refusals the catalogue and the ledger decide (no checkpoint needed) ---------------------------


@pytest.mark.parametrize(
    "case, cause, says",
    [
        ("unknown savepoint", "no_savepoint", "has no savepoint 'sp-none'"),
        ("another job's savepoint", "other_job", "is a savepoint of job 'sessionizer'"),
        ("superseded savepoint", "superseded", "is superseded"),
        ("a time before the oldest savepoint", "no_savepoint", "the oldest complete one was taken"),
        ("an operation already open", "operation_open", "has a rewind in progress"),
    ],
)
def test_a_restate_the_catalogue_refuses_leaves_the_running_job_as_it_was(
    running: RunningJob, case: str, cause: str, says: str
) -> None:
    ledger, run = running.ledger, running.ledger.current_run(JOB)
    assert run is not None
    catalogued(running, JOB, "sp-old", hours_ago=2)
    catalogued(running, "sessionizer", "sp-sessions", hours_ago=1)
    catalogued(running, JOB, "sp-gone", hours_ago=1, status=STATUS_SUPERSEDED)
    asked: dict[str, Any] = {"savepoint_id": "sp-old"}
    match case:
        case "unknown savepoint":
            asked = {"savepoint_id": "sp-none"}
        case "another job's savepoint":
            asked = {"savepoint_id": "sp-sessions"}
        case "superseded savepoint":
            asked = {"savepoint_id": "sp-gone"}
        case "a time before the oldest savepoint":
            asked = {"before": running.clock() - timedelta(hours=3)}
        case "an operation already open":
            ledger.start_operation(JOB, "rewind", "earlier", 0, "requested", savepoint_id="sp-old")
    with pytest.raises(RewindError, match=cause) as refused:
        restate(running.supervisor, JOB, reason=f"test: {case}", **asked)
    assert says in str(refused.value) and "refused before anything was stopped" in str(refused.value)
    if case == "an operation already open":
        # The earlier operation is not this refusal's: it is still open, then the loop decides it.
        (open_operation,) = [op for op in ledger.operations(JOB) if op.finished_at is None]
        assert open_operation.reason == "earlier"
        ledger.finish_operation(open_operation.id, "closed by the test")
    running.assert_refused("restate", cause, run.run_id)


def test_a_rewind_of_a_running_job_is_refused_and_recorded(running: RunningJob) -> None:
    run = running.ledger.current_run(JOB)
    assert run is not None
    catalogued(running, JOB, "sp-old", hours_ago=1)
    with pytest.raises(RewindError, match="suspend it first"):
        rewind(running.supervisor, JOB, reason="test", savepoint_id="sp-old")
    running.assert_refused("rewind", "job_running", run.run_id)


# --- refusals that need the checkpoint, the sink and the savepoint -----------------------------------


@pytest.fixture
def with_history(running: RunningJob, spark: SparkSession, platform_with_s3: PlatformConfig) -> RunningJob:
    """The router's real checkpoint and sink, two batches before a savepoint and two after it."""
    platform = platform_with_s3
    landing = platform.landing_root / "events"
    for seed in range(2):
        write_batch(landing, 40, 0.05, seed, file_name=f"events-{seed:03d}.json")
    run_available(spark, platform, JOB)
    savepoint = take_savepoint(platform, running.ledger, find_job(JOB, platform.conf_dir))
    for seed in range(2, 4):
        write_batch(landing, 40, 0.05, seed, file_name=f"events-{seed:03d}.json")
    run_available(spark, platform, JOB)
    # The in-process stream wrote the heartbeat file too; the fake driver's is the one to watch.
    running.backend.commit(JOB)
    supervisor = Supervisor(
        platform, running.ledger, running.backend, running.supervisor.alerts, clock=running.clock
    )
    return replace(running, platform=platform, supervisor=supervisor, savepoint=savepoint)


def _input_gone(job: RunningJob) -> None:
    (job.platform.landing_root / "events" / "events-002.json").unlink()


def _offsets_purged(job: RunningJob) -> None:
    (job.platform.checkpoint_root / JOB / "offsets" / "2").unlink()


def _checkpoint_gone(job: RunningJob) -> None:
    shutil.rmtree(job.platform.checkpoint_root / JOB)


def _manifest_gone(job: RunningJob) -> None:
    assert job.savepoint is not None
    s3_client(job.platform).delete_object(Bucket=job.platform.s3.bucket, Key=job.savepoint.manifest_key)


def _object_damaged(job: RunningJob) -> None:
    assert job.savepoint is not None
    manifest = read_manifest(job.platform, job.savepoint)
    offsets = next(entry for entry in manifest["files"] if entry["path"].endswith("offsets/1"))
    key = job.savepoint.manifest_key.rsplit("/", 2)[0] + f"/objects/{offsets['sha256']}"
    s3_client(job.platform).put_object(Bucket=job.platform.s3.bucket, Key=key, Body=b"v1\n{}\n")


def _sink_moved(job: RunningJob) -> None:
    edit_job(job.platform, JOB, lambda spec: spec["pipeline"]["sink"].update(path="router-v2"))


BROKEN: dict[str, tuple[Callable[[RunningJob], None], str, str]] = {
    "replay input gone from the landing zone": (_input_gone, "input_gone", "events-002.json"),
    "offsets of a batch to replay purged": (_offsets_purged, "offsets_purged", "batches 2..2"),
    "checkpoint gone, sink ahead of the savepoint": (_checkpoint_gone, "offsets_purged", "is gone"),
    "savepoint manifest missing": (_manifest_gone, "savepoint_unreadable", "cannot be restored"),
    "savepoint object corrupt": (_object_damaged, "savepoint_unreadable", "does not match its checksum"),
    "sink moved by the spec": (_sink_moved, "incompatible_spec", "the sink has moved"),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_restate_that_cannot_be_exact_is_refused_before_the_driver_is_stopped(
    with_history: RunningJob, case: str
) -> None:
    job = with_history
    run = job.ledger.current_run(JOB)
    assert run is not None and job.savepoint is not None
    breaks, cause, says = BROKEN[case]
    breaks(job)
    files = job.files()
    with pytest.raises(WardenError) as refused:
        restate(job.supervisor, JOB, reason=f"test: {case}", savepoint_id=job.savepoint.id, timeout=30)
    assert (job.backend.stops, job.backend.kills) == (0, 0), "the driver was stopped"
    assert job.files() == files, "nothing of the checkpoint or the sink was touched"
    job.assert_refused("restate", cause, run.run_id)
    assert isinstance(refused.value, RewindError) and f"[{cause}]" in str(refused.value)
    assert says in str(refused.value)
    assert not (job.platform.checkpoint_root / f".rewind-{JOB}").exists(), "no download is left behind"


def test_a_recorded_restate_whose_input_went_since_is_refused_by_the_loop_with_the_driver_untouched(
    with_history: RunningJob,
) -> None:
    """The loop path (the supervision DAG, `warden reconcile`, a restate whose process died): the
    operation was recorded while its input was there; the pass that would stop the driver checks
    again and refuses."""
    job = with_history
    run = job.ledger.current_run(JOB)
    assert run is not None and job.savepoint is not None
    operation = job.supervisor.start_operation(
        JOB, "restate", "test", {}, savepoint_id=job.savepoint.id, savepoint_batch=job.savepoint.batch_id
    )
    _input_gone(job)
    files = job.files()
    ended = job.supervisor.await_operation(operation.id, timeout=60, poll_seconds=0)
    assert (job.backend.stops, job.backend.kills) == (0, 0), "the driver was stopped"
    assert job.backend.driver(JOB).alive
    assert ended.finished_at is not None and ended.failure is not None
    assert "[input_gone]" in ended.failure and "events-002.json" in ended.failure
    assert ended.outcome is not None and ended.outcome.startswith("refused: ")
    (decision,) = job.ledger.decisions(JOB, action="restate")
    assert decision.outcome == ended.outcome
    stop = job.ledger.decisions(JOB, action="stop")[0]
    assert stop.outcome is not None and stop.outcome.startswith("not stopped, the driver runs on")
    assert job.files() == files
    assert (job.backend.stops, job.backend.kills) == (0, 0)
    assert job.backend.driver(JOB).alive
    current = job.ledger.current_run(JOB)
    assert current is not None and current.run_id == run.run_id
    job_record = job.ledger.job(JOB)
    assert job_record is not None and job_record.desired_state == "running"
