"""Run ids and alert dedup keys long enough for the longest job name, on PostgreSQL too.

A run id is the job name plus 23 characters and a notice's dedup key the name plus about 75; the
job name may have 63. SQLite never enforced the old lengths (64 and 128); PostgreSQL refuses the
insert.

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"

# (table, column, old length, new length)
WIDENED = (
    ("runs", "run_id", 64, 128),
    ("decisions", "run_id", 64, 128),
    ("alerts", "dedup_key", 128, 256),
)


def upgrade() -> None:
    for table, column, old, new in WIDENED:
        with op.batch_alter_table(table) as batch:
            batch.alter_column(column, type_=sa.String(new), existing_type=sa.String(old))


def downgrade() -> None:
    for table, column, old, new in WIDENED:
        with op.batch_alter_table(table) as batch:
            batch.alter_column(column, type_=sa.String(old), existing_type=sa.String(new))
