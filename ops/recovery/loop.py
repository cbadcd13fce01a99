"""The control loop as the recovery requests see it: what `rewind_job`, a restatement's and an
upgrade's requests need of it, declared here so that no module of `ops.recovery` imports the loop
(`ops.control.supervisor.Supervisor` is one; the loop calls the recovery steps, never the other
way round, and `make check`'s import contracts hold that)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from ops.ledger.records import OperationRecord, RunRecord
from ops.ledger.store import Ledger
from ops.spec.platform import PlatformConfig


class Liveness(Protocol):
    """Whether a run's driver process is alive (a launch backend)."""

    def is_alive(self, run: RunRecord) -> bool: ...


class LoopServices(Protocol):
    """The platform, ledger and launch backend of the loop: what a check of a recovery reads
    (`ops.recovery.rewind.preflight`, which the loop's steps run too)."""

    @property
    def platform(self) -> PlatformConfig: ...

    @property
    def ledger(self) -> Ledger: ...

    @property
    def backend(self) -> Liveness: ...


class ControlLoop(LoopServices, Protocol):
    """The loop's services and its two calls for an operation: record it for the loop to carry
    out, and run the loop's passes until it is closed."""

    def start_operation(
        self, job: str, kind: str, reason: str, inputs: Mapping[str, Any], **facts: Any
    ) -> OperationRecord: ...

    def await_operation(
        self,
        operation_id: int,
        *,
        timeout: float | None = ...,
        progress: Callable[[str], None] | None = ...,
        poll_seconds: float = ...,
    ) -> OperationRecord: ...
