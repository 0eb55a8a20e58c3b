"""A view of each job's state as `Job.state` says it, for SQL users.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-04

A paused job keeps ``state`` (scheduled, or running) and its ``next_run_at``, so a query of
those alone lists it as due; the view says ``paused`` and a NULL ``next_run_at`` as the API
does. A later revision that rebuilds persched_jobs drops the view first and creates it again.
"""

from __future__ import annotations

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

VIEW = "persched_job_states"
SELECT = """
SELECT job_id, namespace, target, interval_seconds, cron, timezone,
       CASE WHEN paused AND state = 'scheduled' THEN 'paused' ELSE state END AS state,
       paused,
       CASE WHEN state IN ('scheduled', 'running') AND NOT paused THEN next_run_at END AS next_run_at,
       run_count, error_count, last_outcome, created_at, updated_at
FROM persched_jobs
"""


def upgrade() -> None:
    op.execute(f"CREATE VIEW {VIEW} AS {SELECT}")


def downgrade() -> None:
    op.execute(f"DROP VIEW {VIEW}")
