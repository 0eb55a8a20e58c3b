"""Initial schema: persched_jobs and persched_runs.

Revision ID: 0001
Revises:
Create Date: 2025-01-01

Mirrors persched/_schema.py at this revision (tests/migrations checks that the
two agree). Names are spelled out rather than left to the naming convention,
because revisions never import persched.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "persched_jobs",
        sa.Column("job_id", sa.String(200), nullable=False),
        sa.Column("target", sa.String(1000), nullable=False),
        sa.Column("args", sa.Text(), nullable=False),
        sa.Column("kwargs", sa.Text(), nullable=False),
        sa.Column("interval_seconds", sa.Float(), nullable=False),
        sa.Column("first_run_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("next_run_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("owner", sa.String(255), nullable=True),
        sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("run_count", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("error_count", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("last_outcome", sa.String(16), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("job_id", name="pk_persched_jobs"),
    )
    op.create_index("ix_persched_jobs_state_next_run_at", "persched_jobs", ["state", "next_run_at"])

    op.create_table(
        "persched_runs",
        sa.Column("run_id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.String(200), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("scheduled_for", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("outcome", sa.String(16), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("instance_id", sa.String(255), nullable=False),
        sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("run_id", name="pk_persched_runs"),
        sa.UniqueConstraint(
            "job_id",
            "generation",
            "scheduled_for",
            name="uq_persched_runs_job_id_generation_scheduled_for",
        ),
    )
    op.create_index("ix_persched_runs_job_id_run_id", "persched_runs", ["job_id", "run_id"])
    # Partial index over open runs (outcome NULL) for lease renewal/recovery.
    op.create_index(
        "ix_persched_runs_open",
        "persched_runs",
        ["instance_id"],
        sqlite_where=sa.text("outcome IS NULL"),
        postgresql_where=sa.text("outcome IS NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_persched_runs_open", table_name="persched_runs")
    op.drop_index("ix_persched_runs_job_id_run_id", table_name="persched_runs")
    op.drop_table("persched_runs")
    op.drop_index("ix_persched_jobs_state_next_run_at", table_name="persched_jobs")
    op.drop_table("persched_jobs")
