"""Retries inside the slot: a failed run is tried again, as a new attempt of the same slot.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-07

persched_jobs gains the retry options (``retries`` 0: never, as before) and a pending
attempt's ``retry_attempt`` and ``retry_for``. persched_runs gains ``attempt`` (1 for
existing runs); the one-run-per-slot index becomes one run per slot and attempt.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

# As in revision 0001: microsecond instants on MySQL/MariaDB; as in 0003, seconds as DOUBLE there.
INSTANT = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
SECONDS = sa.Float().with_variant(mysql.DOUBLE(), "mysql", "mariadb")
# The MySQL/MariaDB twin of the partial index (revision 0003): a generated column NULL for run-now rows.
SLOT_COLUMN = "grid_slot"

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def _mysql() -> bool:
    return op.get_context().dialect.name in ("mysql", "mariadb")


def _slot_index(columns: list[str]) -> None:
    if _mysql():
        on_mysql = [*columns[:2], SLOT_COLUMN, *columns[3:]]
        op.create_index("uq_persched_runs_slot", "persched_runs", on_mysql, unique=True)
        return
    op.create_index(
        "uq_persched_runs_slot",
        "persched_runs",
        columns,
        unique=True,
        sqlite_where=sa.text("NOT run_now"),
        postgresql_where=sa.text("NOT run_now"),
    )


def upgrade() -> None:
    # Plain ADD COLUMN (no batch copy on SQLite), so the view persched_job_states
    # over persched_jobs (revision 0008) stays as it is: it reads none of these.
    op.add_column("persched_jobs", sa.Column("retries", sa.Integer(), nullable=False, server_default="0"))
    op.add_column("persched_jobs", sa.Column("retry_delay_seconds", SECONDS, nullable=False, server_default="10"))
    op.add_column("persched_jobs", sa.Column("retry_backoff", SECONDS, nullable=False, server_default="2"))
    op.add_column("persched_jobs", sa.Column("retry_max_delay_seconds", SECONDS, nullable=True))
    op.add_column("persched_jobs", sa.Column("retry_lost", sa.Boolean(), nullable=False, server_default=sa.false()))
    op.add_column("persched_jobs", sa.Column("retry_attempt", sa.Integer(), nullable=True))
    op.add_column("persched_jobs", sa.Column("retry_for", INSTANT, nullable=True))
    op.add_column("persched_runs", sa.Column("attempt", sa.Integer(), nullable=False, server_default="1"))
    op.drop_index("uq_persched_runs_slot", table_name="persched_runs")
    _slot_index(["job_id", "generation", "scheduled_for", "attempt"])


def downgrade() -> None:
    # The older code knows one run per slot: the later attempts' records go, the first ones stay, and
    # a pending attempt's job waits at the slot it retries (which has run: that code moves past it).
    op.execute("DELETE FROM persched_runs WHERE attempt > 1")
    op.execute("UPDATE persched_jobs SET next_run_at = retry_for WHERE retry_attempt IS NOT NULL")
    op.drop_index("uq_persched_runs_slot", table_name="persched_runs")
    _slot_index(["job_id", "generation", "scheduled_for"])
    op.drop_column("persched_runs", "attempt")
    for column in ("retry_for", "retry_attempt", "retry_lost", "retry_max_delay_seconds", "retry_backoff"):
        op.drop_column("persched_jobs", column)
    op.drop_column("persched_jobs", "retry_delay_seconds")
    op.drop_column("persched_jobs", "retries")
