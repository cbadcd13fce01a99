"""An upgrade's output check (`operations.upgrade.output_check`): how far the candidate's output
moved from the running version's over the same input, and when that refuses the upgrade.

The dry-run driver (`jobs.output_shift`) computes both versions' rows over the input the newest
batch of the upgrade's savepoint read (`newest_batch_input`, from the copy's checkpoint), measures
the shift of the checked column (`ks_statistic`) and writes an `OutputShift` where
`ops.recovery.upgrade.dry_run_verdict` reads it. Only the numbers cross that line: this module
starts no Spark.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ops.driver.checkpoint import log_entries, read_offsets, source_files, source_log_offset
from ops.spec.model import Model
from ops.spec.paths import JobPaths


class OutputShift(Model):
    """The comparison of `column` between the running version's rows and the candidate's."""

    column: str
    max_shift: float
    # The savepoint's batch whose input both versions computed (None: no retained batch read any).
    batch_id: int | None
    running_rows: int = 0
    candidate_rows: int = 0
    shift: float = 0.0
    running_mean: float | None = None
    candidate_mean: float | None = None
    # Input files of that batch that are no longer in the landing zone.
    missing_inputs: tuple[str, ...] = ()

    def refusal(self) -> str | None:
        """Why the candidate is refused, or None when its output is close enough (or there was no
        input to compare: the readiness check after the switch still guards it)."""
        if self.missing_inputs:
            return (
                f"cannot compare {self.column!r}: {len(self.missing_inputs)} input files of batch "
                f"{self.batch_id} are gone from the landing zone, e.g. {self.missing_inputs[0]}"
            )
        if self.batch_id is None or self.shift <= self.max_shift:
            return None
        return (
            f"the candidate's {self.column!r} moved by {self.shift:.3f} (Kolmogorov-Smirnov) from the "
            f"running version's over the input of batch {self.batch_id} ({self.candidate_rows:,} against "
            f"{self.running_rows:,} rows; mean {_mean(self.candidate_mean)} against "
            f"{_mean(self.running_mean)}), more than operations.upgrade.output_check.max_shift "
            f"{self.max_shift:g}"
        )


def _mean(value: float | None) -> str:
    return "none" if value is None else f"{value:.4g}"


def ks_statistic(running: np.ndarray, candidate: np.ndarray) -> float:
    """The two-sample Kolmogorov-Smirnov statistic: the largest gap between the two samples'
    empirical cumulative distributions (0 when one is empty: nothing to tell apart)."""
    if running.size == 0 or candidate.size == 0:
        return 0.0
    running, candidate = np.sort(running), np.sort(candidate)
    values = np.concatenate([running, candidate])
    below_running = np.searchsorted(running, values, side="right") / running.size
    below_candidate = np.searchsorted(candidate, values, side="right") / candidate.size
    return float(np.max(np.abs(below_running - below_candidate)))


def newest_batch_input(paths: JobPaths) -> tuple[int, dict[str, list[Path]]] | None:
    """The newest batch of the checkpoint whose sources read any file, with the files it read by
    input name (a file belongs to the input whose landing directory holds it); None if no batch
    whose offsets are still retained read a file."""
    retained = log_entries(paths.offsets)
    for batch_id in sorted(retained, reverse=True):
        # A batch starts where the one before it ended: without that one's offsets (purged), the
        # files it read are unknown, and so are those of every older batch.
        if batch_id > 0 and batch_id - 1 not in retained:
            break
        _, ends = read_offsets((paths.offsets / str(batch_id)).read_bytes())
        starts: list[object] = []
        if batch_id > 0:
            _, starts = read_offsets((paths.offsets / str(batch_id - 1)).read_bytes())
        read: list[Path] = []
        for index, end in enumerate(ends):
            start = starts[index] if index < len(starts) else None
            read += source_files(paths.sources / str(index), source_log_offset(start), source_log_offset(end))
        if read:
            return batch_id, {
                name: [path for path in read if path.parent == landing]
                for name, landing in paths.landing.items()
            }
    return None
