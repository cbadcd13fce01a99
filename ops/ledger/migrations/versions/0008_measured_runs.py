"""What each run measured of its own speed, for the graces the supervisor learns: seconds from
launch to its first heartbeat, and its longest batch.

Revision ID: 0008
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"


def upgrade() -> None:
    op.add_column("runs", sa.Column("start_seconds", sa.Float))
    op.add_column("runs", sa.Column("longest_batch_seconds", sa.Float))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("longest_batch_seconds")
        batch.drop_column("start_seconds")
