"""Indexes that serve the round without taxing its marking.

A round ends tasks by the hundred thousand (smart_running → success). Every index whose key changes, or that
the new row version enters, costs one insertion per marked row. Before: four (primary key, hashcode,
shardcode, (state, shardcode)). After: two (primary key, hashcode). The round and the scheduler find their rows
through partial indexes that hold only the states they look for, so an ended task enters none of them:
- ti_pending_shardcode: smart_pending tasks by shardcode (what an incremental round starts: its change feed);
- ti_waiting_shardcode: smart_pending and smart_running tasks by shardcode (an index rebuild, `status`);
- ti_classic_state: scheduled, running and up_for_retry tasks (the scheduler's loop).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

PENDING = sa.text("state = 'smart_pending'")
WAITING = sa.text("state IN ('smart_pending', 'smart_running')")
CLASSIC = sa.text("state IN ('scheduled', 'running', 'up_for_retry')")


def upgrade() -> None:
    op.drop_index("ti_state_shardcode", table_name="task_instance")
    op.drop_index("ti_shardcode", table_name="task_instance")
    op.create_index(
        "ti_pending_shardcode", "task_instance", ["shardcode"], postgresql_where=PENDING, sqlite_where=PENDING
    )
    op.create_index(
        "ti_waiting_shardcode", "task_instance", ["shardcode"], postgresql_where=WAITING, sqlite_where=WAITING
    )
    op.create_index("ti_classic_state", "task_instance", ["state"], postgresql_where=CLASSIC, sqlite_where=CLASSIC)


def downgrade() -> None:
    op.drop_index("ti_classic_state", table_name="task_instance")
    op.drop_index("ti_waiting_shardcode", table_name="task_instance")
    op.drop_index("ti_pending_shardcode", table_name="task_instance")
    op.create_index("ti_shardcode", "task_instance", ["shardcode"])
    op.create_index("ti_state_shardcode", "task_instance", ["state", "shardcode"])
