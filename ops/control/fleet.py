"""The fleet watch: which of a platform's jobs need a supervision pass now, found cheaply enough to
watch hundreds of jobs every second from one process (the `warden_fleet` DAG's task, once the
platform has `supervision.fleet_from_jobs` jobs).

A job's own watch asks `Supervisor.attention` every second: a full look (its job file loaded, a
dozen ledger reads, its process, heartbeat and backlog). That is cheap for a handful of jobs and a
core's worth for hundreds. `FleetWatch.sweep` first takes a quick look at every job (three ledger
queries for the whole fleet, and a stat of each job's file and heartbeat) and gives the full look
only to the jobs that are not steady. A job is steady when all of these hold:
- its record says running and it is to run;
- no restart was requested since its run started, and no scale other than its run's is set;
- it has no open operation, no alert due and no warm standby to keep;
- its run's driver is alive (its pid, with its start time);
- its heartbeat was written within half its stuck grace;
- its job file is the one its last pass saw.

A steady job still gets a pass every `supervision.pass_every_seconds`, as a job's own watch gives
it one every minute; those passes are spread over the sweeps, the longest waiting first. That
pass records its progress and catches what only a full look sees: a savepoint due, a scale the
autoscaler recommends, a driver that falls behind.

The fleet supervises every valid job it has seen before (one the ledger has a record of) and
those of `autostart_jobs`. A new job starts with `warden start JOB` (a resume request) or the
`warden_resume` form, where on a small platform unpausing its supervision DAG starts it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ops.control.supervisor import Supervisor
from ops.ledger.records import JobRecord, RunRecord
from ops.spec.analysis import with_verdicts
from ops.spec.job import JobSpec, job_file, job_files, load_jobs
from ops.spec.paths import JobPaths
from ops.states import Desired, Lifecycle

# The reason of a steady job's periodic pass.
PERIODIC = None


@dataclass(frozen=True)
class Due:
    """A job that needs a pass: why (`Supervisor.attention`'s reason), or PERIODIC."""

    job: str
    reason: str | None


@dataclass(frozen=True)
class _Pass:
    """When a job's last pass ran (monotonic seconds) and its job file's stamp then."""

    at: float
    file_stamp: tuple[int, int] | None


def _stamp(path: Path) -> tuple[int, int] | None:
    """A file's modification time and size, or None when it is gone."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    return stat.st_mtime_ns, stat.st_size


class FleetWatch:
    """Which jobs need a pass, sweep after sweep; `passed` is told of every pass it asked for."""

    def __init__(
        self,
        supervisor: Supervisor,
        pass_every_seconds: float,
        sweep_seconds: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.supervisor = supervisor
        self.pass_every_seconds = pass_every_seconds
        # How often the caller sweeps: the periodic passes are spread over that many sweeps.
        self.sweep_seconds = sweep_seconds
        self.clock = clock
        self._passes: dict[str, _Pass] = {}
        self._specs: dict[str, JobSpec] = {}
        self._specs_stamp: tuple[tuple[str, tuple[int, int] | None], ...] | None = None

    def specs(self) -> dict[str, JobSpec]:
        """The valid jobs (the analyzer's verdicts applied), loaded again only when a job file
        was added, removed or changed."""
        conf_dir = self.supervisor.platform.conf_dir
        stamp = tuple((path.name, _stamp(path)) for path in job_files(conf_dir))
        if stamp != self._specs_stamp:
            self._specs = dict(with_verdicts(self.supervisor.platform, load_jobs(conf_dir)).specs)
            self._specs_stamp = stamp
        return self._specs

    def sweep(self) -> list[Due]:
        """The jobs that need a pass now: those the full look finds a reason for, and the steady
        ones whose periodic pass is due."""
        ledger, platform = self.supervisor.ledger, self.supervisor.platform
        records = {record.name: record for record in ledger.jobs()}
        runs = ledger.open_runs()
        busy = ledger.jobs_with_open_operations() | {
            alert.job for alert in ledger.due_alerts(self.supervisor.control.clock())
        }
        now = self.clock()
        specs = self.specs()
        due, periodic = [], []
        for name, spec in specs.items():
            if name not in records and name not in platform.autostart_jobs:
                continue
            last, record = self._passes.get(name), records.get(name)
            since = now - last.at if last is not None else math.inf
            if (
                last is not None
                and record is not None
                and name not in busy
                and self._steady(spec, record, runs.get(name), last)
            ):
                reason = PERIODIC
            else:
                reason = self.supervisor.attention(name)
            if reason is not None:
                due.append(Due(name, reason))
            elif since >= self.pass_every_seconds:
                periodic.append((since, name))
        # The periodic passes spread over the interval, the longest waiting first: jobs started
        # together come due together, and a sweep that passed them all at once would hold up the
        # reaction to a kill for as long as those passes take.
        share = math.ceil(len(specs) * self.sweep_seconds / self.pass_every_seconds)
        return due + [Due(name, PERIODIC) for _, name in sorted(periodic, reverse=True)[:share]]

    def passed(self, job: str) -> None:
        """Note that `job` just had a pass."""
        self._passes[job] = _Pass(self.clock(), _stamp(job_file(job, self.supervisor.platform.conf_dir)))

    def _steady(self, spec: JobSpec, record: JobRecord, run: RunRecord | None, last: _Pass) -> bool:
        """The quick look: whether the job runs as its last pass left it (the module docstring)."""
        if run is None or spec.operations.restart.warm_standby:
            return False
        if record.state != Lifecycle.RUNNING.name or record.desired_state != Desired.RUNNING:
            return False
        if record.restart_requested_at is not None and record.restart_requested_at > run.started_at:
            return False
        if record.scale_cores is not None and record.scale_cores != run.cores:
            return False
        platform = self.supervisor.platform
        if _stamp(job_file(spec.name, platform.conf_dir)) != last.file_stamp:
            return False
        heartbeat = JobPaths.of(platform, spec).heartbeat
        try:
            age = time.time() - heartbeat.stat().st_mtime
        except FileNotFoundError:
            return False
        if age >= spec.operations.health.stuck_grace_seconds / 2:
            return False
        return self.supervisor.backend.is_alive(run)
