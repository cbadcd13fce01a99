"""Why a rewind, restate or upgrade is refused, and the ledger row a refusal leaves.

Every refusal is found before anything is stopped or touched (`ops.recovery.rewind.preflight` for
rewinds, restatements and the rewind of an upgrade's rollback; the candidate checks and the dry run
for upgrades). A refused request
leaves a decision row with the operation's name as its action, the operator's reason, the causes
as inputs and `refused: ...` as its outcome (`warden decisions JOB` shows it), and the job as it
was: same desired state, same driver, same run.

The causes a rewind or restate can meet:

    operation_open        another rewind, restate or upgrade of the job is still open
    job_running           a rewind asked for while a driver runs (a restate stops it itself)
    no_savepoint          no savepoint by that id, or none taken before the time given
    other_job             the savepoint belongs to another job
    superseded            a rewind went back before the savepoint; the output it lists is gone
    savepoint_unreadable  its manifest or an object is missing in S3, or fails its checksum
    incompatible_spec     the savepoint is of another job, or the job's sink has moved since
    offsets_purged        the offsets of a batch to replay are gone (Spark's retention, or the
                          checkpoint itself is gone while the sink holds later batches)
    input_gone            an input file a batch to replay read is no longer in the landing zone
                          (nor in the archive)
    sink_expired          the savepoint lists sink files the bounded sink log has expired since
                          (published partitions past `operations.compaction.sink_retention_hours`)
    sink_has_output       a bootstrap savepoint (made by a backfill) over a sink that already
                          has output: its sink log lists none of those files, so they would be lost

and an upgrade, on request (its dry run refuses what the candidate cannot take over later, also
with the running version untouched):

    operation_open        as above
    candidate_invalid     the candidate file is not a valid spec of the job, moves its sink, or is
                          the installed spec
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ops.exceptions import RewindError
from ops.ledger.store import Ledger


class Cause(enum.StrEnum):
    """Why an operation cannot go ahead (the module docstring says when each applies)."""

    OPERATION_OPEN = "operation_open"
    JOB_RUNNING = "job_running"
    NO_SAVEPOINT = "no_savepoint"
    OTHER_JOB = "other_job"
    SUPERSEDED = "superseded"
    SAVEPOINT_UNREADABLE = "savepoint_unreadable"
    INCOMPATIBLE_SPEC = "incompatible_spec"
    OFFSETS_PURGED = "offsets_purged"
    INPUT_GONE = "input_gone"
    SINK_EXPIRED = "sink_expired"
    SINK_HAS_OUTPUT = "sink_has_output"
    CANDIDATE_INVALID = "candidate_invalid"


@dataclass(frozen=True)
class Refusal:
    """One reason an operation cannot go ahead, in words an operator can act on."""

    cause: Cause
    message: str

    def as_input(self) -> dict[str, str]:
        return {"cause": str(self.cause), "message": self.message}


class RewindRefused(RewindError):
    """A rewind's checks found reasons not to go ahead; nothing was touched."""

    def __init__(self, refusals: Iterable[Refusal]) -> None:
        self.refusals = tuple(refusals)
        super().__init__("; ".join(refusal.message for refusal in self.refusals))


def refusal_text(kind: str, job: str, refusals: Iterable[Refusal]) -> str:
    """The one line an operator reads: which operation, of which job, and every cause."""
    causes = "; ".join(f"[{refusal.cause}] {refusal.message}" for refusal in refusals)
    return f"{kind} of {job!r} refused before anything was stopped or touched: {causes}"


def record_refusal(
    ledger: Ledger,
    job: str,
    kind: str,
    reason: str,
    refusals: Iterable[Refusal],
    inputs: Mapping[str, Any] | None = None,
) -> str:
    """Write the refused request as a decision row (action `kind`, outcome `refused: ...`); its text.

    A job never supervised before has no row in `jobs` yet; decisions are keyed by name only, so
    its refusal is recorded all the same.
    """
    refusals = tuple(refusals)
    text = refusal_text(kind, job, refusals)
    decision = ledger.record_decision(
        job,
        kind,
        reason,
        {**(inputs or {}), "refused": [refusal.as_input() for refusal in refusals]},
    )
    ledger.set_outcome(decision, f"refused: {text}")
    return text
