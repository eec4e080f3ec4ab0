"""When an outbox row's outcome became unknown (``landing_outbox.unknown_since``).

A post whose answer was never read (a timeout, a worker killed or stalled past its claim) may have reached Airflow.
Before such a row is posted again, the publisher asks Airflow whether it holds the event; ``unknown_since`` is when
the first such attempt's outcome became unknown (the lapsed claim's end, or the timeout): it bounds the look-up (the
event, if any, is no older than a claim before it) and `status` shows it per row. NULL: nothing is unknown. Rows
already there keep NULL (their look-up starts at their landing).

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-28
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("landing_outbox") as batch:
        batch.add_column(sa.Column("unknown_since", sa.DateTime(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("landing_outbox") as batch:
        batch.drop_column("unknown_since")
