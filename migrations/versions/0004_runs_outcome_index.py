"""An index of the runs that did not end "ok", newest first, for the dashboard's runs page.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01

``persched web`` lists the runs of one outcome ("error", "lost", "missed")
a page at a time. Without an index that query walks the whole history to
find a rare outcome. The index is partial (``outcome <> 'ok'``): runs still
in flight (outcome NULL, found by ``ix_persched_runs_open``) and runs that
ended "ok" -- nearly all of them -- are not in it, so the dispatch path's
inserts and completions of ordinary runs do not maintain it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_persched_runs_outcome",
        "persched_runs",
        ["outcome", "run_id"],
        sqlite_where=sa.text("outcome <> 'ok'"),
        postgresql_where=sa.text("outcome <> 'ok'"),
    )


def downgrade() -> None:
    op.drop_index("ix_persched_runs_outcome", table_name="persched_runs")
