"""Timed pauses with a note, and instance rows a read-only check can judge.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-04

persched_jobs gains ``paused_until`` (a pause resumes by itself at that
instant) and ``pause_note`` (why the job is paused, for people).
persched_instances gains ``lease_until`` (the instance counts as alive until
then; each heartbeat moves it on), so that ``persched check`` can tell from
the database alone whether a scheduler is alive, and ``shares`` (the
instance shares the work; a scheduler with ``share_work=False`` now keeps a
row too, so that it is seen, but no job is handed to it). Existing rows were
written by sharing instances: they keep ``shares`` true.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

# As in revision 0001: microsecond instants on MySQL/MariaDB.
INSTANT = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("persched_jobs") as batch:
        batch.add_column(sa.Column("paused_until", INSTANT, nullable=True))
        batch.add_column(sa.Column("pause_note", sa.String(500), nullable=True))
    # The schedulers look for the earliest end of a timed pause at every heartbeat.
    op.create_index("ix_persched_jobs_paused_until", "persched_jobs", ["paused_until"])
    with op.batch_alter_table("persched_instances") as batch:
        batch.add_column(sa.Column("lease_until", INSTANT, nullable=True))
        batch.add_column(sa.Column("shares", sa.Boolean(), nullable=False, server_default=sa.true()))


def downgrade() -> None:
    # A job paused with an end stays paused, as the older code knows pauses.
    with op.batch_alter_table("persched_instances") as batch:
        batch.drop_column("shares")
        batch.drop_column("lease_until")
    op.drop_index("ix_persched_jobs_paused_until", table_name="persched_jobs")
    with op.batch_alter_table("persched_jobs") as batch:
        batch.drop_column("pause_note")
        batch.drop_column("paused_until")
