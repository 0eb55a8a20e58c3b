"""Timed pauses with a note, and instance rows a read-only check can judge.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-04

persched_jobs gains ``paused_until`` and ``pause_note``. persched_instances gains
``lease_until`` (alive until then, for ``persched check``) and ``shares`` (true for the
existing rows; a non-sharing scheduler now keeps a row too).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

# As in revision 0001: microsecond instants on MySQL/MariaDB.
INSTANT = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Plain ADD COLUMN (no batch copy on SQLite), so the view persched_job_states
    # over persched_jobs (revision 0008) stays as it is: it reads none of these.
    op.add_column("persched_jobs", sa.Column("paused_until", INSTANT, nullable=True))
    op.add_column("persched_jobs", sa.Column("pause_note", sa.String(500), nullable=True))
    # The schedulers look for the earliest end of a timed pause at every heartbeat.
    op.create_index("ix_persched_jobs_paused_until", "persched_jobs", ["paused_until"])
    op.add_column("persched_instances", sa.Column("lease_until", INSTANT, nullable=True))
    op.add_column("persched_instances", sa.Column("shares", sa.Boolean(), nullable=False, server_default=sa.true()))


def downgrade() -> None:
    # A job paused with an end stays paused, as the older code knows pauses.
    with op.batch_alter_table("persched_instances") as batch:
        batch.drop_column("shares")
        batch.drop_column("lease_until")
    op.drop_index("ix_persched_jobs_paused_until", table_name="persched_jobs")
    # Plain DROP COLUMN (SQLite 3.35+), not a batch copy of persched_jobs, which
    # the view persched_job_states reads (the view names neither column).
    op.drop_column("persched_jobs", "pause_note")
    op.drop_column("persched_jobs", "paused_until")
