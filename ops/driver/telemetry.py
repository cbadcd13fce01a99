"""The heartbeat a driver writes and the supervisor reads.

The driver's `StreamingQueryListener` (in `ops.driver.listener`) rewrites one small JSON file per job on
every batch, on idle and on termination. The file is replaced atomically, so a reader always sees a
whole record. It carries a short window of recent batches so the supervisor can judge "falling
behind" without talking to the driver.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from ops.atomic import write_atomically

HeartbeatEvent = Literal["started", "progress", "idle", "terminated"]
RECENT_BATCHES = 10
# The label every driver metric (and every batch task's pushed one) carries the job it measures in,
# so one Prometheus query or dashboard covers all drivers. Not `job`: Prometheus sets that label to
# the scrape job's name and would rename ours.
JOB_LABEL = "job_name"


@dataclass(frozen=True)
class BatchSample:
    """One finished micro-batch, as the listener saw it."""

    batch_id: int
    num_input_rows: int
    input_rows_per_second: float
    processed_rows_per_second: float
    duration_ms: int
    backlog_files: int | None = None
    # When the batch's trigger started (epoch seconds; None from drivers that did not say): the
    # wall time between batches, which idle triggers (no batch, no sample) leave out otherwise.
    started_at: float | None = None
    # The version of each script UDF the batch ran (`ops.driver.udf_versions`); None for a job
    # without any.
    udf_versions: dict[str, str] | None = None


@dataclass(frozen=True)
class Heartbeat:
    """The newest record a driver wrote; `at` is epoch seconds."""

    job: str
    run_id: str
    pid: int
    event: HeartbeatEvent
    at: float
    batch_id: int | None = None
    state_rows: int | None = None
    state_memory_bytes: int | None = None
    watermark: str | None = None
    error_class: str | None = None
    error_message: str | None = None
    recent: tuple[BatchSample, ...] = field(default_factory=tuple)
    # The script UDF versions the newest batch refused to load, a line each by UDF name.
    udf_refused: dict[str, str] = field(default_factory=dict)

    @property
    def last_sample(self) -> BatchSample | None:
        return self.recent[-1] if self.recent else None

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Heartbeat:
        document = json.loads(text)
        document["recent"] = tuple(BatchSample(**sample) for sample in document.get("recent", ()))
        return cls(**document)


def write_heartbeat(path: Path, heartbeat: Heartbeat) -> None:
    """Replace the heartbeat file atomically, so the supervisor never reads half of one."""
    write_atomically(path, heartbeat.to_json())


def read_heartbeat(path: Path) -> Heartbeat | None:
    """The newest heartbeat, or None if the driver has not written one."""
    try:
        return Heartbeat.from_json(path.read_text())
    except FileNotFoundError:
        return None
