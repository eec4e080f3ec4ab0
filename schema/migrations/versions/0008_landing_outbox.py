"""Landings published to Airflow as asset events: the tables watched (``asset_watch``) and the outbox of landed
partitions (``landing_outbox``), one row per landing, claimed by one worker at a time (ARCHITECTURE.md, "Schedule on
landings").

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-27
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

UNDELIVERED = sa.text("state IN ('pending', 'sending')")


def upgrade() -> None:
    op.create_table(
        "asset_watch",
        sa.Column("uri", sa.String(500), primary_key=True),
        sa.Column("asset_id", sa.BigInteger(), nullable=False),
        sa.Column("db_name", sa.String(128), nullable=False),
        sa.Column("table_name", sa.String(256), nullable=False),
        sa.Column("shardcode", sa.Integer(), nullable=False),
        sa.Column("watched_since", sa.DateTime(), nullable=False),
        sa.Column("baselined_at", sa.DateTime(), nullable=True),
        sa.Column("seen_at", sa.DateTime(), nullable=False),
    )
    op.create_index("asset_watch_shardcode", "asset_watch", ["shardcode"])
    op.create_table(
        "landing_outbox",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True),
        sa.Column("uri", sa.String(500), nullable=False),
        sa.Column("partition_name", sa.String(767), nullable=False),
        sa.Column("partition_key", sa.Text(), nullable=False),
        sa.Column("shardcode", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("landed_at", sa.DateTime(), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(), nullable=False),
        sa.Column("claim_token", sa.String(64), nullable=True),
        sa.Column("claimed_by", sa.String(250), nullable=True),
        sa.Column("claimed_until", sa.DateTime(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("posts", sa.Integer(), nullable=False),
        sa.Column("unknown_outcomes", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("delivered_at", sa.DateTime(), nullable=True),
        sa.Column("event_id", sa.BigInteger(), nullable=True),
    )
    op.create_index("outbox_landing", "landing_outbox", ["uri", "partition_name"], unique=True)
    op.create_index(
        "outbox_undelivered",
        "landing_outbox",
        ["shardcode", "next_attempt_at"],
        postgresql_where=UNDELIVERED,
        sqlite_where=UNDELIVERED,
    )


def downgrade() -> None:
    op.drop_index("outbox_undelivered", table_name="landing_outbox")
    op.drop_index("outbox_landing", table_name="landing_outbox")
    op.drop_table("landing_outbox")
    op.drop_index("asset_watch_shardcode", table_name="asset_watch")
    op.drop_table("asset_watch")
