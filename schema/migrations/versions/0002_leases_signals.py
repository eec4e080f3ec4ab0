"""Workers, shard leases (HA with fencing epochs) and landing signals.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "worker",
        sa.Column("worker_id", sa.String(250), nullable=False),
        sa.Column("hostname", sa.String(250), nullable=True),
        sa.Column("pid", sa.Integer(), nullable=True),
        sa.Column("started_at", sa.DateTime(), nullable=True),
        sa.Column("heartbeat_at", sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint("worker_id"),
    )
    op.create_table(
        "shard_lease",
        sa.Column("shard_min", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("shard_max", sa.Integer(), nullable=False),
        sa.Column("owner", sa.String(250), nullable=True),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("expires_at", sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint("shard_min"),
    )
    op.create_table(
        "partition_signal",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("name", sa.String(2000), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("signal_created_at", "partition_signal", ["created_at"])


def downgrade() -> None:
    op.drop_index("signal_created_at", table_name="partition_signal")
    op.drop_table("partition_signal")
    op.drop_table("shard_lease")
    op.drop_table("worker")
