"""Stopping a run: what a job does past its max runtime, where it runs, and cancel requests.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-07

persched_jobs gains ``on_overrun``, ``executor`` and ``stop_grace_seconds`` (defaults keep
the old behaviour), and ``cancel_requested_at``, set by ``cancel()`` while the job runs.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

# As in revision 0001: microsecond instants on MySQL/MariaDB; as in 0003, seconds as DOUBLE there.
INSTANT = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
SECONDS = sa.Float().with_variant(mysql.DOUBLE(), "mysql", "mariadb")

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Plain ADD COLUMN (no batch copy on SQLite), so the view persched_job_states
    # over persched_jobs (revision 0008) stays as it is: it reads none of these.
    op.add_column("persched_jobs", sa.Column("on_overrun", sa.String(16), nullable=False, server_default="warn"))
    op.add_column("persched_jobs", sa.Column("executor", sa.String(16), nullable=False, server_default="thread"))
    op.add_column("persched_jobs", sa.Column("stop_grace_seconds", SECONDS, nullable=False, server_default="5"))
    op.add_column("persched_jobs", sa.Column("cancel_requested_at", INSTANT, nullable=True))


def downgrade() -> None:
    # Plain DROP COLUMN (SQLite 3.35+), not a batch copy of persched_jobs, which
    # the view persched_job_states reads (the view names none of them). A job
    # then warns past its max runtime and runs on a thread, as the older code knows jobs.
    op.drop_column("persched_jobs", "cancel_requested_at")
    op.drop_column("persched_jobs", "stop_grace_seconds")
    op.drop_column("persched_jobs", "executor")
    op.drop_column("persched_jobs", "on_overrun")
