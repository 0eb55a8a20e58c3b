"""Excluded dates: the days on which a job has no slot.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-07

persched_jobs gains ``exclude``: a JSON array of dates and date ranges, NULL for none.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Plain ADD COLUMN (no batch copy on SQLite), so the view persched_job_states
    # over persched_jobs (revision 0008) stays as it is: it does not read it.
    op.add_column("persched_jobs", sa.Column("exclude", sa.Text(), nullable=True))


def downgrade() -> None:
    # Plain DROP COLUMN (SQLite 3.35+), not a batch copy of persched_jobs, which
    # the view persched_job_states reads (the view does not name the column).
    # A job with excluded dates then runs on them too, as the older code knows jobs.
    op.drop_column("persched_jobs", "exclude")
