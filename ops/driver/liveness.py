"""What a driver is doing between the records of what it finished: its liveness record.

The heartbeat (`ops.driver.telemetry`) is written when the query finishes something: a batch
committed, an idle trigger. A slow JVM start or a long batch writes none for minutes, and the
heartbeat's age alone cannot tell such a driver from a hung one. So every driver also rewrites
`liveness.json` beside the heartbeat every few seconds, from before its JVM starts
(`ops.driver.reporter`): its phase (`starting`: the JVM and the SparkSession; `planning`: the
session is up and the query is being planned and started; `running`: the query runs) and the last
time it moved. The supervisor (`ops.control.health`) calls a driver stuck only when it has not
moved for the grace; one that moves but has committed nothing yet is slow, not stuck.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

Phase = Literal["starting", "planning", "running"]


@dataclass(frozen=True)
class Liveness:
    """The newest liveness record of a driver; times are epoch seconds."""

    run_id: str
    pid: int
    phase: Phase
    phase_since: float
    moved_at: float
    at: float
    # Tasks completed during this run (as far as the reports saw), and the stages active now.
    tasks_completed: int = 0
    active_stages: int = 0
    cpu_seconds: float = 0.0

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Liveness:
        return cls(**json.loads(text))


def read_liveness(path: Path) -> Liveness | None:
    """The newest liveness record, or None if the driver has not written one (or it is unreadable)."""
    try:
        return Liveness.from_json(path.read_text())
    except (FileNotFoundError, ValueError, TypeError):
        return None
