"""The index that keeps a worker's in-memory index true between rebuilds: started tasks by when they changed.

A worker's reconciliation (every ``[smart_sensor] reconcile_interval``) asks for the smart_running tasks of its
range changed since its last one: a set-state by hand, a task another process started, a row `db reshard` moved.
The partial index holds only smart_running rows, so the round's marking (smart_running → success) enters no new
entry in it; starting a task enters one.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

RUNNING = sa.text("state = 'smart_running'")


def upgrade() -> None:
    op.create_index(
        "ti_running_updated", "task_instance", ["updated_at"], postgresql_where=RUNNING, sqlite_where=RUNNING
    )


def downgrade() -> None:
    op.drop_index("ti_running_updated", table_name="task_instance")
