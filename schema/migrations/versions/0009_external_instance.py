"""An Airflow deployment's instance name in the key of its tasks (``external_task.instance``).

Two Airflow deployments that share one service can have the same (dag_id, task_id, run_id, map_index, try_number):
``scheduled__<date>`` run ids are the same in both. The provider's connection names its deployment (the extra
``instance``); the key here becomes (instance, dag_id, task_id, run_id, map_index), so the two never meet. Rows
registered before keep the instance "" (what a connection without one sends). On SQLite the table is rebuilt
(Alembic's batch mode, as env.py sets it).

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-28
"""

import warnings

import sqlalchemy as sa
from alembic import op
from sqlalchemy.exc import SAWarning

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

OLD_KEY = ["dag_id", "task_id", "run_id", "map_index"]


def _set_key(columns: list[str]) -> None:
    """Replace the table's primary key: on PostgreSQL by its name; SQLite's batch mode rebuilds the table with the
    new key (its old one has no name to drop; SQLAlchemy warns that the copy's key differs from the old, as meant)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*specifies columns .* as primary_key=True", category=SAWarning)
        with op.batch_alter_table("external_task") as batch:
            if op.get_bind().dialect.name != "sqlite":
                batch.drop_constraint("external_task_pkey", type_="primary")
            batch.create_primary_key("external_task_pkey", columns)


def upgrade() -> None:
    with op.batch_alter_table("external_task") as batch:
        batch.add_column(sa.Column("instance", sa.String(64), nullable=False, server_default=""))
    _set_key([*OLD_KEY, "instance"])


def downgrade() -> None:
    # Keys that differ only by their instance cannot all stay: the one registered last is kept for each key.
    op.execute(
        "DELETE FROM external_task WHERE EXISTS (SELECT 1 FROM external_task newer WHERE "
        "newer.dag_id = external_task.dag_id AND newer.task_id = external_task.task_id AND "
        "newer.run_id = external_task.run_id AND newer.map_index = external_task.map_index AND "
        "newer.registered_at > external_task.registered_at)"
    )
    _set_key(OLD_KEY)
    with op.batch_alter_table("external_task") as batch:
        batch.drop_column("instance")
