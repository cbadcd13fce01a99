"""The replay queue a rewind leaves for the driver: the original offsets of batches to recompute.

A rewind keeps each later batch's original `offsets/<k>` in the job's replay directory
(`JobPaths.replay`). The driver stages them into its checkpoint one at a time before it resumes its
trigger (`jobs.runtime`), so batch boundaries and watermarks are those of the original run
(`ops.recovery.rewind` explains why).
"""

from __future__ import annotations

from ops.driver.checkpoint import log_entries, write_log_entry
from ops.exceptions import RewindError
from ops.spec.paths import JobPaths


def pending_replay(paths: JobPaths) -> list[int]:
    """The batch ids queued for replay, oldest first."""
    return sorted(log_entries(paths.replay))


def stage_replay_batch(paths: JobPaths, batch_id: int) -> bool:
    """Put a queued batch's original offsets into the checkpoint; False if it is already committed.

    Spark re-runs the newest batch that has offsets but no commit, with exactly those offsets.
    """
    if (paths.commits / str(batch_id)).is_file():
        return False
    write_log_entry(paths.offsets / str(batch_id), (paths.replay / str(batch_id)).read_bytes())
    return True


def finish_replay_batch(paths: JobPaths, batch_id: int) -> None:
    """Drop a replayed batch from the queue once its commit is in the checkpoint."""
    if not (paths.commits / str(batch_id)).is_file():
        raise RewindError(f"replay of batch {batch_id} of {paths.job!r} ended without a commit")
    (paths.replay / str(batch_id)).unlink()
