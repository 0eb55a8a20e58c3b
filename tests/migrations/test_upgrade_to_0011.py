"""Revision 0011 upgrades in place: ``persched_jobs.exclude`` (excluded dates), on every engine.

A database at 0010 keeps its jobs, which have no excluded dates (NULL) and
keep their generation and next slot; the view ``persched_job_states`` still
reads the table. Downgrading to 0010 drops the column and keeps the jobs too.
"""

from __future__ import annotations

from persched import JobScheduler
from persched.testing import FakeClock
from tests.support.helpers import TIMEOUT, db_sql
from tests.support.revisions import migrate_to

START = 1_700_000_123.456789


def test_a_0010_database_keeps_its_jobs_and_gains_excluded_dates(empty_db_url: str) -> None:
    url = empty_db_url
    clock = FakeClock(START)
    sched = JobScheduler(url, clock=clock)
    try:
        before = sched.schedule("kept", "tests.support.jobs:record", 10.0, args=("kept",))  # migrates to head
        dated = sched.schedule("dated", "tests.support.jobs:record", 10.0, exclude=["2023-11-20"])
        assert dated.exclude == ("2023-11-20",)
    finally:
        sched.shutdown(wait=True, timeout=TIMEOUT)
    migrate_to(url, "0010", down=True)
    assert db_sql(url, "SELECT version_num FROM persched_alembic_version") == [("0010",)]
    assert sorted(db_sql(url, "SELECT job_id FROM persched_jobs")) == [("dated",), ("kept",)]

    migrate_to(url, "0011")
    assert db_sql(url, "SELECT version_num FROM persched_alembic_version") == [("0011",)]
    assert db_sql(url, "SELECT job_id, exclude FROM persched_jobs WHERE job_id = 'kept'") == [("kept", None)]
    states = dict(db_sql(url, "SELECT job_id, state FROM persched_job_states"))  # the view still reads the table
    assert states == {"kept": "scheduled", "dated": "scheduled"}
    sched = JobScheduler(url, clock=FakeClock(START))
    try:
        kept = sched.get_job("kept")
        assert kept is not None
        assert (kept.exclude, kept.generation, kept.next_run_at) == (None, before.generation, before.next_run_at)
        # The job that lost its dates with the downgrade gets them back by being scheduled again: a replacement.
        again = sched.schedule("dated", "tests.support.jobs:record", 10.0, exclude=["2023-11-20"])
        assert again.exclude == ("2023-11-20",)
        assert again.generation == dated.generation + 1
    finally:
        sched.shutdown(wait=True, timeout=TIMEOUT)
