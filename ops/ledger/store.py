"""The ledger: the platform's durable memory, in a SQL database (SQLite file or PostgreSQL).

Both databases run the same schema and queries (the tests run the ledger, lock and alert outbox on
each). With PostgreSQL, the connection pool checks a connection before handing it out, so a
server restart costs the passes that ran while it was down and nothing after: they fail with a
`LedgerError` naming the database (never its password), and the first pass after it is back works.

It holds each job's desired state and observed status, its driver runs and warm standbys, every
automated decision with its reason and inputs, the alert outbox, the savepoint catalogue and the
recovery operations (rewind, restate, upgrade) the reconcile loop carries out step by step. The
schema is owned by the Alembic migrations in `ops/ledger/migrations/`; `Ledger.open()` brings the
database to the newest revision before use. Alembic (its script directory, environment and
migration context) takes longer to load and run than every other part of a `warden status` call,
so `open` first reads the revision the database is at, one query, and runs Alembic only when that
is not `SCHEMA_REVISION`.
"""

from __future__ import annotations

import itertools
import json
import sqlite3
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar, Unpack

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection, Engine

from ops.clock import utcnow
from ops.exceptions import LedgerError
from ops.ledger.changes import (
    AlertChanges,
    JobChanges,
    OperationChanges,
    OperationFacts,
    PartitionVersionChanges,
    PartitionVersionFacts,
    RunChanges,
)

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
# The newest revision in MIGRATIONS_DIR (a test holds it to Alembic's head): bump it with each
# new migration, or every `Ledger.open` runs Alembic to find out there is nothing to do.
SCHEMA_REVISION = "0008"
# Alembic's bookkeeping table: one row, the revision the database is at.
VERSION_TABLE = "alembic_version"

# Room for the longest ids the platform makes from a job name (63 characters at most): a run id
# adds 23 characters, a notice's dedup key about 75. PostgreSQL enforces these, SQLite does not.
RUN_ID_LENGTH = 128
DEDUP_KEY_LENGTH = 256
# Fail a pass within seconds when a PostgreSQL ledger does not answer, rather than hanging on TCP.
CONNECT_TIMEOUT_SECONDS = 10

metadata = sa.MetaData()

jobs_table = sa.Table(
    "jobs",
    metadata,
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("desired_state", sa.String(16), nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("state_reason", sa.Text, nullable=False, default=""),
    sa.Column("state_since", sa.DateTime(timezone=True), nullable=False),
    sa.Column("restart_requested_at", sa.DateTime(timezone=True)),
    sa.Column("config_version", sa.String(32), nullable=False, default=""),
    sa.Column("last_batch_id", sa.BigInteger),
    sa.Column("input_rate", sa.Float),
    sa.Column("processed_rate", sa.Float),
    sa.Column("backlog", sa.BigInteger),
    sa.Column("heartbeat_at", sa.DateTime(timezone=True)),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    # The job's scale (`ops.control.scaling`): what the autoscaler or an operator set, whether an
    # operator pinned it, and the autoscaler's newest recommendation and how long it has been lower.
    sa.Column("scale_cores", sa.Integer),
    sa.Column("scale_max_files", sa.Integer),
    sa.Column("scale_pinned", sa.Boolean, nullable=False, default=False),
    sa.Column("recommended_cores", sa.Integer),
    sa.Column("scale_low_since", sa.DateTime(timezone=True)),
)

runs_table = sa.Table(
    "runs",
    metadata,
    sa.Column("run_id", sa.String(RUN_ID_LENGTH), primary_key=True),
    sa.Column("job", sa.String(64), sa.ForeignKey("jobs.name"), nullable=False, index=True),
    sa.Column("backend", sa.String(32), nullable=False),
    sa.Column("pid", sa.Integer),
    sa.Column("app_id", sa.String(128)),
    sa.Column("metrics_port", sa.Integer),
    sa.Column("log_path", sa.Text),
    sa.Column("config_version", sa.String(32), nullable=False, default=""),
    sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("stopped_at", sa.DateTime(timezone=True)),
    sa.Column("exit_reason", sa.Text),
    sa.Column("first_batch_id", sa.BigInteger),
    sa.Column("last_batch_id", sa.BigInteger),
    # The scale the driver was launched with (null: the spec's resources as written).
    sa.Column("cores", sa.Integer),
    sa.Column("max_files_per_trigger", sa.Integer),
    # What the run measured of its own speed (the supervisor's learned graces): seconds from
    # launch to its first heartbeat, and its longest batch.
    sa.Column("start_seconds", sa.Float),
    sa.Column("longest_batch_seconds", sa.Float),
)

decisions_table = sa.Table(
    "decisions",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("job", sa.String(64), nullable=False, index=True),
    sa.Column("at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("action", sa.String(32), nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("inputs", sa.JSON, nullable=False),
    sa.Column("run_id", sa.String(RUN_ID_LENGTH)),
    sa.Column("outcome", sa.Text),
)

alerts_table = sa.Table(
    "alerts",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("job", sa.String(64), nullable=False, index=True),
    sa.Column("kind", sa.String(32), nullable=False),
    sa.Column("dedup_key", sa.String(DEDUP_KEY_LENGTH), nullable=False, index=True),
    sa.Column("severity", sa.String(16), nullable=False),
    sa.Column("payload", sa.JSON, nullable=False),
    sa.Column("status", sa.String(16), nullable=False, index=True),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False, default=0),
    sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("last_error", sa.Text),
    sa.Column("sent_at", sa.DateTime(timezone=True)),
)


savepoints_table = sa.Table(
    "savepoints",
    metadata,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("job", sa.String(64), nullable=False, index=True),
    sa.Column("batch_id", sa.BigInteger, nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("manifest_key", sa.Text, nullable=False),
    sa.Column("total_bytes", sa.BigInteger, nullable=False),
    sa.Column("uploaded_bytes", sa.BigInteger, nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("config_version", sa.String(32), nullable=False),
)


# One row per rewind, restate or upgrade; open (finished_at null) while the loop works on it. The
# columns after `step_since` are what the steps found or did, so a pass after a crash can tell
# which step to redo (see ops.control.policy).
operations_table = sa.Table(
    "operations",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("job", sa.String(64), sa.ForeignKey("jobs.name"), nullable=False, index=True),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("decision_id", sa.Integer, nullable=False),
    sa.Column("requested_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("step", sa.String(32), nullable=False),
    sa.Column("step_since", sa.DateTime(timezone=True), nullable=False),
    sa.Column("savepoint_id", sa.String(64)),
    sa.Column("savepoint_batch", sa.BigInteger),
    sa.Column("replay_to", sa.BigInteger),
    sa.Column("rows_before", sa.BigInteger),
    sa.Column("rewound_at", sa.DateTime(timezone=True)),
    sa.Column("candidate_spec", sa.Text),
    sa.Column("candidate_version", sa.String(32)),
    sa.Column("previous_spec", sa.Text),
    sa.Column("previous_version", sa.String(32)),
    sa.Column("readiness_timeout", sa.Float),
    sa.Column("dry_run_id", sa.String(96)),
    sa.Column("dry_run_pid", sa.Integer),
    sa.Column("dry_run_app_id", sa.String(128)),
    sa.Column("dry_run_started_at", sa.DateTime(timezone=True)),
    sa.Column("dry_run_passed_at", sa.DateTime(timezone=True)),
    sa.Column("failure", sa.Text),
    sa.Column("finished_at", sa.DateTime(timezone=True)),
    sa.Column("outcome", sa.Text),
    sa.Column("from_cores", sa.Integer),
    sa.Column("to_cores", sa.Integer),
    sa.Column("to_max_files", sa.Integer),
    sa.Column("true_rate_before", sa.Float),
    sa.Column("stop_requested_at", sa.DateTime(timezone=True)),
    sa.Column("restart_cost_seconds", sa.Float),
)


# One row per warm standby driver (`operations.restart.warm_standby`); open while it waits. A
# take-over closes it ("promoted") with `granted_at` and the run it replaced, and opens a run row
# with the same run id, pid and app id.
standbys_table = sa.Table(
    "standbys",
    metadata,
    sa.Column("run_id", sa.String(RUN_ID_LENGTH), primary_key=True),
    sa.Column("job", sa.String(64), sa.ForeignKey("jobs.name"), nullable=False, index=True),
    sa.Column("backend", sa.String(32), nullable=False),
    sa.Column("pid", sa.Integer),
    sa.Column("app_id", sa.String(128)),
    sa.Column("log_path", sa.Text),
    sa.Column("config_version", sa.String(32), nullable=False),
    sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("granted_at", sa.DateTime(timezone=True)),
    sa.Column("replaces_run_id", sa.String(RUN_ID_LENGTH)),
    sa.Column("stopped_at", sa.DateTime(timezone=True)),
    sa.Column("exit_reason", sa.Text),
)


# One row per version of a warehouse partition (`ops.warehouse`): staged, then published or
# blocked by its audit; a published version stays current until a newer one is published, and its
# files are deleted (`expired_at`) once it is neither current nor inside the retention period.
partition_versions_table = sa.Table(
    "partition_versions",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("job", sa.String(64), nullable=False, index=True),
    sa.Column("partition", sa.String(512), nullable=False, index=True),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("location", sa.Text, nullable=False),
    sa.Column("source", sa.String(16), nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("published_at", sa.DateTime(timezone=True)),
    sa.Column("input_files", sa.Integer),
    sa.Column("input_rows", sa.BigInteger),
    sa.Column("input_fingerprint", sa.String(64)),
    sa.Column("output_files", sa.Integer),
    sa.Column("output_rows", sa.BigInteger),
    sa.Column("rows_before", sa.BigInteger),
    sa.Column("audit", sa.JSON),
    sa.Column("expired_at", sa.DateTime(timezone=True)),
    sa.UniqueConstraint("job", "partition", "version", name="uq_partition_versions_version"),
)


def _aware(value: datetime | None) -> datetime | None:
    # SQLite drops the zone on the way back; every stored time is UTC.
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)


@dataclass(frozen=True)
class JobRecord:
    name: str
    desired_state: str
    state: str
    state_reason: str
    state_since: datetime
    restart_requested_at: datetime | None
    config_version: str
    last_batch_id: int | None
    input_rate: float | None
    processed_rate: float | None
    backlog: int | None
    heartbeat_at: datetime | None
    updated_at: datetime
    scale_cores: int | None = None
    scale_max_files: int | None = None
    scale_pinned: bool = False
    recommended_cores: int | None = None
    scale_low_since: datetime | None = None


@dataclass(frozen=True)
class RunRecord:
    run_id: str
    job: str
    backend: str
    pid: int | None
    app_id: str | None
    metrics_port: int | None
    log_path: str | None
    config_version: str
    started_at: datetime
    stopped_at: datetime | None
    exit_reason: str | None
    first_batch_id: int | None = None
    last_batch_id: int | None = None
    cores: int | None = None
    max_files_per_trigger: int | None = None
    start_seconds: float | None = None
    longest_batch_seconds: float | None = None

    @property
    def batches_committed(self) -> int:
        """Batches this run committed, from the first and last batch its heartbeats reported."""
        if self.first_batch_id is None or self.last_batch_id is None:
            return 0
        return self.last_batch_id - self.first_batch_id + 1


@dataclass(frozen=True)
class StandbyRecord:
    """A warm standby driver of a job: launched, waiting for a grant, then promoted or retired."""

    run_id: str
    job: str
    backend: str
    pid: int | None
    app_id: str | None
    log_path: str | None
    config_version: str
    started_at: datetime
    granted_at: datetime | None = None
    replaces_run_id: str | None = None
    stopped_at: datetime | None = None
    exit_reason: str | None = None

    def as_run(self) -> RunRecord:
        """The standby as a run record: what the launch backend watches, stops and kills, and
        the run row a take-over opens."""
        return RunRecord(
            run_id=self.run_id,
            job=self.job,
            backend=self.backend,
            pid=self.pid,
            app_id=self.app_id,
            metrics_port=None,
            log_path=self.log_path,
            config_version=self.config_version,
            started_at=self.started_at,
            stopped_at=None,
            exit_reason=None,
        )


@dataclass(frozen=True)
class DecisionRecord:
    id: int
    job: str
    at: datetime
    action: str
    reason: str
    inputs: dict[str, Any]
    run_id: str | None
    outcome: str | None


@dataclass(frozen=True)
class AlertRecord:
    id: int
    job: str
    kind: str
    dedup_key: str
    severity: str
    payload: dict[str, Any]
    status: str
    created_at: datetime
    attempts: int
    next_attempt_at: datetime
    last_error: str | None
    sent_at: datetime | None


@dataclass(frozen=True)
class SavepointRecord:
    """A catalogued savepoint: its manifest is in the object store under `manifest_key`."""

    id: str
    job: str
    batch_id: int
    created_at: datetime
    manifest_key: str
    total_bytes: int
    uploaded_bytes: int
    status: str
    config_version: str


@dataclass(frozen=True)
class OperationRecord:
    """A rewind, restate or upgrade of one job, as requested and as far as the loop has carried it.

    `kind`, `reason`, `decision_id` (the operation's decision row, which gets the outcome) and the
    upgrade's specs are fixed at the request. `step` is what the newest pass worked on, written
    before it acted. The rest are facts the steps recorded (what `decide` reads): the savepoint
    (a rewind's target, or the one an upgrade took), the replay a rewind queued and when it was
    done, the dry-run driver and its verdict, and `failure`, why the operation is refused, rolled
    back or failed. `finished_at` and `outcome` are set once, when the operation is closed. A
    rescale (`scale`) fixes its cores and batch size, from and to, and the true rate before it at
    the request; its stop records when it began, its finish the restart cost it measured.
    """

    id: int
    job: str
    kind: str
    reason: str
    decision_id: int
    requested_at: datetime
    step: str
    step_since: datetime
    savepoint_id: str | None = None
    savepoint_batch: int | None = None
    replay_to: int | None = None
    rows_before: int | None = None
    rewound_at: datetime | None = None
    candidate_spec: str | None = None
    candidate_version: str | None = None
    previous_spec: str | None = None
    previous_version: str | None = None
    readiness_timeout: float | None = None
    dry_run_id: str | None = None
    dry_run_pid: int | None = None
    dry_run_app_id: str | None = None
    dry_run_started_at: datetime | None = None
    dry_run_passed_at: datetime | None = None
    failure: str | None = None
    finished_at: datetime | None = None
    outcome: str | None = None
    from_cores: int | None = None
    to_cores: int | None = None
    to_max_files: int | None = None
    true_rate_before: float | None = None
    stop_requested_at: datetime | None = None
    restart_cost_seconds: float | None = None


@dataclass(frozen=True)
class PartitionVersionRecord:
    """One version of a warehouse partition (`partition` is its path, `route=a/event_hour=10`).

    `status`: "staged" (written, not audited yet), "published" (the catalog pointed at it, now or
    before), "blocked" (its audit failed: never published). `source` says what wrote it:
    "compaction", "restatement" (the compaction a restatement runs of the partitions it changed),
    "backfill" or "rollback" (a rollback re-publishes an older version's location).
    `input_fingerprint` identifies the committed input files it was made from, so a partition
    whose input changed since (a restatement, late files) is compacted again.
    """

    id: int
    job: str
    partition: str
    version: int
    location: str
    source: str
    status: str
    created_at: datetime
    published_at: datetime | None = None
    input_files: int | None = None
    input_rows: int | None = None
    input_fingerprint: str | None = None
    output_files: int | None = None
    output_rows: int | None = None
    rows_before: int | None = None
    audit: dict[str, Any] | None = None
    expired_at: datetime | None = None


RecordT = TypeVar("RecordT")


def _record(cls: type[RecordT], row: sa.Row[Any]) -> RecordT:
    values = {
        key: _aware(value) if isinstance(value, datetime) else value for key, value in row._mapping.items()
    }
    return cls(**values)


# Connections racing to switch a new database file to WAL: how often to try, and the pause between.
WAL_SWITCH_ATTEMPTS = 50
WAL_SWITCH_PAUSE_SECONDS = 0.1


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    # WAL lets the supervisor, the triggerer, the CLI and tests read while one writes.
    cursor = dbapi_connection.cursor()
    # First: switching to WAL waits for a writer (a migration in another process) like any write.
    cursor.execute("PRAGMA busy_timeout=30000")
    _switch_to_wal(cursor)
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def _switch_to_wal(cursor: Any) -> None:
    """Retry the switch: two processes switching a new file at once can get "database is locked"
    at once, without the busy timeout (SQLite refuses a lock upgrade that could deadlock)."""
    for attempt in itertools.count(1):
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or attempt == WAL_SWITCH_ATTEMPTS:
                raise
            time.sleep(WAL_SWITCH_PAUSE_SECONDS)


def _where(engine: Engine) -> str:
    return engine.url.render_as_string(hide_password=True)


def _cause(exc: sa.exc.SQLAlchemyError) -> str:
    """The driver's message without SQLAlchemy's statement and parameters."""
    orig = getattr(exc, "orig", None)
    return " ".join(str(orig if orig is not None else exc).split())


def create_engine(url: str) -> Engine:
    """A SQLAlchemy engine for the ledger at `url` (a SQLite file's directory is created)."""
    if url.startswith("sqlite:///"):
        Path(url[len("sqlite:///") :]).parent.mkdir(parents=True, exist_ok=True)
    if sa.make_url(url).get_backend_name() == "postgresql":
        # pre_ping: a connection the server closed (a restart) is replaced, not handed out.
        return sa.create_engine(
            url, pool_pre_ping=True, connect_args={"connect_timeout": CONNECT_TIMEOUT_SECONDS}
        )
    engine = sa.create_engine(url)
    if engine.dialect.name == "sqlite":
        sa.event.listen(engine, "connect", _sqlite_pragmas)
    return engine


def migrate(url: str) -> None:
    """Bring the database at `url` to the newest schema revision."""
    # Imported here: only a database behind SCHEMA_REVISION needs Alembic.
    from alembic import command
    from alembic.config import Config as AlembicConfig

    alembic_config = AlembicConfig()
    alembic_config.set_main_option("script_location", str(MIGRATIONS_DIR))
    alembic_config.set_main_option("sqlalchemy.url", url)
    command.upgrade(alembic_config, "head")


def schema_revision(engine: Engine) -> str | None:
    """The schema revision the database is at; None for a database Alembic never touched."""
    with engine.connect() as connection:
        if not sa.inspect(connection).has_table(VERSION_TABLE):
            return None
        revision = connection.execute(sa.text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar()
    return None if revision is None else str(revision)


class Ledger:
    """Typed access to the ledger tables; each method is one short transaction."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    @classmethod
    def open(cls, url: str, *, upgrade: bool = True) -> Ledger:
        """Connect to the ledger at `url`; with `upgrade`, create it or migrate it when it is
        not at `SCHEMA_REVISION`."""
        engine = create_engine(url)
        try:
            if schema_revision(engine) != SCHEMA_REVISION and upgrade:
                migrate(url)
        except sa.exc.SQLAlchemyError as exc:
            raise LedgerError(f"ledger at {_where(engine)} is unusable: {_cause(exc)}") from exc
        return cls(engine)

    @property
    def dialect(self) -> str:
        """The database the ledger is in: "sqlite" or "postgresql"."""
        return str(self.engine.dialect.name)

    @contextmanager
    def _tx(self) -> Iterator[Connection]:
        try:
            with self.engine.begin() as connection:
                yield connection
        except (sa.exc.OperationalError, sa.exc.InterfaceError) as exc:
            # The database is down, unreachable or dropped the connection: the caller's pass
            # fails with where and why; the next one gets a fresh connection.
            raise LedgerError(f"ledger at {_where(self.engine)} is unreachable: {_cause(exc)}") from exc

    # --- jobs ------------------------------------------------------------------------------------

    def ensure_job(self, name: str, *, desired_state: str, state: str, config_version: str) -> JobRecord:
        """The job's record, created with the given desired state if the job is new."""
        now = utcnow()
        insert = sqlite_insert if self.dialect == "sqlite" else postgresql_insert
        with self._tx() as tx:
            # One statement, so two processes registering the same job at once both succeed.
            tx.execute(
                insert(jobs_table)
                .values(
                    name=name,
                    desired_state=desired_state,
                    state=state,
                    state_reason="registered",
                    state_since=now,
                    config_version=config_version,
                    updated_at=now,
                )
                .on_conflict_do_nothing(index_elements=[jobs_table.c.name])
            )
            row = tx.execute(sa.select(jobs_table).where(jobs_table.c.name == name)).one()
        return _record(JobRecord, row)

    def job(self, name: str) -> JobRecord | None:
        with self._tx() as tx:
            row = tx.execute(sa.select(jobs_table).where(jobs_table.c.name == name)).first()
        return None if row is None else _record(JobRecord, row)

    def jobs(self) -> list[JobRecord]:
        with self._tx() as tx:
            rows = tx.execute(sa.select(jobs_table).order_by(jobs_table.c.name)).all()
        return [_record(JobRecord, row) for row in rows]

    def update_job(self, name: str, **values: Unpack[JobChanges]) -> None:
        """Set columns of a job's record; a changed `state` also moves `state_since`."""
        now = utcnow()
        with self._tx() as tx:
            if "state" in values:
                current = tx.execute(sa.select(jobs_table.c.state).where(jobs_table.c.name == name)).scalar()
                if current != values["state"]:
                    values.setdefault("state_since", now)
            tx.execute(jobs_table.update().where(jobs_table.c.name == name).values(updated_at=now, **values))

    # --- runs ------------------------------------------------------------------------------------

    def start_run(self, run: RunRecord) -> None:
        with self._tx() as tx:
            tx.execute(runs_table.insert().values(**run.__dict__))

    def update_run(self, run_id: str, **values: Unpack[RunChanges]) -> None:
        with self._tx() as tx:
            tx.execute(runs_table.update().where(runs_table.c.run_id == run_id).values(**values))

    def finish_run(self, run_id: str, exit_reason: str) -> None:
        """Close a run once; a run already closed keeps its first exit reason."""
        with self._tx() as tx:
            tx.execute(
                runs_table.update()
                .where(runs_table.c.run_id == run_id, runs_table.c.stopped_at.is_(None))
                .values(stopped_at=utcnow(), exit_reason=exit_reason)
            )

    def current_run(self, job: str) -> RunRecord | None:
        """The job's newest run that has not been closed."""
        return next(iter(self._newest(runs_table, RunRecord, job, 1, open_only=True)), None)

    def runs(self, job: str, limit: int = 20) -> list[RunRecord]:
        """The job's newest runs, newest first."""
        return self._newest(runs_table, RunRecord, job, limit)

    def _newest(
        self, table: sa.Table, record: type[RecordT], job: str, limit: int, *, open_only: bool = False
    ) -> list[RecordT]:
        """A job's newest rows of a table of processes (runs, standbys), newest first; with
        `open_only`, only those not stopped yet."""
        condition = table.c.job == job
        if open_only:
            condition = condition & table.c.stopped_at.is_(None)
        with self._tx() as tx:
            rows = tx.execute(
                sa.select(table).where(condition).order_by(table.c.started_at.desc()).limit(limit)
            ).all()
        return [_record(record, row) for row in rows]

    # --- warm standbys ---------------------------------------------------------------------------

    def start_standby(self, standby: StandbyRecord) -> None:
        with self._tx() as tx:
            tx.execute(standbys_table.insert().values(**standby.__dict__))

    def current_standby(self, job: str) -> StandbyRecord | None:
        """The job's newest standby that is neither promoted nor retired."""
        return next(iter(self._newest(standbys_table, StandbyRecord, job, 1, open_only=True)), None)

    def standbys(self, job: str, limit: int = 20) -> list[StandbyRecord]:
        """The job's newest standbys, newest first."""
        return self._newest(standbys_table, StandbyRecord, job, limit)

    def finish_standby(self, run_id: str, exit_reason: str) -> None:
        """Retire a standby once; one already closed keeps its first exit reason."""
        with self._tx() as tx:
            tx.execute(
                standbys_table.update()
                .where(standbys_table.c.run_id == run_id, standbys_table.c.stopped_at.is_(None))
                .values(stopped_at=utcnow(), exit_reason=exit_reason)
            )

    def promote_standby(self, standby: StandbyRecord, replaces_run_id: str | None, at: datetime) -> RunRecord:
        """Record a take-over in one transaction: the standby is closed as promoted and its driver
        becomes the job's open run (same run id, pid and app id), started at `at`."""
        run = replace(standby.as_run(), started_at=at)
        with self._tx() as tx:
            tx.execute(
                standbys_table.update()
                .where(standbys_table.c.run_id == standby.run_id)
                .values(
                    granted_at=at,
                    replaces_run_id=replaces_run_id,
                    stopped_at=at,
                    exit_reason=f"promoted: took over from {replaces_run_id or 'no run'}",
                )
            )
            tx.execute(runs_table.insert().values(**run.__dict__))
        return run

    # --- decisions -------------------------------------------------------------------------------

    def record_decision(
        self, job: str, action: str, reason: str, inputs: Mapping[str, Any], run_id: str | None = None
    ) -> int:
        """Write a decision before acting on it; returns its id for the outcome."""
        with self._tx() as tx:
            result = tx.execute(
                decisions_table.insert().values(
                    job=job,
                    at=utcnow(),
                    action=action,
                    reason=reason,
                    inputs=json.loads(json.dumps(inputs, default=str)),
                    run_id=run_id,
                )
            )
        return int(result.inserted_primary_key[0])  # type: ignore[index]

    def set_outcome(self, decision_id: int, outcome: str) -> None:
        with self._tx() as tx:
            tx.execute(
                decisions_table.update().where(decisions_table.c.id == decision_id).values(outcome=outcome)
            )

    def decisions(self, job: str, limit: int | None = 50, action: str | None = None) -> list[DecisionRecord]:
        """The job's newest `limit` decisions (all with None), newest first, optionally of one action."""
        query = sa.select(decisions_table).where(decisions_table.c.job == job)
        if action is not None:
            query = query.where(decisions_table.c.action == action)
        with self._tx() as tx:
            rows = tx.execute(query.order_by(decisions_table.c.id.desc()).limit(limit)).all()
        return [_record(DecisionRecord, row) for row in rows]

    # --- alert outbox ----------------------------------------------------------------------------

    def enqueue_alert(
        self,
        job: str,
        kind: str,
        dedup_key: str,
        severity: str,
        payload: Mapping[str, Any],
        status: str = "pending",
        at: datetime | None = None,
    ) -> int:
        """Add an alert to the outbox, due at once; `at` is its creation time (default now)."""
        now = at or utcnow()
        with self._tx() as tx:
            result = tx.execute(
                alerts_table.insert().values(
                    job=job,
                    kind=kind,
                    dedup_key=dedup_key,
                    severity=severity,
                    payload=dict(payload),
                    status=status,
                    created_at=now,
                    attempts=0,
                    next_attempt_at=now,
                )
            )
        return int(result.inserted_primary_key[0])  # type: ignore[index]

    def alerts(
        self, job: str | None = None, *, status: str | None = None, limit: int = 100
    ) -> list[AlertRecord]:
        """Alerts newest first, filtered by job and status."""
        query = sa.select(alerts_table)
        if job is not None:
            query = query.where(alerts_table.c.job == job)
        if status is not None:
            query = query.where(alerts_table.c.status == status)
        with self._tx() as tx:
            rows = tx.execute(query.order_by(alerts_table.c.id.desc()).limit(limit)).all()
        return [_record(AlertRecord, row) for row in rows]

    def due_alerts(self, now: datetime) -> list[AlertRecord]:
        """Alerts due for a delivery attempt, oldest first, up to the first one that is not due.

        The outbox is a queue: an alert waiting out a retry holds back the ones behind it, so they
        reach Slack in the order they were raised. A "sending" row is due again once its claim
        lease (its `next_attempt_at`) has run out, because the process that claimed it died.
        """
        with self._tx() as tx:
            rows = tx.execute(
                sa.select(alerts_table)
                .where(alerts_table.c.status.in_(("pending", "sending")))
                .order_by(alerts_table.c.id)
            ).all()
        records = [_record(AlertRecord, row) for row in rows]
        return list(itertools.takewhile(lambda record: record.next_attempt_at <= now, records))

    def claim_alert(self, alert_id: int, now: datetime, lease_until: datetime) -> bool:
        """Mark a due alert "sending" until `lease_until`; False when another process claimed it first."""
        with self._tx() as tx:
            result = tx.execute(
                alerts_table.update()
                .where(
                    alerts_table.c.id == alert_id,
                    alerts_table.c.status.in_(("pending", "sending")),
                    alerts_table.c.next_attempt_at <= now,
                )
                .values(status="sending", next_attempt_at=lease_until)
            )
        return result.rowcount == 1

    def newest_alerts(self, job: str) -> list[AlertRecord]:
        """The newest outbox row of each of the job's dedup keys, oldest first."""
        newest_ids = (
            sa.select(sa.func.max(alerts_table.c.id))
            .where(alerts_table.c.job == job)
            .group_by(alerts_table.c.dedup_key)
        )
        with self._tx() as tx:
            rows = tx.execute(
                sa.select(alerts_table).where(alerts_table.c.id.in_(newest_ids)).order_by(alerts_table.c.id)
            ).all()
        return [_record(AlertRecord, row) for row in rows]

    def update_alert(self, alert_id: int, **values: Unpack[AlertChanges]) -> None:
        with self._tx() as tx:
            tx.execute(alerts_table.update().where(alerts_table.c.id == alert_id).values(**values))

    # --- savepoints ------------------------------------------------------------------------------

    def add_savepoint(self, savepoint: SavepointRecord) -> None:
        """Catalogue a savepoint; call only once its manifest is in the object store."""
        with self._tx() as tx:
            tx.execute(savepoints_table.insert().values(**savepoint.__dict__))

    def savepoints(self, job: str) -> list[SavepointRecord]:
        """The job's catalogued savepoints, newest first."""
        with self._tx() as tx:
            rows = tx.execute(
                sa.select(savepoints_table)
                .where(savepoints_table.c.job == job)
                .order_by(savepoints_table.c.created_at.desc(), savepoints_table.c.id.desc())
            ).all()
        return [_record(SavepointRecord, row) for row in rows]

    def savepoint(self, savepoint_id: str) -> SavepointRecord | None:
        """A catalogued savepoint of any job, by id."""
        with self._tx() as tx:
            row = tx.execute(sa.select(savepoints_table).where(savepoints_table.c.id == savepoint_id)).first()
        return None if row is None else _record(SavepointRecord, row)

    def all_savepoints(self, status: str | None = None) -> list[SavepointRecord]:
        """Every job's catalogued savepoints (of one status), newest first: the job board's one query."""
        query = sa.select(savepoints_table)
        if status is not None:
            query = query.where(savepoints_table.c.status == status)
        with self._tx() as tx:
            rows = tx.execute(
                query.order_by(savepoints_table.c.created_at.desc(), savepoints_table.c.id.desc())
            ).all()
        return [_record(SavepointRecord, row) for row in rows]

    def set_savepoint_status(self, savepoint_ids: list[str], status: str) -> None:
        with self._tx() as tx:
            tx.execute(
                savepoints_table.update()
                .where(savepoints_table.c.id.in_(savepoint_ids))
                .values(status=status)
            )

    def delete_savepoint_row(self, savepoint_id: str) -> None:
        """Drop a savepoint from the catalogue (after its manifest is gone)."""
        with self._tx() as tx:
            tx.execute(savepoints_table.delete().where(savepoints_table.c.id == savepoint_id))

    # --- recovery operations ---------------------------------------------------------------------

    def start_operation(
        self, job: str, kind: str, reason: str, decision_id: int, step: str, **values: Unpack[OperationFacts]
    ) -> OperationRecord:
        """Open an operation of `job`. The caller holds the job lock and checked none is open."""
        now = utcnow()
        with self._tx() as tx:
            result = tx.execute(
                operations_table.insert().values(
                    job=job,
                    kind=kind,
                    reason=reason,
                    decision_id=decision_id,
                    requested_at=now,
                    step=step,
                    step_since=now,
                    **values,
                )
            )
        operation = self.operation_by_id(int(result.inserted_primary_key[0]))  # type: ignore[index]
        assert operation is not None
        return operation

    def operation(self, job: str) -> OperationRecord | None:
        """The job's open operation (at most one is open at a time), or None."""
        with self._tx() as tx:
            row = tx.execute(
                sa.select(operations_table)
                .where(operations_table.c.job == job, operations_table.c.finished_at.is_(None))
                .order_by(operations_table.c.id.desc())
                .limit(1)
            ).first()
        return None if row is None else _record(OperationRecord, row)

    def operation_by_id(self, operation_id: int) -> OperationRecord | None:
        with self._tx() as tx:
            row = tx.execute(sa.select(operations_table).where(operations_table.c.id == operation_id)).first()
        return None if row is None else _record(OperationRecord, row)

    def operations(self, job: str, limit: int = 20) -> list[OperationRecord]:
        """The job's newest operations, open or finished, newest first."""
        with self._tx() as tx:
            rows = tx.execute(
                sa.select(operations_table)
                .where(operations_table.c.job == job)
                .order_by(operations_table.c.id.desc())
                .limit(limit)
            ).all()
        return [_record(OperationRecord, row) for row in rows]

    def update_operation(self, operation_id: int, **values: Unpack[OperationChanges]) -> None:
        """Set columns of an open operation; a changed `step` also moves `step_since`."""
        with self._tx() as tx:
            if "step" in values:
                current = tx.execute(
                    sa.select(operations_table.c.step).where(operations_table.c.id == operation_id)
                ).scalar()
                if current != values["step"]:
                    values.setdefault("step_since", utcnow())
            tx.execute(
                operations_table.update()
                .where(operations_table.c.id == operation_id, operations_table.c.finished_at.is_(None))
                .values(**values)
            )

    def finish_operation(self, operation_id: int, outcome: str) -> None:
        """Close an operation once, with the outcome its decision row also gets."""
        with self._tx() as tx:
            tx.execute(
                operations_table.update()
                .where(operations_table.c.id == operation_id, operations_table.c.finished_at.is_(None))
                .values(finished_at=utcnow(), outcome=outcome)
            )

    # --- warehouse partition versions ------------------------------------------------------------

    def add_partition_version(
        self, job: str, partition: str, location: str, source: str, **values: Unpack[PartitionVersionFacts]
    ) -> PartitionVersionRecord:
        """Record a new version of a partition, numbered one past its newest, as "staged"."""
        with self._tx() as tx:
            newest = tx.execute(
                sa.select(sa.func.max(partition_versions_table.c.version)).where(
                    partition_versions_table.c.job == job, partition_versions_table.c.partition == partition
                )
            ).scalar()
            result = tx.execute(
                partition_versions_table.insert().values(
                    job=job,
                    partition=partition,
                    version=(newest or 0) + 1,
                    location=location,
                    source=source,
                    status="staged",
                    created_at=utcnow(),
                    **values,
                )
            )
            row = tx.execute(
                sa.select(partition_versions_table).where(
                    partition_versions_table.c.id == result.inserted_primary_key[0]  # type: ignore[index]
                )
            ).one()
        return _record(PartitionVersionRecord, row)

    def update_partition_version(self, version_id: int, **values: Unpack[PartitionVersionChanges]) -> None:
        with self._tx() as tx:
            tx.execute(
                partition_versions_table.update()
                .where(partition_versions_table.c.id == version_id)
                .values(**values)
            )

    def partition_versions(self, job: str, partition: str | None = None) -> list[PartitionVersionRecord]:
        """A job's partition versions (of one partition), newest first."""
        query = sa.select(partition_versions_table).where(partition_versions_table.c.job == job)
        if partition is not None:
            query = query.where(partition_versions_table.c.partition == partition)
        with self._tx() as tx:
            rows = tx.execute(query.order_by(partition_versions_table.c.id.desc())).all()
        return [_record(PartitionVersionRecord, row) for row in rows]
