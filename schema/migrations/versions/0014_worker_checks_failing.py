"""Since when every check of a worker's rounds has failed (``worker.checks_failing_since``), and when one last
answered (``worker.checks_answered_at``).

A worker that reaches PostgreSQL but not the metastore kept its ranges for as long as its path was out: its lease
heartbeat goes through PostgreSQL alone, and it could not tell its own path from a metastore down for everyone. Each
worker now records, with its heartbeat, since when all its checks have failed; one failing for ``[smart_sensor]
failover_after`` while another live worker's checks answered within as long hands its ranges over. NULL: not
failing; never answered.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("worker") as batch:
        batch.add_column(sa.Column("checks_failing_since", sa.DateTime(), nullable=True))
        batch.add_column(sa.Column("checks_answered_at", sa.DateTime(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("worker") as batch:
        batch.drop_column("checks_answered_at")
        batch.drop_column("checks_failing_since")
