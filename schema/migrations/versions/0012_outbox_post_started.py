"""When the claim that holds an outbox row began to post it (``landing_outbox.post_started_at``), and when retention
forgot a watched table (``asset_watch.forgotten_at``), and which of its consumers Airflow had paused when it last
listed it (``asset_watch.paused_consumers``: Airflow queues no run of a paused DAG for an event, so `status` names
them).

A claim takes a batch of rows, then posts them one by one; before this, a claim that lapsed (its worker killed or
stalled) made every row of the batch of unknown outcome, posted or not, and each was looked up in Airflow before it
could be posted again. Now a claim marks a row just before its post (and extends its claim then): only a row whose
post began may have reached Airflow. NULL: no post under the current claim.

Retention used to delete a table's watch once it had forgotten its landings; the watch row now stays, marked
``forgotten_at`` (its last ``seen_at``): a table watched again takes a new baseline, and ``[landings]
publish_existing`` no longer publishes its whole history a second time. Until it is listed again (``seen_at`` above
``forgotten_at``) it counts as not watched.

Rows already there: a ``sending`` row is taken as posting since its claim's end (the workers that claimed it did not
mark it), and an undelivered row that counted an unknown outcome but has no ``unknown_since`` is unknown since its
landing (its look-up then starts there, as it did): the publisher now asks Airflow about a row only while
``unknown_since`` is set.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("landing_outbox") as batch:
        batch.add_column(sa.Column("post_started_at", sa.DateTime(), nullable=True))
    with op.batch_alter_table("asset_watch") as batch:
        batch.add_column(sa.Column("forgotten_at", sa.DateTime(), nullable=True))
        batch.add_column(sa.Column("paused_consumers", sa.Text(), nullable=True))
    op.execute(sa.text("UPDATE landing_outbox SET post_started_at = claimed_until WHERE state = 'sending'"))
    op.execute(
        sa.text(
            "UPDATE landing_outbox SET unknown_since = landed_at "
            "WHERE unknown_outcomes > 0 AND unknown_since IS NULL AND state IN ('pending', 'sending')"
        )
    )


def downgrade() -> None:
    op.execute(sa.text("DELETE FROM asset_watch WHERE forgotten_at IS NOT NULL AND forgotten_at >= seen_at"))
    with op.batch_alter_table("asset_watch") as batch:
        batch.drop_column("paused_consumers")
        batch.drop_column("forgotten_at")
    with op.batch_alter_table("landing_outbox") as batch:
        batch.drop_column("post_started_at")
