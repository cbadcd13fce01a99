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
is not `SCHEMA_REVISION`. What only history reads (decisions, closed runs and standbys, delivered
alerts) is pruned by age (`prune`, run by the platform DAG), so a fleet's ledger stops growing.

The tables are in `ops.ledger.schema`, the rows as records in `ops.ledger.records`, and the typed
columns an update may set in `ops.ledger.changes`; this module is the engine and `Ledger`, a
method per query, grouped by table (it stays one class: every method is one transaction through
the same `_tx`, and callers hold one `Ledger`).
"""

from __future__ import annotations

import itertools
import json
import sqlite3
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Unpack

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
from ops.ledger.records import (
    AlertRecord,
    DecisionRecord,
    JobRecord,
    OperationRecord,
    PartitionVersionRecord,
    RecordT,
    RunRecord,
    SavepointRecord,
    StandbyRecord,
    from_row,
)
from ops.ledger.schema import (
    SCHEMA_REVISION,
    alerts_table,
    decisions_table,
    jobs_table,
    migrate,
    operations_table,
    partition_versions_table,
    runs_table,
    savepoints_table,
    schema_revision,
    standbys_table,
)
from ops.spec.platform import LedgerRetention
from ops.states import FAILURE

# The outbox statuses of an alert not delivered yet.
UNDELIVERED = ("pending", "sending")

# Fail a pass within seconds when a PostgreSQL ledger does not answer, rather than hanging on TCP.
CONNECT_TIMEOUT_SECONDS = 10
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
        return from_row(JobRecord, row)

    def job(self, name: str) -> JobRecord | None:
        with self._tx() as tx:
            row = tx.execute(sa.select(jobs_table).where(jobs_table.c.name == name)).first()
        return None if row is None else from_row(JobRecord, row)

    def jobs(self) -> list[JobRecord]:
        with self._tx() as tx:
            rows = tx.execute(sa.select(jobs_table).order_by(jobs_table.c.name)).all()
        return [from_row(JobRecord, row) for row in rows]

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

    def open_runs(self) -> dict[str, RunRecord]:
        """Every job's newest open run, by job: one query for a whole fleet."""
        with self._tx() as tx:
            rows = tx.execute(
                sa.select(runs_table)
                .where(runs_table.c.stopped_at.is_(None))
                .order_by(runs_table.c.started_at)
            ).all()
        # Oldest first, so each job keeps its newest.
        return {row.job: from_row(RunRecord, row) for row in rows}

    def runs(self, job: str, limit: int = 20) -> list[RunRecord]:
        """The job's newest runs, newest first."""
        return self._newest(runs_table, RunRecord, job, limit)

    def failed_runs_since(self, since: datetime, job: str | None = None) -> dict[str, int]:
        """How many runs that started since `since` ended in a failure (the restarts they caused),
        by job; only `job`'s when given. One query for every job."""
        query = (
            sa.select(runs_table.c.job, sa.func.count())
            .where(runs_table.c.started_at >= since, runs_table.c.exit_reason.like(f"{FAILURE}%"))
            .group_by(runs_table.c.job)
        )
        if job is not None:
            query = query.where(runs_table.c.job == job)
        with self._tx() as tx:
            return {name: int(count) for name, count in tx.execute(query).all()}

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
        return [from_row(record, row) for row in rows]

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
        return [from_row(DecisionRecord, row) for row in rows]

    # --- retention -------------------------------------------------------------------------------

    def prune(self, retention: LedgerRetention, now: datetime) -> dict[str, int]:
        """Delete the decisions, closed runs and standbys, and delivered alerts older than
        `retention` allows; the rows deleted by table. An open incident's newest alert stays: it
        is what says the incident is open."""
        days = timedelta(days=1)
        heads = sa.select(sa.func.max(alerts_table.c.id)).group_by(alerts_table.c.dedup_key)
        deletions = {
            "decisions": decisions_table.delete().where(
                decisions_table.c.at < now - retention.decisions_days * days
            ),
            "alerts": alerts_table.delete().where(
                alerts_table.c.created_at < now - retention.alerts_days * days,
                alerts_table.c.status.not_in(UNDELIVERED),
                alerts_table.c.id.not_in(heads),
            ),
            "runs": runs_table.delete().where(
                runs_table.c.started_at < now - retention.runs_days * days,
                runs_table.c.stopped_at.is_not(None),
            ),
            "standbys": standbys_table.delete().where(
                standbys_table.c.started_at < now - retention.runs_days * days,
                standbys_table.c.stopped_at.is_not(None),
            ),
        }
        with self._tx() as tx:
            return {table: tx.execute(statement).rowcount for table, statement in deletions.items()}

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
        return [from_row(AlertRecord, row) for row in rows]

    def due_alerts(self, now: datetime) -> list[AlertRecord]:
        """Alerts due for a delivery attempt, oldest first, up to the first one that is not due.

        The outbox is a queue: an alert waiting out a retry holds back the ones behind it, so they
        reach Slack in the order they were raised. A "sending" row is due again once its claim
        lease (its `next_attempt_at`) has run out, because the process that claimed it died.
        """
        with self._tx() as tx:
            rows = tx.execute(
                sa.select(alerts_table)
                .where(alerts_table.c.status.in_(UNDELIVERED))
                .order_by(alerts_table.c.id)
            ).all()
        records = [from_row(AlertRecord, row) for row in rows]
        return list(itertools.takewhile(lambda record: record.next_attempt_at <= now, records))

    def claim_alert(self, alert_id: int, now: datetime, lease_until: datetime) -> bool:
        """Mark a due alert "sending" until `lease_until`; False when another process claimed it first."""
        with self._tx() as tx:
            result = tx.execute(
                alerts_table.update()
                .where(
                    alerts_table.c.id == alert_id,
                    alerts_table.c.status.in_(UNDELIVERED),
                    alerts_table.c.next_attempt_at <= now,
                )
                .values(status="sending", next_attempt_at=lease_until)
            )
        return result.rowcount == 1

    def newest_alerts(self, job: str | None = None) -> list[AlertRecord]:
        """The newest outbox row of each of the job's dedup keys (every job's, without `job`),
        oldest first."""
        newest_ids = sa.select(sa.func.max(alerts_table.c.id)).group_by(alerts_table.c.dedup_key)
        if job is not None:
            newest_ids = newest_ids.where(alerts_table.c.job == job)
        with self._tx() as tx:
            rows = tx.execute(
                sa.select(alerts_table).where(alerts_table.c.id.in_(newest_ids)).order_by(alerts_table.c.id)
            ).all()
        return [from_row(AlertRecord, row) for row in rows]

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
        return [from_row(SavepointRecord, row) for row in rows]

    def savepoint(self, savepoint_id: str) -> SavepointRecord | None:
        """A catalogued savepoint of any job, by id."""
        with self._tx() as tx:
            row = tx.execute(sa.select(savepoints_table).where(savepoints_table.c.id == savepoint_id)).first()
        return None if row is None else from_row(SavepointRecord, row)

    def newest_savepoints(self, status: str) -> dict[str, SavepointRecord]:
        """Each job's newest savepoint of `status`, by job: one query for every job."""
        ranked = (
            sa.select(
                savepoints_table,
                sa.func.row_number()
                .over(
                    partition_by=savepoints_table.c.job,
                    order_by=(savepoints_table.c.created_at.desc(), savepoints_table.c.id.desc()),
                )
                .label("rank"),
            )
            .where(savepoints_table.c.status == status)
            .subquery()
        )
        columns = [ranked.c[column.name] for column in savepoints_table.columns]
        with self._tx() as tx:
            rows = tx.execute(sa.select(*columns).where(ranked.c.rank == 1)).all()
        return {row.job: from_row(SavepointRecord, row) for row in rows}

    def all_savepoints(self, status: str | None = None) -> list[SavepointRecord]:
        """Every job's catalogued savepoints (of one status), newest first: the job board's one query."""
        query = sa.select(savepoints_table)
        if status is not None:
            query = query.where(savepoints_table.c.status == status)
        with self._tx() as tx:
            rows = tx.execute(
                query.order_by(savepoints_table.c.created_at.desc(), savepoints_table.c.id.desc())
            ).all()
        return [from_row(SavepointRecord, row) for row in rows]

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
        return None if row is None else from_row(OperationRecord, row)

    def jobs_with_open_operations(self) -> set[str]:
        """The jobs that have an open operation: one query for a whole fleet."""
        with self._tx() as tx:
            rows = tx.execute(
                sa.select(operations_table.c.job).where(operations_table.c.finished_at.is_(None)).distinct()
            ).all()
        return {row.job for row in rows}

    def operation_by_id(self, operation_id: int) -> OperationRecord | None:
        with self._tx() as tx:
            row = tx.execute(sa.select(operations_table).where(operations_table.c.id == operation_id)).first()
        return None if row is None else from_row(OperationRecord, row)

    def operations(self, job: str, limit: int = 20) -> list[OperationRecord]:
        """The job's newest operations, open or finished, newest first."""
        with self._tx() as tx:
            rows = tx.execute(
                sa.select(operations_table)
                .where(operations_table.c.job == job)
                .order_by(operations_table.c.id.desc())
                .limit(limit)
            ).all()
        return [from_row(OperationRecord, row) for row in rows]

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
        return from_row(PartitionVersionRecord, row)

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
        return [from_row(PartitionVersionRecord, row) for row in rows]
