"""Namespaces and declared jobs.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01

persched_jobs gains ``namespace`` (a scheduler runs only its own) and ``declared`` (written
by ``declare()``, so ``declare(prune=True)`` may deschedule it). Existing jobs land in
"default", undeclared.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("persched_jobs") as batch:
        batch.add_column(sa.Column("namespace", sa.String(100), nullable=False, server_default="default"))
        batch.add_column(sa.Column("declared", sa.Boolean(), nullable=False, server_default=sa.false()))
    op.create_index("ix_persched_jobs_namespace_state", "persched_jobs", ["namespace", "state"])


def downgrade() -> None:
    op.drop_index("ix_persched_jobs_namespace_state", table_name="persched_jobs")
    # Without namespaces every scheduler would run every job: other applications' jobs stop.
    op.execute("UPDATE persched_jobs SET state = 'descheduled', owner = NULL WHERE namespace <> 'default'")
    with op.batch_alter_table("persched_jobs") as batch:
        batch.drop_column("declared")
        batch.drop_column("namespace")
