"""Revision 0013 upgrades in place: ``on_overrun``, ``executor``, ``stop_grace_seconds`` and
``cancel_requested_at`` on ``persched_jobs``, on every engine.

A database at 0012 keeps its jobs, which get the defaults (warn, thread, 5 s:
today's behaviour) and keep their generation and next slot; the view
``persched_job_states`` still reads the table. Downgrading to 0012 drops the
columns and keeps the jobs too.
"""

from __future__ import annotations

from persched import JobScheduler
from persched.testing import FakeClock
from tests.support.helpers import TIMEOUT, db_sql
from tests.support.revisions import migrate_to

START = 1_700_000_123.456789


def test_a_0012_database_keeps_its_jobs_and_gains_the_stopping_options(empty_db_url: str) -> None:
    url = empty_db_url
    sched = JobScheduler(url, clock=FakeClock(START))
    try:
        before = sched.schedule("kept", "tests.support.jobs:record", 10.0, args=("kept",))  # migrates to head
        stopping = sched.schedule(
            "stopping",
            "tests.support.jobs:record",
            10.0,
            max_runtime_seconds=3.0,
            on_overrun="stop",
            executor="process",
            stop_grace_seconds=0.25,
        )
        assert (stopping.on_overrun, stopping.executor, stopping.stop_grace_seconds) == ("stop", "process", 0.25)
    finally:
        sched.shutdown(wait=True, timeout=TIMEOUT)
    migrate_to(url, "0012", down=True)
    assert db_sql(url, "SELECT version_num FROM persched_alembic_version") == [("0012",)]
    assert sorted(db_sql(url, "SELECT job_id FROM persched_jobs")) == [("kept",), ("stopping",)]

    migrate_to(url, "0013")
    assert db_sql(url, "SELECT version_num FROM persched_alembic_version") == [("0013",)]
    rows = db_sql(
        url,
        "SELECT job_id, on_overrun, executor, stop_grace_seconds, cancel_requested_at FROM persched_jobs"
        " ORDER BY job_id",
    )
    assert rows == [("kept", "warn", "thread", 5.0, None), ("stopping", "warn", "thread", 5.0, None)]
    states = dict(db_sql(url, "SELECT job_id, state FROM persched_job_states"))  # the view still reads the table
    assert states == {"kept": "scheduled", "stopping": "scheduled"}
    sched = JobScheduler(url, clock=FakeClock(START))
    try:
        kept = sched.get_job("kept")
        assert kept is not None
        assert (kept.on_overrun, kept.executor, kept.stop_grace_seconds) == ("warn", "thread", 5.0)
        assert (kept.generation, kept.next_run_at) == (before.generation, before.next_run_at)
        # The job that lost its options with the downgrade gets them back by being scheduled again: a replacement.
        again = sched.schedule(
            "stopping",
            "tests.support.jobs:record",
            10.0,
            max_runtime_seconds=3.0,
            on_overrun="stop",
            executor="process",
            stop_grace_seconds=0.25,
        )
        assert again.generation == stopping.generation + 1
    finally:
        sched.shutdown(wait=True, timeout=TIMEOUT)
