"""Schedule policies: cron, fixed delay, missed runs, overlap, jitter, window, pause, run-now.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30

persched_jobs gains the policy columns (docs/how-to/schedules.md) with defaults that keep
existing behaviour, ``paused``, ``run_now_at`` and ``running_for``; ``interval_seconds``
becomes nullable (cron). persched_runs gains ``missed_until``/``missed_count``, ``overran``
and ``run_now``; one run per slot becomes a partial unique index over the grid's runs.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

# MySQL/MariaDB types, as in 0001.
INSTANT = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
SECONDS = sa.Float().with_variant(mysql.DOUBLE(), "mysql", "mariadb")
# MySQL/MariaDB have no partial index: there "one run per grid slot" is a unique index over a
# stored generated column that is NULL for run-now rows (a unique index admits many NULLs).
SLOT_COLUMN = "grid_slot"
SLOT_EXPRESSION = "CASE WHEN run_now THEN NULL ELSE scheduled_for END"


def _mysql():
    return op.get_context().dialect.name in ("mysql", "mariadb")


revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("persched_jobs") as batch:
        batch.alter_column("interval_seconds", existing_type=SECONDS, nullable=True)
        batch.add_column(sa.Column("cron", sa.String(200), nullable=True))
        batch.add_column(sa.Column("timezone", sa.String(64), nullable=False, server_default="UTC"))
        batch.add_column(sa.Column("recurrence", sa.String(16), nullable=False, server_default="fixed_rate"))
        batch.add_column(sa.Column("misfire", sa.String(16), nullable=False, server_default="coalesce"))
        batch.add_column(sa.Column("max_catch_up", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("grace_seconds", SECONDS, nullable=False, server_default="1"))
        batch.add_column(sa.Column("overlap", sa.String(16), nullable=False, server_default="forbid"))
        batch.add_column(sa.Column("jitter_seconds", SECONDS, nullable=False, server_default="0"))
        batch.add_column(sa.Column("start_at", INSTANT, nullable=True))
        batch.add_column(sa.Column("end_at", INSTANT, nullable=True))
        batch.add_column(sa.Column("max_runtime_seconds", SECONDS, nullable=True))
        batch.add_column(sa.Column("paused", sa.Boolean(), nullable=False, server_default=sa.false()))
        batch.add_column(sa.Column("run_now_at", INSTANT, nullable=True))
        batch.add_column(sa.Column("running_for", INSTANT, nullable=True))
    # A run in flight at the upgrade (its process died: a live one would be
    # an older persched, which refuses a newer schema at start) had its slot
    # in next_run_at; lease recovery moves the job past it.
    op.execute("UPDATE persched_jobs SET running_for = next_run_at WHERE state = 'running'")

    with op.batch_alter_table("persched_runs") as batch:
        batch.drop_constraint("uq_persched_runs_job_id_generation_scheduled_for", type_="unique")
        batch.add_column(sa.Column("missed_until", INSTANT, nullable=True))
        batch.add_column(sa.Column("missed_count", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("overran", sa.Boolean(), nullable=False, server_default=sa.false()))
        batch.add_column(sa.Column("run_now", sa.Boolean(), nullable=False, server_default=sa.false()))
    if _mysql():
        op.add_column(
            "persched_runs",
            sa.Column(SLOT_COLUMN, mysql.DATETIME(fsp=6), sa.Computed(SLOT_EXPRESSION, persisted=True)),
        )
        op.create_index("uq_persched_runs_slot", "persched_runs", ["job_id", "generation", SLOT_COLUMN], unique=True)
        return
    op.create_index(
        "uq_persched_runs_slot",
        "persched_runs",
        ["job_id", "generation", "scheduled_for"],
        unique=True,
        sqlite_where=sa.text("NOT run_now"),
        postgresql_where=sa.text("NOT run_now"),
    )


def downgrade() -> None:
    op.drop_index("uq_persched_runs_slot", table_name="persched_runs")
    if _mysql():
        op.drop_column("persched_runs", SLOT_COLUMN)
    op.execute("DELETE FROM persched_runs WHERE run_now OR outcome = 'missed'")
    with op.batch_alter_table("persched_runs") as batch:
        batch.drop_column("run_now")
        batch.drop_column("overran")
        batch.drop_column("missed_count")
        batch.drop_column("missed_until")
        batch.create_unique_constraint(
            "uq_persched_runs_job_id_generation_scheduled_for", ["job_id", "generation", "scheduled_for"]
        )
    op.execute("DELETE FROM persched_jobs WHERE interval_seconds IS NULL")
    with op.batch_alter_table("persched_jobs") as batch:
        for name in (
            "running_for",
            "run_now_at",
            "paused",
            "max_runtime_seconds",
            "end_at",
            "start_at",
            "jitter_seconds",
            "overlap",
            "grace_seconds",
            "max_catch_up",
            "misfire",
            "recurrence",
            "timezone",
            "cron",
        ):
            batch.drop_column(name)
        batch.alter_column("interval_seconds", existing_type=SECONDS, nullable=False)
