"""Each sharing instance's clock offset from the database's clock.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-04

How far the instance's wall clock was from the database's at its latest heartbeat
(positive: ahead), for people; NULL where not measured.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

# As in revision 0001: float seconds are DOUBLE on MySQL/MariaDB (whose FLOAT has 4 bytes).
SECONDS = sa.Float().with_variant(mysql.DOUBLE(), "mysql", "mariadb")

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("persched_instances") as batch:
        batch.add_column(sa.Column("clock_offset_seconds", SECONDS, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("persched_instances") as batch:
        batch.drop_column("clock_offset_seconds")
