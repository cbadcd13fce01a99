"""A job's recent progress, kept across driver restarts, for the job board (`ops.console`).

The heartbeat holds the newest driver's last few batches; the board also needs an hour of rates
for its sparklines and the time breakdown of the recent batches for its bottleneck diagnosis. The
driver's listener sees every batch, so it keeps them beside the heartbeat in `<runtime>/jobs/<job>/`,
both files rewritten atomically after each batch:

- `rates.json`: one bucket per wall-clock minute of the last `HISTORY_MINUTES` (input rows,
  batches, summed input and processing rates), the sparkline's points, and when the newest batch
  ended; the board reads it for every job on each refresh, so it stays a few kB;
- `batches.json`: the last `HISTORY_BATCHES` progress records, trimmed to what the diagnosis reads
  (`TRIMMED_KEYS`; the same shape as Spark's `StreamingQueryProgress.json`), for the job's page.

A new driver starts from the file its predecessor left, so a restart shows as a gap, not as lost
history. The supervisor's passes could not keep it: a healthy job's pass runs only when something
changes, so it would miss the batches in between.
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

RATES_FILE = "rates.json"
BATCHES_FILE = "batches.json"
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
    # When the newest batch ended (epoch seconds); kept with the rates, so the board reads no batches.
    last_batch_end: float | None = None

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
        return ProgressHistory(tuple(minutes), (*self.batches, trimmed)[-HISTORY_BATCHES:], at)

    def rates_json(self) -> str:
        return json.dumps(
            {"minutes": [asdict(bucket) for bucket in self.minutes], "last_batch_end": self.last_batch_end}
        )

    def batches_json(self) -> str:
        return json.dumps(self.batches)


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


def _read_json(path: Path) -> Any:
    """A history file's content; None when no driver has written it or it is not readable JSON (a
    history is a convenience: a bad one never stops a driver or the board)."""
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return None


def read_rates(heartbeat: Path) -> ProgressHistory:
    """The job's minute rates and newest batch end (no batches), from beside its heartbeat."""
    document = _read_json(heartbeat.with_name(RATES_FILE))
    if not isinstance(document, dict):
        return ProgressHistory()
    try:
        minutes = tuple(MinuteRates(**bucket) for bucket in document.get("minutes", ()))
    except TypeError:
        return ProgressHistory()
    return ProgressHistory(minutes, (), document.get("last_batch_end"))


def read_history(heartbeat: Path) -> ProgressHistory:
    """The job's whole history, rates and batches, from beside its heartbeat."""
    rates = read_rates(heartbeat)
    batches = _read_json(heartbeat.with_name(BATCHES_FILE))
    return replace(rates, batches=tuple(batches) if isinstance(batches, list) else ())


def write_history(heartbeat: Path, history: ProgressHistory) -> None:
    """Rewrite both history files beside the job's heartbeat."""
    write_atomically(heartbeat.with_name(BATCHES_FILE), history.batches_json())
    write_atomically(heartbeat.with_name(RATES_FILE), history.rates_json())


def rates_since(history: ProgressHistory, since: datetime) -> Sequence[MinuteRates]:
    """The minute buckets that start at or after `since`."""
    floor = since.timestamp() - 60
    return [bucket for bucket in history.minutes if bucket.minute > floor]
