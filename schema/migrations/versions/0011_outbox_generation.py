"""A landing's generation and the metastore's id of its partition (``landing_outbox.generation``, ``part_id``).

A partition dropped and added again is, for a table a user chose (``[landings] publish_recreated``), a new landing:
the same partition name with another id in the metastore (its ``PARTITIONS.PART_ID``, read through the change
record). Each such landing is a row of its own, numbered by ``generation`` (0 for the first), so the unique key
becomes (uri, partition_name, generation). ``part_id`` is the id the partition had when the row was enqueued (NULL:
read from a backend that cannot tell, or enqueued before this migration). Rows already there are generation 0.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-28
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("landing_outbox") as batch:
        batch.add_column(sa.Column("generation", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("part_id", sa.BigInteger(), nullable=True))
        batch.drop_index("outbox_landing")
        batch.create_index("outbox_landing", ["uri", "partition_name", "generation"], unique=True)


def downgrade() -> None:
    with op.batch_alter_table("landing_outbox") as batch:
        batch.drop_index("outbox_landing")
        batch.execute(sa.text("DELETE FROM landing_outbox WHERE generation > 0"))
        batch.create_index("outbox_landing", ["uri", "partition_name"], unique=True)
        batch.drop_column("part_id")
        batch.drop_column("generation")
