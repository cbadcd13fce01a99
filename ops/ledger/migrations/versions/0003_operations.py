"""Recovery operations: one row per rewind, restate or upgrade, open until the loop finishes it.

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"

TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "operations",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("job", sa.String(64), sa.ForeignKey("jobs.name"), nullable=False, index=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("decision_id", sa.Integer, nullable=False),
        sa.Column("requested_at", TZ, nullable=False),
        sa.Column("step", sa.String(32), nullable=False),
        sa.Column("step_since", TZ, nullable=False),
        sa.Column("savepoint_id", sa.String(64)),
        sa.Column("savepoint_batch", sa.BigInteger),
        sa.Column("replay_to", sa.BigInteger),
        sa.Column("rows_before", sa.BigInteger),
        sa.Column("rewound_at", TZ),
        sa.Column("candidate_spec", sa.Text),
        sa.Column("candidate_version", sa.String(32)),
        sa.Column("previous_spec", sa.Text),
        sa.Column("previous_version", sa.String(32)),
        sa.Column("readiness_timeout", sa.Float),
        sa.Column("dry_run_id", sa.String(96)),
        sa.Column("dry_run_pid", sa.Integer),
        sa.Column("dry_run_app_id", sa.String(128)),
        sa.Column("dry_run_started_at", TZ),
        sa.Column("dry_run_passed_at", TZ),
        sa.Column("failure", sa.Text),
        sa.Column("finished_at", TZ),
        sa.Column("outcome", sa.Text),
    )


def downgrade() -> None:
    op.drop_table("operations")
