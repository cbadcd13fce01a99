"""Warm standbys: one row per standby driver, open (stopped_at null) while it waits for a grant.

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"

TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "standbys",
        sa.Column("run_id", sa.String(128), primary_key=True),
        sa.Column("job", sa.String(64), sa.ForeignKey("jobs.name"), nullable=False, index=True),
        sa.Column("backend", sa.String(32), nullable=False),
        sa.Column("pid", sa.Integer),
        sa.Column("app_id", sa.String(128)),
        sa.Column("log_path", sa.Text),
        sa.Column("config_version", sa.String(32), nullable=False),
        sa.Column("started_at", TZ, nullable=False),
        sa.Column("granted_at", TZ),
        sa.Column("replaces_run_id", sa.String(128)),
        sa.Column("stopped_at", TZ),
        sa.Column("exit_reason", sa.Text),
    )


def downgrade() -> None:
    op.drop_table("standbys")
