"""Initial ledger schema: jobs, runs, decisions, alert outbox.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None

TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("desired_state", sa.String(16), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("state_reason", sa.Text, nullable=False),
        sa.Column("state_since", TZ, nullable=False),
        sa.Column("restart_requested_at", TZ),
        sa.Column("config_version", sa.String(32), nullable=False),
        sa.Column("last_batch_id", sa.BigInteger),
        sa.Column("input_rate", sa.Float),
        sa.Column("processed_rate", sa.Float),
        sa.Column("backlog", sa.BigInteger),
        sa.Column("heartbeat_at", TZ),
        sa.Column("updated_at", TZ, nullable=False),
    )
    op.create_table(
        "runs",
        sa.Column("run_id", sa.String(64), primary_key=True),
        sa.Column("job", sa.String(64), sa.ForeignKey("jobs.name"), nullable=False, index=True),
        sa.Column("backend", sa.String(32), nullable=False),
        sa.Column("pid", sa.Integer),
        sa.Column("app_id", sa.String(128)),
        sa.Column("metrics_port", sa.Integer),
        sa.Column("log_path", sa.Text),
        sa.Column("config_version", sa.String(32), nullable=False),
        sa.Column("started_at", TZ, nullable=False),
        sa.Column("stopped_at", TZ),
        sa.Column("exit_reason", sa.Text),
        sa.Column("first_batch_id", sa.BigInteger),
        sa.Column("last_batch_id", sa.BigInteger),
    )
    op.create_table(
        "decisions",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("job", sa.String(64), nullable=False, index=True),
        sa.Column("at", TZ, nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("inputs", sa.JSON, nullable=False),
        sa.Column("run_id", sa.String(64)),
        sa.Column("outcome", sa.Text),
    )
    op.create_table(
        "alerts",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("job", sa.String(64), nullable=False, index=True),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("dedup_key", sa.String(128), nullable=False, index=True),
        sa.Column("severity", sa.String(16), nullable=False),
        sa.Column("payload", sa.JSON, nullable=False),
        sa.Column("status", sa.String(16), nullable=False, index=True),
        sa.Column("created_at", TZ, nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("next_attempt_at", TZ, nullable=False),
        sa.Column("last_error", sa.Text),
        sa.Column("sent_at", TZ),
    )


def downgrade() -> None:
    for table in ("alerts", "decisions", "runs", "jobs"):
        op.drop_table(table)
