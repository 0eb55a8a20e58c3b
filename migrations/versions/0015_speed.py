"""Every run writes fewer index pages: persched_jobs loses its (namespace, state) index.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-07

Each claim and completion changes ``state``, so every run moved the row's entry in that
index twice, on a page of its own. Nothing needs it: ``(state, next_run_at)`` serves the
ranges of ``state``, and the counts by namespace read the rows anyway.
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
