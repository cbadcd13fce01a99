"""Indexes on the times the ledger's retention prunes by (decisions, alerts, runs, standbys) and
`warden status` reads recent runs by, so neither reads a table whole however old the ledger is.

Revision ID: 0009
Revises: 0008
"""

from alembic import op

revision = "0009"
down_revision = "0008"

INDEXES = {
    "ix_decisions_at": ("decisions", "at"),
    "ix_alerts_created_at": ("alerts", "created_at"),
    "ix_runs_started_at": ("runs", "started_at"),
    "ix_standbys_started_at": ("standbys", "started_at"),
}


def upgrade() -> None:
    for name, (table, column) in INDEXES.items():
        op.create_index(name, table, [column])


def downgrade() -> None:
    for name, (table, _) in INDEXES.items():
        op.drop_index(name, table_name=table)
