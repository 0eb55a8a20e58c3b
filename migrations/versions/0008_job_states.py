"""A view of each job's state as `Job.state` says it, for SQL users.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-04

``persched_jobs.state`` is the state the claims work with, and a paused job
keeps it (``scheduled``, or ``running`` while its last run finishes) beside
``paused = true`` and the ``next_run_at`` it would have. A query that reads
``state`` and ``next_run_at`` alone lists a paused job as due.
``persched_job_states`` says it as the API does: ``state`` is ``paused`` for
a paused job that is not running, and ``next_run_at`` is NULL unless a run
is coming (not for a paused, finished or descheduled job). It is a plain
view over ``persched_jobs``, the same SQL on every engine.

A later revision that rebuilds ``persched_jobs`` (SQLite's batch mode
copies the table) or changes a column the view reads drops the view first
and creates it again afterwards. Downgrading drops it.
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
