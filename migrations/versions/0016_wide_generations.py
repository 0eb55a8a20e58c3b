"""64-bit generations: persched_jobs.generation and persched_runs.generation.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-07

A generation is never reused (no ABA), so it cannot saturate: where it was a 32-bit INTEGER
(PostgreSQL, MariaDB/MySQL) a replacement past 2**31 - 1 failed. Both columns become BIGINT;
SQLite's INTEGER is 64-bit already. The downgrade refuses while a generation is above the
32-bit bound: lowering it would reuse one.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

_TABLES = ("persched_jobs", "persched_runs")
_INT32_MAX = 2**31 - 1


def _retype(type_: sa.types.TypeEngine[int], existing_type: sa.types.TypeEngine[int]) -> None:
    for table in _TABLES:
        # MySQL/MariaDB's MODIFY restates the column: NOT NULL too (neither has a default).
        op.alter_column(table, "generation", type_=type_, existing_type=existing_type, existing_nullable=False)


def upgrade() -> None:
    if op.get_context().dialect.name != "sqlite":
        _retype(sa.BigInteger(), sa.Integer())


def downgrade() -> None:
    if op.get_context().dialect.name == "sqlite":
        return
    conn = op.get_bind()
    for table in _TABLES:
        found = conn.execute(
            sa.text(f"SELECT job_id, generation FROM {table} WHERE generation > {_INT32_MAX} LIMIT 1")  # noqa: S608
        ).first()
        if found is not None:
            raise RuntimeError(
                f"cannot downgrade below revision 0016: job {found[0]!r} has generation {found[1]} in {table}, "
                f"past the 32-bit bound ({_INT32_MAX}) of the older schema, and a generation is never lowered"
            )
    _retype(sa.Integer(), sa.BigInteger())
