"""A job's recent progress, kept across driver restarts, for the job board (`ops.console`).

The heartbeat holds the newest driver's last few batches; the board also needs an hour of rates
for its sparklines and the time breakdown of the recent batches for its bottleneck diagnosis. The
driver's listener sees every batch, so it keeps them, in `<runtime>/jobs/<job>/history.json`,
rewritten atomically after each batch:

- `minutes`: one bucket per wall-clock minute of the last `HISTORY_MINUTES` (input rows, batches,
  summed input and processing rates), the sparkline's points;
- `batches`: the last `HISTORY_BATCHES` progress records, trimmed to what the diagnosis reads
  (`TRIMMED_KEYS`; the same shape as Spark's `StreamingQueryProgress.json`).

A new driver starts from the file its predecessor left, so a restart shows as a gap, not as lost
history. The supervisor's passes could not keep it: a healthy job's pass runs only when something
changes, so it would miss the batches in between. The file is small (a few tens of kB) so the board
can read it for every job on each refresh.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from ops.atomic import write_atomically

HISTORY_FILE = "history.json"
HISTORY_MINUTES = 60
HISTORY_BATCHES = 30
# The parts of a progress record the diagnosis reads; sources keep only their row counts and
# metrics (their descriptions quote whole paths).
TRIMMED_KEYS = (
    "batchId",
    "timestamp",
    "numInputRows",
    "inputRowsPerSecond",
    "processedRowsPerSecond",
    "batchDuration",
    "durationMs",
    "eventTime",
    "stateOperators",
)


@dataclass(frozen=True)
class MinuteRates:
    """The batches that ended in one wall-clock minute (`minute`: epoch seconds of its start)."""

    minute: int
    batches: int
    input_rows: int
    input_rate_sum: float
    processed_rate_sum: float

    @property
    def input_rate(self) -> float:
        return self.input_rate_sum / self.batches if self.batches else 0.0

    @property
    def processed_rate(self) -> float:
        return self.processed_rate_sum / self.batches if self.batches else 0.0


@dataclass(frozen=True)
class ProgressHistory:
    minutes: tuple[MinuteRates, ...] = ()
    batches: tuple[dict[str, Any], ...] = field(default_factory=tuple)

    def with_batch(self, progress: Mapping[str, Any], at: float) -> ProgressHistory:
        """This history with one more batch that ended at `at` (epoch seconds)."""
        minute = int(at // 60) * 60
        input_rate = _finite(progress.get("inputRowsPerSecond"))
        processed_rate = _finite(progress.get("processedRowsPerSecond"))
        rows = int(progress.get("numInputRows") or 0)
        minutes = [bucket for bucket in self.minutes if bucket.minute > minute - HISTORY_MINUTES * 60]
        if minutes and minutes[-1].minute == minute:
            last = minutes[-1]
            minutes[-1] = replace(
                last,
                batches=last.batches + 1,
                input_rows=last.input_rows + rows,
                input_rate_sum=last.input_rate_sum + input_rate,
                processed_rate_sum=last.processed_rate_sum + processed_rate,
            )
        else:
            minutes.append(MinuteRates(minute, 1, rows, input_rate, processed_rate))
        trimmed = trim_progress(progress)
        return ProgressHistory(tuple(minutes), (*self.batches, trimmed)[-HISTORY_BATCHES:])

    def to_json(self) -> str:
        return json.dumps({"minutes": [asdict(bucket) for bucket in self.minutes], "batches": self.batches})

    @classmethod
    def from_json(cls, text: str) -> ProgressHistory:
        document = json.loads(text)
        return cls(
            tuple(MinuteRates(**bucket) for bucket in document.get("minutes", ())),
            tuple(document.get("batches", ())),
        )


def _finite(value: Any) -> float:
    number = float(value) if value is not None else 0.0
    return number if math.isfinite(number) else 0.0


def trim_progress(progress: Mapping[str, Any]) -> dict[str, Any]:
    """The parts of a progress record the board keeps (`TRIMMED_KEYS`, sources' counts and metrics)."""
    trimmed = {key: progress[key] for key in TRIMMED_KEYS if key in progress}
    trimmed["sources"] = [
        {"numInputRows": source.get("numInputRows"), "metrics": source.get("metrics") or {}}
        for source in progress.get("sources") or ()
    ]
    return trimmed


def history_path(heartbeat: Path) -> Path:
    """The history file beside a job's heartbeat."""
    return heartbeat.with_name(HISTORY_FILE)


def read_history(path: Path) -> ProgressHistory:
    """The job's history; empty when no driver has written one, or the file is not readable JSON
    (a history is a convenience: a bad one never stops a driver or the board)."""
    try:
        return ProgressHistory.from_json(path.read_text())
    except (FileNotFoundError, ValueError, TypeError):
        return ProgressHistory()


def write_history(path: Path, history: ProgressHistory) -> None:
    write_atomically(path, history.to_json())


def rates_since(history: ProgressHistory, since: datetime) -> Sequence[MinuteRates]:
    """The minute buckets that start at or after `since`."""
    floor = since.timestamp() - 60
    return [bucket for bucket in history.minutes if bucket.minute > floor]
