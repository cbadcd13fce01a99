"""The supervisor's act step against a real ledger, with a launch backend that refuses to start."""

from __future__ import annotations

from ops.alerts import AlertCenter
from ops.config import JobSpec, PlatformConfig
from ops.exceptions import LaunchError
from ops.ledger import Ledger, RunRecord
from ops.supervisor import FAILURE, Supervisor


class RefusingBackend:
    """A backend whose launches fail (e.g. no python, no disk); counts the attempts."""

    name = "refusing"

    def __init__(self) -> None:
        self.launches = 0

    def launch(self, spec: JobSpec, run_id: str):
        self.launches += 1
        raise LaunchError(f"cannot start driver for job {spec.name!r}: [Errno 28] No space left on device")

    def is_alive(self, run: RunRecord) -> bool:
        return False

    def stop(self, run: RunRecord, timeout: float) -> str:
        return "already exited"

    def kill(self, run: RunRecord) -> None:
        return None


def test_a_launch_that_fails_is_a_failed_run_and_backs_off(
    platform_conf: PlatformConfig, ledger: Ledger
) -> None:
    backend = RefusingBackend()
    supervisor = Supervisor(platform_conf, ledger, backend, AlertCenter(ledger, platform_conf.slack))
    first = supervisor.reconcile("router")
    assert first.actions[0].startswith("launch: failed: launch: cannot start driver")
    second = supervisor.reconcile("router")
    assert backend.launches == 1
    assert second.state == "RESTARTING"
    (run,) = ledger.runs("router")
    assert run.exit_reason.startswith(FAILURE + "launch:") and run.stopped_at is not None
