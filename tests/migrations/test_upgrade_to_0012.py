"""Revision 0012 upgrades in place: ``pause_after_failures`` and ``failure_streak``, on every engine.

A database at 0011 keeps its jobs, which never pause for failures (NULL) and
start with no failure in a row (0), and keep their generation and next slot;
the view ``persched_job_states`` still reads the table. Downgrading to 0011
drops the columns and keeps the jobs too.
"""

from __future__ import annotations

from persched import JobScheduler
from persched.testing import FakeClock
from tests.support.helpers import TIMEOUT, db_sql
from tests.support.revisions import migrate_to

START = 1_700_000_123.456789


def test_a_0011_database_keeps_its_jobs_and_gains_the_failure_columns(empty_db_url: str) -> None:
    url = empty_db_url
    sched = JobScheduler(url, clock=FakeClock(START))
    try:
        before = sched.schedule("kept", "tests.support.jobs:record", 10.0, args=("kept",))  # migrates to head
        watched = sched.schedule("watched", "tests.support.jobs:record", 10.0, pause_after_failures=3)
        assert (watched.pause_after_failures, watched.failure_streak) == (3, 0)
    finally:
        sched.shutdown(wait=True, timeout=TIMEOUT)
    migrate_to(url, "0011", down=True)
    assert db_sql(url, "SELECT version_num FROM persched_alembic_version") == [("0011",)]
    assert sorted(db_sql(url, "SELECT job_id FROM persched_jobs")) == [("kept",), ("watched",)]
    db_sql(url, "UPDATE persched_jobs SET run_count = 7 WHERE job_id = 'kept'")  # written by the older code

    migrate_to(url, "0012")
    assert db_sql(url, "SELECT version_num FROM persched_alembic_version") == [("0012",)]
    rows = db_sql(url, "SELECT pause_after_failures, failure_streak FROM persched_jobs WHERE job_id = 'kept'")
    assert [tuple(row) for row in rows] == [(None, 0)]
    states = dict(db_sql(url, "SELECT job_id, state FROM persched_job_states"))  # the view still reads the table
    assert states == {"kept": "scheduled", "watched": "scheduled"}
    sched = JobScheduler(url, clock=FakeClock(START))
    try:
        kept = sched.get_job("kept")
        assert kept is not None
        assert (kept.pause_after_failures, kept.failure_streak, kept.run_count) == (None, 0, 7)
        assert (kept.generation, kept.next_run_at) == (before.generation, before.next_run_at)
        # The job that lost its option with the downgrade gets it back by being scheduled again: a replacement.
        again = sched.schedule("watched", "tests.support.jobs:record", 10.0, pause_after_failures=3)
        assert (again.pause_after_failures, again.generation) == (3, watched.generation + 1)
    finally:
        sched.shutdown(wait=True, timeout=TIMEOUT)
