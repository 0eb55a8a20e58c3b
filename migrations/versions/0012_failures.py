"""Repeated failures: a job may pause itself after failed slots in a row.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-07

persched_jobs gains ``pause_after_failures`` (NULL: never) and ``failure_streak`` (0 for
existing jobs). persched_runs gains the partial index ``ix_persched_runs_failed`` for
retention (not on MySQL and MariaDB: no partial indexes).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

# Retention keeps each job's newest failed runs: this partial index holds them alone.
FAILED = "outcome IN ('error', 'lost', 'stopped')"
# As run_count since revision 0007: 64-bit (SQLite's INTEGER is already).
WIDE = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    # Plain ADD COLUMN (no batch copy on SQLite), so the view persched_job_states
    # over persched_jobs (revision 0008) stays as it is: it reads neither.
    op.add_column("persched_jobs", sa.Column("pause_after_failures", sa.Integer(), nullable=True))
    op.add_column("persched_jobs", sa.Column("failure_streak", WIDE, nullable=False, server_default="0"))
    if op.get_context().dialect.name not in ("mysql", "mariadb"):  # no partial indexes there
        op.create_index(
            "ix_persched_runs_failed",
            "persched_runs",
            ["job_id", "run_id"],
            sqlite_where=sa.text(FAILED),
            postgresql_where=sa.text(FAILED),
        )


def downgrade() -> None:
    if op.get_context().dialect.name not in ("mysql", "mariadb"):
        op.drop_index("ix_persched_runs_failed", table_name="persched_runs")
    # Plain DROP COLUMN (SQLite 3.35+), not a batch copy of persched_jobs, which the view
    # persched_job_states reads. A job paused for its failures stays paused, with its note.
    op.drop_column("persched_jobs", "failure_streak")
    op.drop_column("persched_jobs", "pause_after_failures")
