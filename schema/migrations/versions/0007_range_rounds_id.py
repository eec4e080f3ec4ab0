"""worker_round's key is a range rounds' id, not a worker's: the column ``worker_id`` becomes ``range_rounds_id``.

The value was always ``"{worker}:{shard_min}-{shard_max}"`` (one worker serving one range), while ``worker_id`` in
the ``worker`` table names the process alone. Only the name changes; the rows stay. On SQLite the table is rebuilt
(Alembic's batch mode, as env.py sets it).

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-27
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("worker_round") as batch:
        batch.alter_column(
            "worker_id", new_column_name="range_rounds_id", existing_type=sa.String(250), existing_nullable=False
        )


def downgrade() -> None:
    with op.batch_alter_table("worker_round") as batch:
        batch.alter_column(
            "range_rounds_id", new_column_name="worker_id", existing_type=sa.String(250), existing_nullable=False
        )
