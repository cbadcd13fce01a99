"""Autoscaling: each job's scale (cores, batch size, whether an operator pinned it) and the
autoscaler's newest recommendation; the cores each run was launched with; a rescale's facts on its
operation row (from and to, the true rate before, when the stop began, the measured restart cost).

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"

TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.add_column("jobs", sa.Column("scale_cores", sa.Integer))
    op.add_column("jobs", sa.Column("scale_max_files", sa.Integer))
    op.add_column("jobs", sa.Column("scale_pinned", sa.Boolean, nullable=False, server_default=sa.false()))
    op.add_column("jobs", sa.Column("recommended_cores", sa.Integer))
    op.add_column("jobs", sa.Column("scale_low_since", TZ))
    op.add_column("runs", sa.Column("cores", sa.Integer))
    op.add_column("runs", sa.Column("max_files_per_trigger", sa.Integer))
    op.add_column("operations", sa.Column("from_cores", sa.Integer))
    op.add_column("operations", sa.Column("to_cores", sa.Integer))
    op.add_column("operations", sa.Column("to_max_files", sa.Integer))
    op.add_column("operations", sa.Column("true_rate_before", sa.Float))
    op.add_column("operations", sa.Column("stop_requested_at", TZ))
    op.add_column("operations", sa.Column("restart_cost_seconds", sa.Float))


def downgrade() -> None:
    for table, column in (
        ("operations", "restart_cost_seconds"),
        ("operations", "stop_requested_at"),
        ("operations", "true_rate_before"),
        ("operations", "to_max_files"),
        ("operations", "to_cores"),
        ("operations", "from_cores"),
        ("runs", "max_files_per_trigger"),
        ("runs", "cores"),
        ("jobs", "scale_low_since"),
        ("jobs", "recommended_cores"),
        ("jobs", "scale_pinned"),
        ("jobs", "scale_max_files"),
        ("jobs", "scale_cores"),
    ):
        with op.batch_alter_table(table) as batch:
            batch.drop_column(column)
