"""The replay queue a rewind leaves for the driver: the original offsets of batches to recompute.

A rewind keeps each later batch's original `offsets/<k>` in `<runtime>/jobs/<job>/replay/`. The
driver stages them into its checkpoint one at a time before it resumes its trigger (`jobs.runtime`),
so batch boundaries and watermarks are those of the original run (`ops.recovery.rewind` explains why).
"""

from __future__ import annotations

from pathlib import Path

from ops.driver.checkpoint import log_entries, write_log_entry
from ops.exceptions import RewindError
from ops.spec.platform import PlatformConfig


def replay_dir(platform: PlatformConfig, job: str) -> Path:
    """The job's replay queue: the original `offsets/<k>` entries still to be replayed."""
    return platform.job_runtime_dir(job) / "replay"


def pending_replay(platform: PlatformConfig, job: str) -> list[int]:
    """The batch ids queued for replay, oldest first."""
    return sorted(log_entries(replay_dir(platform, job)))


def stage_replay_batch(platform: PlatformConfig, job: str, batch_id: int) -> bool:
    """Put a queued batch's original offsets into the checkpoint; False if it is already committed.

    Spark re-runs the newest batch that has offsets but no commit, with exactly those offsets.
    """
    checkpoint = platform.checkpoint_root / job
    if (checkpoint / "commits" / str(batch_id)).is_file():
        return False
    queued = replay_dir(platform, job) / str(batch_id)
    write_log_entry(checkpoint / "offsets" / str(batch_id), queued.read_bytes())
    return True


def finish_replay_batch(platform: PlatformConfig, job: str, batch_id: int) -> None:
    """Drop a replayed batch from the queue once its commit is in the checkpoint."""
    if not (platform.checkpoint_root / job / "commits" / str(batch_id)).is_file():
        raise RewindError(f"replay of batch {batch_id} of {job!r} ended without a commit")
    (replay_dir(platform, job) / str(batch_id)).unlink()
