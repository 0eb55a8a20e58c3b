"""Revision 0014 upgrades in place: the retry options and a pending attempt on ``persched_jobs``,
``attempt`` on ``persched_runs`` and one run per slot *and attempt*, on every engine.

A database at 0013 keeps its jobs (no retries: today's behaviour) and its
runs (each attempt 1). Downgrading to 0013 keeps the first attempts, drops
the later ones (the older code knows one run per slot) and puts a job with
an attempt pending back on the slot it was retrying, which that code moves past.
"""

from __future__ import annotations

import pytest
from sqlalchemy.exc import IntegrityError

from persched import JobScheduler
from persched.testing import FakeClock
from tests.support import jobs
from tests.support.helpers import TIMEOUT, db_sql
from tests.support.revisions import migrate_to

START = 1_700_000_123.456789
_RUN = (
    "INSERT INTO persched_runs (job_id, generation, scheduled_for, started_at, instance_id, run_now{extra})"
    " VALUES ('kept', 1, '2024-01-01 00:00:00.000001', '2024-01-01 00:00:00', 'i', {run_now}{value})"
)


def test_a_0013_database_keeps_its_jobs_and_runs_and_gains_retries(empty_db_url: str) -> None:
    url = empty_db_url
    clock = FakeClock(START)
    sched = JobScheduler(url, clock=clock)
    try:
        before = sched.schedule("kept", "tests.support.jobs:record", 10.0, args=("kept",))  # migrates to head
        sched.schedule("flaky", jobs.follow, 3600.0, args=("flaky", ["error"]), start_in=0, retries=2)
        sched.start()
        assert sched.wait_idle(TIMEOUT)
        flaky = sched.get_job("flaky")
        assert flaky is not None
        assert flaky.pending_attempt == 2
        [first] = sched.runs("flaky")
    finally:
        sched.shutdown(wait=True, timeout=TIMEOUT)

    migrate_to(url, "0013", down=True)
    assert db_sql(url, "SELECT version_num FROM persched_alembic_version") == [("0013",)]
    assert sorted(db_sql(url, "SELECT job_id FROM persched_jobs")) == [("flaky",), ("kept",)]
    # The job that was waiting for attempt 2 waits at the slot it retried again.
    [(next_run_at,)] = db_sql(url, "SELECT next_run_at FROM persched_jobs WHERE job_id = 'flaky'")
    [(slot,)] = db_sql(url, "SELECT scheduled_for FROM persched_runs WHERE job_id = 'flaky'")
    assert next_run_at == slot

    migrate_to(url, "0014")
    rows = db_sql(
        url,
        "SELECT job_id, retries, retry_delay_seconds, retry_backoff, retry_max_delay_seconds, retry_lost,"
        " retry_attempt, retry_for FROM persched_jobs ORDER BY job_id",
    )
    assert [
        (job_id, n, delay, backoff, cap, bool(lost), a, at) for job_id, n, delay, backoff, cap, lost, a, at in rows
    ] == [
        ("flaky", 0, 10.0, 2.0, None, False, None, None),
        ("kept", 0, 10.0, 2.0, None, False, None, None),
    ]
    assert db_sql(url, "SELECT attempt FROM persched_runs") == [(1,)]
    states = dict(db_sql(url, "SELECT job_id, state FROM persched_job_states"))  # the view still reads the table
    assert states == {"flaky": "scheduled", "kept": "scheduled"}
    sched = JobScheduler(url, clock=clock)
    try:
        kept = sched.get_job("kept")
        assert kept is not None
        assert (kept.retries, kept.pending_attempt) == (0, None)
        assert (kept.generation, kept.next_run_at) == (before.generation, before.next_run_at)
        [run] = sched.runs("flaky")
        assert (run.run_id, run.attempt, run.scheduled_for) == (first.run_id, 1, first.scheduled_for)
    finally:
        sched.shutdown(wait=True, timeout=TIMEOUT)


def test_the_slot_index_holds_one_run_per_slot_and_attempt(empty_db_url: str) -> None:
    url = empty_db_url
    migrate_to(url, "0014")
    db_sql(url, _RUN.format(extra=", attempt", run_now="false", value=", 1"))
    db_sql(url, _RUN.format(extra=", attempt", run_now="false", value=", 2"))  # another attempt of the slot
    db_sql(url, _RUN.format(extra=", attempt", run_now="true", value=", 1"))  # run-now runs are not under it
    with pytest.raises(IntegrityError):
        db_sql(url, _RUN.format(extra=", attempt", run_now="false", value=", 2"))
    with pytest.raises(IntegrityError):
        db_sql(url, _RUN.format(extra="", run_now="false", value=""))  # attempt 1 by default: held
