"""An index of the runs that did not end "ok", newest first, for the dashboard's runs page.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01

Partial (``outcome <> 'ok'``), so the inserts and completions of ordinary runs never
maintain it.
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
