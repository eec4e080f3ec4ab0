"""Initial schema: task_instance and worker_round.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "task_instance",
        sa.Column("dag_id", sa.String(250), nullable=False),
        sa.Column("task_id", sa.String(250), nullable=False),
        sa.Column("execution_date", sa.DateTime(), nullable=False),
        sa.Column("state", sa.String(20), nullable=True),
        sa.Column("try_number", sa.Integer(), nullable=False),
        sa.Column("max_tries", sa.Integer(), nullable=False),
        sa.Column("start_date", sa.DateTime(), nullable=True),
        sa.Column("end_date", sa.DateTime(), nullable=True),
        sa.Column("updated_at", sa.DateTime(), nullable=True),
        sa.Column("operator", sa.String(100), nullable=True),
        sa.Column("classpath", sa.String(500), nullable=True),
        sa.Column("fileloc", sa.String(2000), nullable=True),
        sa.Column("hostname", sa.String(250), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("attr_dict", sa.Text(), nullable=True),
        sa.Column("exec_dict", sa.Text(), nullable=True),
        sa.Column("hashcode", sa.BigInteger(), nullable=True),
        sa.Column("shardcode", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint("dag_id", "task_id", "execution_date"),
    )
    op.create_index("ti_hashcode", "task_instance", ["hashcode"])
    op.create_index("ti_shardcode", "task_instance", ["shardcode"])
    op.create_index("ti_state_shardcode", "task_instance", ["state", "shardcode"])
    op.create_table(
        "worker_round",
        sa.Column("worker_id", sa.String(250), nullable=False),
        sa.Column("hostname", sa.String(250), nullable=True),
        sa.Column("pid", sa.Integer(), nullable=True),
        sa.Column("shard_min", sa.Integer(), nullable=False),
        sa.Column("shard_max", sa.Integer(), nullable=False),
        sa.Column("last_round_at", sa.DateTime(), nullable=True),
        sa.Column("last_round_seconds", sa.Float(), nullable=True),
        sa.Column("last_round_json", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("worker_id"),
    )


def downgrade() -> None:
    op.drop_table("worker_round")
    op.drop_index("ti_state_shardcode", table_name="task_instance")
    op.drop_index("ti_shardcode", table_name="task_instance")
    op.drop_index("ti_hashcode", table_name="task_instance")
    op.drop_table("task_instance")
