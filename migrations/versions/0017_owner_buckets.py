"""Owner buckets: persched_jobs.owner_bucket, and the refills' index over it.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-07

Instances that share a namespace's jobs own them by bucket: each job_id falls
in one of 1,024 buckets (`persched._model.buckets.bucket_of`), stored in the
new ``owner_bucket`` column, so that a refill asks the database for the rows
of its own buckets only instead of reading every row due and dropping the
others. The column is filled here for every existing row, in batches of
``_BATCH`` rows by job_id (the hash is computed in Python, as persched does:
no engine has BLAKE2b in SQL); a row left NULL (inserted later by
hand-written SQL) is read by every instance and queued by its owner.

The ``(state, next_run_at)`` index becomes ``(state, next_run_at, job_id,
owner_bucket)``: still one index for every claim and completion to update,
it gives the refill its order (``next_run_at, job_id``) with no sort, and
MariaDB/MySQL filter the buckets on the index entries, before reading a row
(index condition pushdown). The new index is made before the old one goes,
so that the refills and the claims keep an index meanwhile. The downgrade
restores the old index and drops the column.
"""

from __future__ import annotations

from hashlib import blake2b

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

_BUCKETS = 1024  # as persched._model.buckets.BUCKETS: a stored value, never changed
_BATCH = 5_000  # rows read and written per statement pair
_OLD_INDEX = "ix_persched_jobs_state_next_run_at"
_NEW_INDEX = "ix_persched_jobs_state_next_run_at_job_id_owner_bucket"


def _bucket(job_id: str) -> int:
    """persched._model.buckets.bucket_of, frozen here as the revision fills it."""
    return int.from_bytes(blake2b(job_id.encode(errors="surrogatepass"), digest_size=8).digest(), "big") % _BUCKETS


def _fill() -> None:
    """Fill owner_bucket of every row, `_BATCH` rows at a time in job_id order."""
    conn = op.get_bind()
    read = sa.text(
        "SELECT job_id FROM persched_jobs WHERE owner_bucket IS NULL AND job_id > :after ORDER BY job_id LIMIT :n"
    )
    write = sa.text("UPDATE persched_jobs SET owner_bucket = :bucket WHERE job_id = :job_id")
    after = ""
    while True:
        ids = [str(job_id) for (job_id,) in conn.execute(read, {"after": after, "n": _BATCH})]
        if not ids:
            return
        conn.execute(write, [{"bucket": _bucket(job_id), "job_id": job_id} for job_id in ids])
        after = ids[-1]


def upgrade() -> None:
    # Plain ADD COLUMN (no batch copy on SQLite), so the view persched_job_states (revision 0008) stays.
    op.add_column("persched_jobs", sa.Column("owner_bucket", sa.Integer(), nullable=True))
    _fill()
    op.create_index(_NEW_INDEX, "persched_jobs", ["state", "next_run_at", "job_id", "owner_bucket"])
    op.drop_index(_OLD_INDEX, table_name="persched_jobs")


def downgrade() -> None:
    op.create_index(_OLD_INDEX, "persched_jobs", ["state", "next_run_at"])
    op.drop_index(_NEW_INDEX, table_name="persched_jobs")
    op.drop_column("persched_jobs", "owner_bucket")
