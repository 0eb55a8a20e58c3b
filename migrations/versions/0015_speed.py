"""Every run writes fewer index pages: persched_jobs loses its (namespace, state) index.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-07

A claim and a completion both change a job's ``state``, so every run moved
the row's entry in ``ix_persched_jobs_namespace_state`` twice, each time on
a page of its own among the table's jobs (on SQLite two pages written a run,
each a whole page in the WAL and again at the checkpoint; on PostgreSQL an
index entry a row version). Nothing needs it: the rows that no scheduler
would move on are found by ranges of ``state`` on the ``(state,
next_run_at)`` index, and the counts by namespace read the rows anyway.
"""

from __future__ import annotations

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_persched_jobs_namespace_state", table_name="persched_jobs")


def downgrade() -> None:
    op.create_index("ix_persched_jobs_namespace_state", "persched_jobs", ["namespace", "state"])
