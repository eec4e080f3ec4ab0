"""Samples of the number of task instances per state, one row per (time bucket, state), for the status page.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "state_sample",
        sa.Column("bucket_at", sa.DateTime(), nullable=False),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("bucket_at", "state"),
    )


def downgrade() -> None:
    op.drop_table("state_sample")
