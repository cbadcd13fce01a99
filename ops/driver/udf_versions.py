"""Which version of each script UDF a batch ran: the store `jobs.script_udfs` keeps per job.

A script UDF's file may change while its job runs. The first task of each micro-batch to call one
of the job's UDFs decides, for the whole batch, which version of every UDF file it runs, and
records that decision; every other task of the batch, a retry of it and a replay of it after a
crash read the decision instead of the file. Batch boundaries are the only points where the
logic changes, and a batch is recomputed with the logic it ran.

The store, under the job's runtime directory (`JobPaths.udf_versions`):

    versions/<name>-<version>.py          each version ever decided, by its content's digest
    batches/<query id>/<batch id>.json     the decision of each batch of one checkpoint's query

Decisions are kept per query id because a backfill runs the same job's query over another
checkpoint, whose batch ids say nothing about the live one's. The newest `KEPT_DECISIONS` of a
query are kept: a replay after a crash recomputes the newest batch only, and a rewind forgets the
batches it recomputes (`forget_after`), so they take the versions installed when they run again.

A version that does not load is refused: the batch keeps the version before it and the decision
names the refused one and its error, which the listener reports in the heartbeat and the
supervisor pages once (`ops.control.health`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ops.atomic import create_atomically, write_atomically

KEPT_DECISIONS = 100
# The local properties Spark gives every task of a streaming query's micro-batch.
QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"


def version_of(source: bytes) -> str:
    """A UDF file's version: the start of its content's digest."""
    return hashlib.sha256(source).hexdigest()[:12]


@dataclass(frozen=True)
class UdfDecision:
    """The versions one batch runs, by UDF name, and the versions it refused with why."""

    batch_id: int
    versions: dict[str, str]
    refused: dict[str, Refusal] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> UdfDecision:
        document = json.loads(text)
        refused = {name: Refusal(**value) for name, value in document["refused"].items()}
        return cls(document["batch_id"], document["versions"], refused)


@dataclass(frozen=True)
class Refusal:
    """A version of a UDF file that did not load, and the error it raised."""

    version: str
    error: str

    def line(self, name: str) -> str:
        return f"udf {name!r} version {self.version} refused: {self.error}"


def version_file(store: Path, name: str, version: str) -> Path:
    return store / "versions" / f"{name}-{version}.py"


def keep_version(store: Path, name: str, source: bytes) -> str:
    """Keep `source` as a version of UDF `name` (once); its version."""
    version = version_of(source)
    path = version_file(store, name, version)
    if not path.exists():
        write_atomically(path, source)
    return version


def _decisions(store: Path, query_id: str) -> Path:
    return store / "batches" / query_id


def read_decision(store: Path, query_id: str, batch_id: int) -> UdfDecision | None:
    """The decision of one batch, or None before its first task made it."""
    try:
        return UdfDecision.from_json((_decisions(store, query_id) / f"{batch_id}.json").read_text())
    except FileNotFoundError:
        return None


def decided_batches(store: Path, query_id: str) -> list[int]:
    """The batch ids of the query with a decision, oldest first."""
    directory = _decisions(store, query_id)
    if not directory.is_dir():
        return []
    return sorted(int(path.stem) for path in directory.glob("*.json"))


def previous_decision(store: Path, query_id: str, batch_id: int) -> UdfDecision | None:
    """The newest decision of a batch before `batch_id`, or None."""
    earlier = [batch for batch in decided_batches(store, query_id) if batch < batch_id]
    return read_decision(store, query_id, earlier[-1]) if earlier else None


def record_decision(store: Path, query_id: str, decision: UdfDecision) -> UdfDecision:
    """Record the decision of its batch unless another task recorded one first; the one in force.

    The file is created whole, never over another (`create_atomically`): two tasks deciding at
    once both end up with the first one's decision.
    """
    path = _decisions(store, query_id) / f"{decision.batch_id}.json"
    try:
        create_atomically(path, decision.to_json())
    except FileExistsError:
        found = read_decision(store, query_id, decision.batch_id)
        assert found is not None
        return found
    for old in decided_batches(store, query_id)[:-KEPT_DECISIONS]:
        (_decisions(store, query_id) / f"{old}.json").unlink(missing_ok=True)
    return decision


def forget_after(store: Path, query_id: str, batch_id: int) -> list[int]:
    """Drop the decisions of the batches after `batch_id` (a rewind recomputes them with the
    versions installed then); the batch ids dropped."""
    later = [batch for batch in decided_batches(store, query_id) if batch > batch_id]
    for batch in later:
        (_decisions(store, query_id) / f"{batch}.json").unlink(missing_ok=True)
    return later
