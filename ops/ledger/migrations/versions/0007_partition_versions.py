"""Warehouse partition versions: one row per version of a partition compaction (or a backfill,
or a rollback) staged, audited and published or blocked.

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"

TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "partition_versions",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("job", sa.String(64), nullable=False, index=True),
        sa.Column("partition", sa.String(512), nullable=False, index=True),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("location", sa.Text, nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("created_at", TZ, nullable=False),
        sa.Column("published_at", TZ),
        sa.Column("input_files", sa.Integer),
        sa.Column("input_rows", sa.BigInteger),
        sa.Column("input_fingerprint", sa.String(64)),
        sa.Column("output_files", sa.Integer),
        sa.Column("output_rows", sa.BigInteger),
        sa.Column("rows_before", sa.BigInteger),
        sa.Column("audit", sa.JSON),
        sa.Column("expired_at", TZ),
        sa.UniqueConstraint("job", "partition", "version", name="uq_partition_versions_version"),
    )


def downgrade() -> None:
    op.drop_table("partition_versions")
