"""What every room of the control loop works with: the platform, its ledger, the launch backend,
the alert outbox and the clock (`Control`), and the two things about a job that several rooms ask:
a new run's id and the scale its next driver starts at.

The rooms are module functions over a `Control`: `ops.control.observer` (the job view),
`ops.control.recorder` (the pass's ledger writes), and the actions by family
(`ops.control.drivers`, `ops.control.standbys`, `ops.control.steps`, `ops.control.rescale`,
`ops.control.savepointing`, `ops.control.sink_cleanup`); `ops.control.supervisor` runs the pass
over them and `ops.control.requests` records what operators ask.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from ops.alerts import AlertCenter
from ops.control.launcher import LaunchBackend
from ops.control.scaling import Scale, desired_scale
from ops.ledger.records import JobRecord
from ops.ledger.store import Ledger
from ops.spec.job import JobSpec
from ops.spec.platform import PlatformConfig
from ops.states import Desired, Lifecycle


@dataclass(frozen=True)
class Control:
    """The control loop's services for one platform."""

    platform: PlatformConfig
    ledger: Ledger
    backend: LaunchBackend
    alerts: AlertCenter
    clock: Callable[[], datetime]

    def run_id(self, spec: JobSpec) -> str:
        """A new run's id: the job, the time and a random suffix."""
        return f"{spec.name}-{self.clock():%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"

    def known_job(self, spec: JobSpec) -> JobRecord:
        """The job's record, created (suspended, to run) if the ledger has none yet."""
        return self.ledger.ensure_job(
            spec.name,
            desired_state=Desired.RUNNING,
            state=Lifecycle.SUSPENDED.name,
            config_version=spec.config_version,
        )

    def scale_of(self, spec: JobSpec) -> Scale:
        """The scale the job's next driver is launched at (`ops.control.scaling.desired_scale`)."""
        return desired_scale(spec, self.ledger.job(spec.name))
