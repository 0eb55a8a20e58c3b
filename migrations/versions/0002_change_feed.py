"""Change feed: a global change counter and each job's last change.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30

Every change of a definition moves the one row of persched_changes and stamps the job's
change_seq; the row lock orders the stamps by commit, so a reader never skips a late commit
(docs/reference/behaviour.md, "Changes made elsewhere").
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op


def _mysql_table():
    # Table options, ignored by the other dialects (see 0001).
    mariadb = getattr(op.get_context().dialect, "is_mariadb", False)
    return {
        "mysql_engine": "InnoDB",
        "mysql_charset": "utf8mb4",
        "mysql_collate": "utf8mb4_nopad_bin" if mariadb else "utf8mb4_0900_bin",
    }


revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    changes = op.create_table(
        "persched_changes",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_persched_changes"),
        **_mysql_table(),
    )
    op.bulk_insert(changes, [{"id": 1, "seq": 0}])
    with op.batch_alter_table("persched_jobs") as batch:
        batch.add_column(sa.Column("change_seq", sa.BigInteger(), nullable=False, server_default="0"))
        batch.create_index("ix_persched_jobs_change_seq", ["change_seq"])


def downgrade() -> None:
    with op.batch_alter_table("persched_jobs") as batch:
        batch.drop_index("ix_persched_jobs_change_seq")
        batch.drop_column("change_seq")
    op.drop_table("persched_changes")
