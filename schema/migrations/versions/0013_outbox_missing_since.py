"""Since when a landing's partition has been missing from its table (``landing_outbox.missing_since``).

Retention forgot a landing whose partition left its table by the landing's age (``[retention]
forget_dropped_landings``, off by default): a partition landed a month ago and missing for an hour, from a replica
that lagged or a table being rebuilt, was forgotten, and published again when it came back. The publisher now
marks a name's rows when a listing of the table lacks it and clears the mark when a listing has it again; a
landing is forgotten only once its partition has been missing ``max_age_days`` in a row, so retention can bound the
outbox by default. NULL: present at the last look (rows already there start counting at their next look).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("landing_outbox") as batch:
        batch.add_column(sa.Column("missing_since", sa.DateTime(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("landing_outbox") as batch:
        batch.drop_column("missing_since")
