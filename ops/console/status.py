"""A job's status as `warden status` and the job board both show it, computed once: the state
(INVALID for a job file that does not validate or that Spark's analyzer rejected, NEW for one the
ledger has not seen), the desired state, the failed runs of the last 24 hours (the restarts they
caused) and the open incidents. The ledger is read with a fixed number of queries whatever the
number of jobs; the callers add what only they show (the board its rates and savepoints, the CLI
its driver's live view)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from ops.alerts import is_open_incident
from ops.exceptions import ConfigError
from ops.ledger.records import JobRecord
from ops.ledger.store import Ledger
from ops.spec.job import JobSpec
from ops.states import INVALID

RESTARTS_WINDOW = timedelta(hours=24)
NEW = "NEW"


@dataclass(frozen=True)
class JobStatus:
    """What both views say of a job."""

    job: str
    state: str
    state_reason: str
    desired_state: str
    # Why the job file does not validate (or Spark's analyzer refused it); None when it does.
    config_error: str | None
    restarts_24h: int
    # The kinds of the job's open incidents, oldest first.
    open_alerts: list[str]


def job_statuses(
    ledger: Ledger, specs: Mapping[str, JobSpec | ConfigError], now: datetime, job: str | None = None
) -> dict[str, JobStatus]:
    """The status of every job with a file (`specs`: each job file's spec, or why it does not
    validate) or a ledger record, by name; only `job`'s when given."""
    records = {record.name: record for record in ledger.jobs() if job is None or record.name == job}
    restarts = ledger.failed_runs_since(now - RESTARTS_WINDOW, job)
    open_alerts: dict[str, list[str]] = {}
    for newest in ledger.newest_alerts(job):
        if is_open_incident(newest):
            open_alerts.setdefault(newest.job, []).append(newest.kind)
    names = sorted((set(specs) if job is None else {job} & set(specs)) | set(records))
    return {
        name: _status(
            name, specs.get(name), records.get(name), restarts.get(name, 0), open_alerts.get(name, [])
        )
        for name in names
    }


def _status(
    name: str, spec: JobSpec | ConfigError | None, record: JobRecord | None, restarts: int, alerts: list[str]
) -> JobStatus:
    invalid = isinstance(spec, ConfigError)
    return JobStatus(
        job=name,
        state=INVALID if invalid else (record.state if record else NEW),
        state_reason=record.state_reason if record else "",
        desired_state=record.desired_state if record else "-",
        config_error=str(spec) if invalid else None,
        restarts_24h=restarts,
        open_alerts=alerts,
    )
