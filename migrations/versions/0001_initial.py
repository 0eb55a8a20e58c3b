"""Initial schema: persched_jobs and persched_runs.

Revision ID: 0001
Revises:
Create Date: 2025-01-01

Mirrors persched/_store/schema.py at this revision (tests/migrations checks it). Names are
spelled out, since revisions never import persched.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

# MySQL/MariaDB (persched/_store/schema.py says why): microsecond instants, 8-byte floats, 16 MiB
# text, InnoDB tables in utf8mb4 with a binary NO PAD collation. SQLite and PostgreSQL get
# the same types as before (a variant applies to its dialects only).
INSTANT = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
SECONDS = sa.Float().with_variant(mysql.DOUBLE(), "mysql", "mariadb")
LONG_TEXT = sa.Text().with_variant(mysql.MEDIUMTEXT(), "mysql", "mariadb")


def _mysql_table():
    # Table options, ignored by the other dialects. NO PAD: "a" and "a " are two job ids.
    mariadb = getattr(op.get_context().dialect, "is_mariadb", False)
    return {
        "mysql_engine": "InnoDB",
        "mysql_charset": "utf8mb4",
        "mysql_collate": "utf8mb4_nopad_bin" if mariadb else "utf8mb4_0900_bin",
    }


revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "persched_jobs",
        sa.Column("job_id", sa.String(200), nullable=False),
        sa.Column("target", sa.String(1000), nullable=False),
        sa.Column("args", LONG_TEXT, nullable=False),
        sa.Column("kwargs", LONG_TEXT, nullable=False),
        sa.Column("interval_seconds", SECONDS, nullable=False),
        sa.Column("first_run_at", INSTANT, nullable=False),
        sa.Column("next_run_at", INSTANT, nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("owner", sa.String(255), nullable=True),
        sa.Column("lease_until", INSTANT, nullable=True),
        sa.Column("run_count", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("error_count", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("last_outcome", sa.String(16), nullable=True),
        sa.Column("created_at", INSTANT, nullable=False),
        sa.Column("updated_at", INSTANT, nullable=False),
        sa.PrimaryKeyConstraint("job_id", name="pk_persched_jobs"),
        **_mysql_table(),
    )
    op.create_index("ix_persched_jobs_state_next_run_at", "persched_jobs", ["state", "next_run_at"])

    op.create_table(
        "persched_runs",
        sa.Column("run_id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.String(200), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("scheduled_for", INSTANT, nullable=False),
        sa.Column("started_at", INSTANT, nullable=False),
        sa.Column("finished_at", INSTANT, nullable=True),
        sa.Column("outcome", sa.String(16), nullable=True),
        sa.Column("error", LONG_TEXT, nullable=True),
        sa.Column("instance_id", sa.String(255), nullable=False),
        sa.Column("lease_until", INSTANT, nullable=True),
        sa.PrimaryKeyConstraint("run_id", name="pk_persched_runs"),
        sa.UniqueConstraint(
            "job_id",
            "generation",
            "scheduled_for",
            name="uq_persched_runs_job_id_generation_scheduled_for",
        ),
        **_mysql_table(),
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
