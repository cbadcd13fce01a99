"""The ledger's schema: its tables as the queries see them (SQLAlchemy Core), the revision the code
expects (`SCHEMA_REVISION`) and how a database is brought to it (the Alembic migrations in
`ops/ledger/migrations/`, which own the schema)."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
# The newest revision in MIGRATIONS_DIR (a test holds it to Alembic's head): bump it with each
# new migration, or every `Ledger.open` runs Alembic to find out there is nothing to do.
SCHEMA_REVISION = "0009"
# Alembic's bookkeeping table: one row, the revision the database is at.
VERSION_TABLE = "alembic_version"

# Room for the longest ids the platform makes from a job name (63 characters at most): a run id
# adds 23 characters, a notice's dedup key about 75. PostgreSQL enforces these, SQLite does not.
RUN_ID_LENGTH = 128
DEDUP_KEY_LENGTH = 256

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
    sa.Column("started_at", sa.DateTime(timezone=True), nullable=False, index=True),
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
    sa.Column("at", sa.DateTime(timezone=True), nullable=False, index=True),
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
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, index=True),
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
    sa.Column("started_at", sa.DateTime(timezone=True), nullable=False, index=True),
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
