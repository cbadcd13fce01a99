"""Savepoint catalogue: one row per savepoint whose manifest is in the object store.

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"

TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "savepoints",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("job", sa.String(64), nullable=False, index=True),
        sa.Column("batch_id", sa.BigInteger, nullable=False),
        sa.Column("created_at", TZ, nullable=False),
        sa.Column("manifest_key", sa.Text, nullable=False),
        sa.Column("total_bytes", sa.BigInteger, nullable=False),
        sa.Column("uploaded_bytes", sa.BigInteger, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("config_version", sa.String(32), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("savepoints")
