"""64-bit counters: persched_jobs.run_count, error_count and persched_runs.run_id.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-04

They were 32-bit on PostgreSQL and MariaDB/MySQL, where a job run every 10 ms overflowed in
248 days. SQLite's INTEGER is 64-bit already. The downgrade fails if a ``run_id`` is above
the 32-bit bound.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_COUNTERS = ("run_count", "error_count")


def _dialect() -> str:
    return op.get_context().dialect.name


def _retype(type_, existing_type) -> None:
    """The counters and run_id as `type_` (from `existing_type`); on PostgreSQL run_id's sequence too."""
    for name in _COUNTERS:
        op.alter_column(
            "persched_jobs",
            name,
            type_=type_,
            existing_type=existing_type,
            existing_nullable=False,
            existing_server_default="0",
        )
    # MySQL/MariaDB's MODIFY restates the whole column: AUTO_INCREMENT too (the others keep their default).
    mysql = {"autoincrement": True, "existing_autoincrement": True} if _dialect() in ("mysql", "mariadb") else {}
    if _dialect() == "postgresql":  # a SERIAL column's sequence has a type of its own
        sequence = "bigint" if isinstance(type_, sa.BigInteger) else "integer"
        op.execute(
            f"DO $$ BEGIN EXECUTE format('ALTER SEQUENCE %s AS {sequence}', "
            "pg_get_serial_sequence('persched_runs', 'run_id')); END $$"
        )
    op.alter_column(
        "persched_runs", "run_id", type_=type_, existing_type=existing_type, existing_nullable=False, **mysql
    )


def upgrade() -> None:
    if _dialect() != "sqlite":
        _retype(sa.BigInteger(), sa.Integer())


def downgrade() -> None:
    if _dialect() == "sqlite":
        return
    for name in _COUNTERS:  # back under the 32-bit bound (a run_id above it makes the downgrade fail)
        op.execute(f"UPDATE persched_jobs SET {name} = 2147483647 WHERE {name} > 2147483647")  # noqa: S608
    _retype(sa.Integer(), sa.BigInteger())
