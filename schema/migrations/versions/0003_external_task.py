"""Tasks of another scheduler (Airflow) waiting through smartsensor: their keys and current try.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "external_task",
        sa.Column("dag_id", sa.String(250), nullable=False),
        sa.Column("task_id", sa.String(250), nullable=False),
        sa.Column("run_id", sa.String(250), nullable=False),
        sa.Column("map_index", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("try_number", sa.Integer(), nullable=False),
        sa.Column("logical_date", sa.DateTime(), nullable=True),
        sa.Column("ti_task_id", sa.String(250), nullable=False),
        sa.Column("ti_execution_date", sa.DateTime(), nullable=False),
        sa.Column("registered_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("dag_id", "task_id", "run_id", "map_index"),
    )


def downgrade() -> None:
    op.drop_table("external_task")
