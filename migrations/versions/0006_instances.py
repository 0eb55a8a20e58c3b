"""The instances of each namespace that share its work.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03

One row per scheduler sharing its namespace's work (docs/multi.md); ``beats`` counts up with
every heartbeat. Downgrading drops it: older schedulers race for the slots instead.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

# As in revision 0001: microsecond instants on MySQL/MariaDB, InnoDB tables in utf8mb4 binary NO PAD.
INSTANT = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def _mysql_table():
    mariadb = getattr(op.get_context().dialect, "is_mariadb", False)
    return {
        "mysql_engine": "InnoDB",
        "mysql_charset": "utf8mb4",
        "mysql_collate": "utf8mb4_nopad_bin" if mariadb else "utf8mb4_0900_bin",
    }


revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "persched_instances",
        sa.Column("namespace", sa.String(100), nullable=False),
        sa.Column("instance_id", sa.String(255), nullable=False),
        sa.Column("started_at", INSTANT, nullable=False),
        sa.Column("renewed_at", INSTANT, nullable=False),
        sa.Column("beats", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("namespace", "instance_id", name="pk_persched_instances"),
        **_mysql_table(),
    )


def downgrade() -> None:
    op.drop_table("persched_instances")
