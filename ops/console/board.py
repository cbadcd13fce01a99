"""The job board's data: one row per job, and a page per job, from the ledger and the drivers' files.

The operations console in the Airflow UI (`plugins/streamwarden_airflow/console.py`) shows what this
module returns as JSON. It reads what the platform already records and never talks to Spark or a
driver: the ledger (desired and observed state, runs, decisions, alerts, savepoints), each job's
heartbeat (`ops.driver.telemetry`), its progress history (`ops.driver.history`: an hour of rates
and the recent batches' time breakdown) and its preview taps (`ops.driver.preview`).

Each row starts from the job's status as `warden status` shows it (`ops.console.status`: state,
restarts, open incidents, computed once for both). The board is read on every refresh of the page,
for every job, so it costs a fixed handful of ledger queries whatever the number of jobs
(restarts, alerts and savepoints are read for all jobs at once, through the ledger's API) and reads
job files only when they changed (`SpecCache`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from ops import views
from ops.console.diagnosis import Diagnosis, diagnose, master_cores
from ops.console.drafts import DraftChecks
from ops.console.job_form import edit_refusal
from ops.console.state_lookup import StateLookup, StateLookupForm, StateRows, lookup_form
from ops.console.status import JobStatus, job_statuses
from ops.control.scaling import cores_label, desired_scale
from ops.driver.history import MinuteRates, ProgressHistory, rates_since, read_history, read_rates
from ops.driver.preview import load_preview_file, preview_path, preview_rows
from ops.driver.telemetry import Heartbeat, read_heartbeat
from ops.exceptions import ConfigError, StateReadError, ViewStoreError
from ops.ledger.records import DecisionRecord, JobRecord, SavepointRecord
from ops.ledger.store import Ledger
from ops.spec.analysis import analysis_error
from ops.spec.job import JobSpec, job_file, job_files, load_job
from ops.spec.paths import HEARTBEAT_FILE, JobPaths
from ops.spec.pipelines import TeamPipeline
from ops.spec.platform import PlatformConfig
from ops.states import INVALID, Lifecycle
from ops.views import ViewSummary

# A job in one of these states has no working driver: its row is shown red.
DOWN_STATES = frozenset({Lifecycle.RESTARTING.name, Lifecycle.FAILED.name, INVALID})
SAVEPOINT_COMPLETE = "complete"
SPARKLINE_WINDOW = timedelta(hours=1)


class SpecCache:
    """Job specs by name, each loaded again only when its file changed (size or mtime).

    Validating a job file costs tens of milliseconds; the board is refreshed every few seconds.
    """

    def __init__(self, platform: PlatformConfig) -> None:
        self.platform = platform
        self._loaded: dict[Path, tuple[tuple[int, int], JobSpec | ConfigError]] = {}

    def specs(self) -> dict[str, JobSpec | ConfigError]:
        """Every job file's spec, or the error that says why it does not load or why Spark's
        analyzer rejected it (read each time: a verdict comes after the file)."""
        found: dict[str, JobSpec | ConfigError] = {}
        paths = list(job_files(self.platform.conf_dir))
        for path in paths:
            found[path.stem] = self._judged(self._load(path))
        for stale in set(self._loaded) - set(paths):
            del self._loaded[stale]
        return found

    def spec(self, name: str) -> JobSpec | ConfigError:
        path = job_file(name, self.platform.conf_dir)
        if not path.exists():
            return ConfigError(path, f"no job named {name!r}")
        return self._judged(self._load(path))

    def _judged(self, loaded: JobSpec | ConfigError) -> JobSpec | ConfigError:
        if isinstance(loaded, ConfigError):
            return loaded
        return analysis_error(self.platform, loaded) or loaded

    def _load(self, path: Path) -> JobSpec | ConfigError:
        stat = path.stat()
        key = (stat.st_mtime_ns, stat.st_size)
        cached = self._loaded.get(path)
        if cached is not None and cached[0] == key:
            return cached[1]
        try:
            loaded: JobSpec | ConfigError = load_job(path)
        except ConfigError as exc:
            loaded = exc
        self._loaded[path] = (key, loaded)
        return loaded


@dataclass(frozen=True)
class SavepointSummary:
    id: str
    batch_id: int
    created_at: str
    age_seconds: float
    total_bytes: int
    status: str

    @classmethod
    def of(cls, record: SavepointRecord, now: datetime) -> SavepointSummary:
        return cls(
            id=record.id,
            batch_id=record.batch_id,
            created_at=record.created_at.isoformat(),
            age_seconds=(now - record.created_at).total_seconds(),
            total_bytes=record.total_bytes,
            status=record.status,
        )


@dataclass(frozen=True)
class Sparkline:
    """The last hour's minutes (epoch seconds of each start) and their batches' mean input and
    processing rates (rows/s), as three columns: the board sends 50 jobs' worth every refresh."""

    minutes: list[int]
    input_rates: list[float]
    processed_rates: list[float]


@dataclass(frozen=True)
class BoardRow(JobStatus):
    """One job on the board: its status as `warden status` shows it (`ops.console.status`), and
    what the board adds. `down` is what makes its row red."""

    state_description: str
    down: bool
    # The cores the driver is given (the master's when the job names none), for the diagnosis;
    # `cores_label` is what the board shows, as `warden status` does.
    cores: int | None
    cores_label: str
    cores_pinned: bool
    recommended_cores: int | None
    master: str | None
    last_batch_id: int | None
    last_batch_age_seconds: float | None
    input_rate: float | None
    processed_rate: float | None
    rates: Sparkline
    backlog_files: int | None
    watermark_lag_seconds: float | None
    state_rows: int | None
    state_bytes: int | None
    newest_savepoint: SavepointSummary | None


@dataclass(frozen=True)
class DecisionEntry:
    id: int
    at: str
    action: str
    reason: str
    outcome: str | None
    run_id: str | None
    inputs: dict[str, Any]

    @classmethod
    def of(cls, record: DecisionRecord) -> DecisionEntry:
        return cls(
            id=record.id,
            at=record.at.isoformat(),
            action=record.action,
            reason=record.reason,
            outcome=record.outcome,
            run_id=record.run_id,
            inputs=record.inputs,
        )


@dataclass(frozen=True)
class PreviewTable:
    stage: str
    title: str
    columns: list[str]
    rows: list[list[str]]


@dataclass(frozen=True)
class JobPage:
    """Everything the per-job page shows, below the job's board row."""

    row: BoardRow
    decisions: list[DecisionEntry]
    actions: list[str]
    savepoints: list[SavepointSummary]
    previews: list[PreviewTable]
    missing_previews: list[str]
    diagnosis: Diagnosis
    state_lookup: StateLookupForm
    # Why the board's Edit form cannot edit the job (`ops.console.job_form`); None when it can.
    edit_refusal: str | None
    view: PublishedView | None = None


@dataclass(frozen=True)
class PublishedView:
    """The view a job publishes (`pipeline.view`): its summary, or why it cannot be read now."""

    summary: ViewSummary | None
    error: str | None


# The job page lists this many keys of a published view (`warden view JOB` lists them all).
VIEW_KEYS_SHOWN = 20


def published_view(platform: PlatformConfig, spec: JobSpec | ConfigError) -> PublishedView | None:
    """The job's published view as its page shows it; None for a job without one."""
    if (
        not isinstance(spec, JobSpec)
        or not isinstance(spec.pipeline, TeamPipeline)
        or spec.pipeline.view is None
    ):
        return None
    try:
        with views.connected(views.database_url(platform)) as connection:
            return PublishedView(views.summarize_view(connection, spec.name, VIEW_KEYS_SHOWN), None)
    except ViewStoreError as error:
        return PublishedView(None, str(error))


class Console:
    """The board and job pages of one platform, read through one ledger connection pool."""

    def __init__(self, platform: PlatformConfig, ledger: Ledger) -> None:
        self.platform = platform
        self.ledger = ledger
        self.specs = SpecCache(platform)
        self.state = StateLookup(platform)
        self.drafts = DraftChecks(platform)

    def board(self, now: datetime) -> list[BoardRow]:
        """Every job with a file or a ledger record, by name."""
        specs = self.specs.specs()
        records = {record.name: record for record in self.ledger.jobs()}
        savepoints = self.ledger.newest_savepoints(SAVEPOINT_COMPLETE)
        return [
            self._row(status, specs.get(name), records.get(name), now, savepoints.get(name))
            for name, status in job_statuses(self.ledger, specs, now).items()
        ]

    def job_page(self, job: str, now: datetime, decision_limit: int = 500) -> JobPage | None:
        """The page of `job`, or None when it has neither a file nor a ledger record."""
        spec = self.specs.spec(job)
        record = self.ledger.job(job)
        if record is None and isinstance(spec, ConfigError) and not spec.path.exists():
            return None
        savepoints = self.ledger.savepoints(job)
        newest = next((sp for sp in savepoints if sp.status == SAVEPOINT_COMPLETE), None)
        [status] = job_statuses(self.ledger, {job: spec}, now, job).values()
        row = self._row(status, spec, record, now, newest)
        decisions = [DecisionEntry.of(decision) for decision in self.ledger.decisions(job, decision_limit)]
        history = read_history(self._runtime(job) / HEARTBEAT_FILE)
        previews, missing = _previews(self.platform, spec) if isinstance(spec, JobSpec) else ([], [])
        return JobPage(
            row=row,
            decisions=decisions,
            actions=sorted({decision.action for decision in decisions}),
            savepoints=[SavepointSummary.of(savepoint, now) for savepoint in savepoints],
            previews=previews,
            missing_previews=missing,
            diagnosis=diagnose(history.batches, spec if isinstance(spec, JobSpec) else None, row.cores),
            state_lookup=lookup_form(self.platform, spec),
            edit_refusal=edit_refusal(spec),
            view=published_view(self.platform, spec),
        )

    def look_up_state(self, job: str, key: str) -> StateRows | None:
        """The rows of `key` in the job's committed state (a Spark process, seconds: see
        `ops.console.state_lookup`), or None when there is no such job."""
        spec = self.specs.spec(job)
        if isinstance(spec, ConfigError):
            if not spec.path.exists():
                return None
            raise StateReadError(f"the state of job {job!r} cannot be read: {spec}")
        return self.state.look_up(spec, key)

    def _runtime(self, job: str) -> Path:
        return self.platform.job_runtime_dir(job)

    def _row(
        self,
        status: JobStatus,
        spec: JobSpec | ConfigError | None,
        record: JobRecord | None,
        now: datetime,
        newest_savepoint: SavepointRecord | None,
    ) -> BoardRow:
        heartbeat_file = self._runtime(status.job) / HEARTBEAT_FILE
        heartbeat = read_heartbeat(heartbeat_file)
        history = read_rates(heartbeat_file)
        if isinstance(spec, ConfigError) or spec is None:
            master, scaled_cores, label = None, None, "-"
        else:
            master = spec.operations.resources.master or self.platform.spark.master
            scaled_cores = desired_scale(spec, record).cores
            label = cores_label(scaled_cores, bool(record and record.scale_pinned))
        sample = heartbeat.last_sample if heartbeat else None
        return BoardRow(
            **asdict(status),
            state_description=_describe(status.state),
            down=status.state in DOWN_STATES,
            cores=scaled_cores or (master_cores(master) if master else None),
            cores_label=label,
            cores_pinned=bool(record and record.scale_pinned),
            recommended_cores=record.recommended_cores if record else None,
            master=master,
            last_batch_id=_last_batch_id(heartbeat, record),
            last_batch_age_seconds=_last_batch_age(history, heartbeat, now),
            input_rate=sample.input_rows_per_second if sample else (record.input_rate if record else None),
            processed_rate=(
                sample.processed_rows_per_second if sample else (record.processed_rate if record else None)
            ),
            rates=_sparkline(rates_since(history, now - SPARKLINE_WINDOW)),
            backlog_files=record.backlog if record else None,
            watermark_lag_seconds=_watermark_lag(heartbeat, now),
            state_rows=heartbeat.state_rows if heartbeat else None,
            state_bytes=heartbeat.state_memory_bytes if heartbeat else None,
            newest_savepoint=SavepointSummary.of(newest_savepoint, now) if newest_savepoint else None,
        )


def _describe(state: str) -> str:
    if state == INVALID:
        return "the job file does not validate: nothing is launched from it"
    if state == "NEW":
        return "no supervisor pass has recorded this job yet"
    try:
        return Lifecycle[state].description
    except KeyError:
        return ""


def _sparkline(buckets: Sequence[MinuteRates]) -> Sparkline:
    return Sparkline(
        minutes=[bucket.minute for bucket in buckets],
        input_rates=[round(bucket.input_rate, 3) for bucket in buckets],
        processed_rates=[round(bucket.processed_rate, 3) for bucket in buckets],
    )


def _last_batch_id(heartbeat: Heartbeat | None, record: JobRecord | None) -> int | None:
    if heartbeat is not None and heartbeat.batch_id is not None:
        return heartbeat.batch_id
    return record.last_batch_id if record else None


def _last_batch_age(history: ProgressHistory, heartbeat: Heartbeat | None, now: datetime) -> float | None:
    """Seconds since the newest batch ended: from the history (it outlives drivers), else from the
    heartbeat's last progress event."""
    if history.last_batch_end is not None:
        return max(0.0, now.timestamp() - history.last_batch_end)
    if heartbeat is not None and heartbeat.event == "progress":
        return max(0.0, now.timestamp() - heartbeat.at)
    return None


def _watermark_lag(heartbeat: Heartbeat | None, now: datetime) -> float | None:
    """How far the job's watermark is behind the wall clock; None before it has one."""
    if heartbeat is None or not heartbeat.watermark:
        return None
    watermark = datetime.fromisoformat(heartbeat.watermark.replace("Z", "+00:00"))
    # Spark reports the epoch before the query has seen any event time.
    if watermark.timestamp() == 0:
        return None
    return max(0.0, (now - watermark).total_seconds())


def _previews(platform: PlatformConfig, spec: JobSpec) -> tuple[list[PreviewTable], list[str]]:
    """The newest records of each tapped stage, and the stages whose tap has captured nothing yet."""
    paths = JobPaths.of(platform, spec)
    tables, missing = [], []
    for stage in spec.operations.preview.stages:
        preview = load_preview_file(preview_path(paths, stage))
        if preview is None:
            missing.append(stage)
            continue
        title, rows = preview_rows(preview, limit=20)
        tables.append(PreviewTable(stage=stage, title=title, columns=list(preview.columns), rows=rows))
    return tables, missing


def as_json(value: Any) -> Any:
    """A board row or job page as plain JSON values (dataclasses, lists and dicts, recursively).
    Concrete types only: the board converts some 15,000 values per refresh, and abstract-class
    checks cost more than the rest of the conversion."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [as_json(item) for item in value]
    if isinstance(value, dict):
        return {str(key): as_json(item) for key, item in value.items()}
    if hasattr(value, "__dataclass_fields__"):
        return {name: as_json(getattr(value, name)) for name in value.__dataclass_fields__}
    return value
