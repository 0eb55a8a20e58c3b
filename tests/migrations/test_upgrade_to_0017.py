"""Revision 0017 upgrades in place: ``persched_jobs.owner_bucket`` is added and filled, on every engine.

A database at 0016 with more rows than one batch of the fill gets every row's bucket
(`persched._model.buckets.bucket_of`, which the revision computes alike), and the refills' index
``(state, next_run_at, job_id, owner_bucket)`` in place of ``(state, next_run_at)``. The downgrade
puts the old index back and drops the column.
"""

from __future__ import annotations

from sqlalchemy import create_engine, inspect, text
from sqlalchemy.pool import NullPool

from persched._model.buckets import bucket_of
from persched._store import migrate as _migrate
from tests.support.helpers import db_sql
from tests.support.revisions import migrate_to

ROWS = 5_003  # one batch of the fill and then some
OLD_INDEX = "ix_persched_jobs_state_next_run_at"
NEW_INDEX = "ix_persched_jobs_state_next_run_at_job_id_owner_bucket"
_INSERT = (
    "INSERT INTO persched_jobs (job_id, target, args, kwargs, interval_seconds, first_run_at, next_run_at,"
    " generation, state, created_at, updated_at) VALUES (:job_id, 'tests.support.jobs:record', '[]', '{}', 60,"
    " '2024-01-01 00:00:00', '2024-01-01 00:01:00', 1, 'scheduled', '2024-01-01 00:00:00', '2024-01-01 00:00:00')"
)


def _jobs_schema(url: str) -> tuple[set[str], dict[str, list[str | None]]]:
    engine = create_engine(url, poolclass=NullPool)
    try:
        insp = inspect(engine)
        columns = {c["name"] for c in insp.get_columns("persched_jobs")}
        indexes = {str(i["name"]): list(i["column_names"]) for i in insp.get_indexes("persched_jobs")}
        return columns, indexes
    finally:
        engine.dispose()


def test_a_0016_database_gets_every_rows_bucket_and_the_new_index(empty_db_url: str) -> None:
    url = empty_db_url
    migrate_to(url, "0016")
    columns, indexes = _jobs_schema(url)
    assert "owner_bucket" not in columns
    assert indexes[OLD_INDEX] == ["state", "next_run_at"]
    ids = [f"job-{n}" for n in range(ROWS)] + ["\u00e9t\u00e9", "x" * 200]
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            conn.execute(text(_INSERT), [{"job_id": job_id} for job_id in ids])
    finally:
        engine.dispose()

    migrate_to(url, "head")
    assert db_sql(url, "SELECT version_num FROM persched_alembic_version") == [(_migrate.HEAD,)]
    stored = dict(db_sql(url, "SELECT job_id, owner_bucket FROM persched_jobs"))
    assert stored == {job_id: bucket_of(job_id) for job_id in ids}
    columns, indexes = _jobs_schema(url)
    assert "owner_bucket" in columns
    assert OLD_INDEX not in indexes
    assert indexes[NEW_INDEX] == ["state", "next_run_at", "job_id", "owner_bucket"]

    migrate_to(url, "0016", down=True)
    columns, indexes = _jobs_schema(url)
    assert "owner_bucket" not in columns
    assert indexes[OLD_INDEX] == ["state", "next_run_at"]
    assert NEW_INDEX not in indexes
    assert len(db_sql(url, "SELECT job_id FROM persched_jobs")) == len(ids)
