"""Owner buckets with several members in the view (`persched._model.buckets`, `persched._engine.membership`).

One in-process scheduler (`ME`, the ``me`` fixture of tests/multi/conftest.py: a FakeClock, its
heartbeat stopped) and three more members played by hand through a second `Store`, as in
tests/multi/test_work_sharing.py:

- a refill asks the database for the rows of ME's buckets only: what the store returns to it is
  ME's share of the jobs, not every row due;
- a row whose bucket is NULL (written by hand-written SQL) is read by every member and run by the
  owner of its job's bucket, on time: the refill loads it, not the search for overdue rows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from unittest.mock import patch

import pytest

from persched._engine.membership import owned_buckets, owner_among
from persched._model.buckets import bucket_of
from persched._model.instant import Instant, from_datetime
from persched._store import Store
from persched._store import db as _db
from tests.multi._cluster import ME
from tests.support import jobs
from tests.support.helpers import TIMEOUT, db_sql, finished_runs, wait_until
from tests.support.race_jobs import RECORD

if TYPE_CHECKING:
    from collections.abc import Iterator

    from persched import JobScheduler
    from persched.testing import FakeClock

OTHERS = ("other:2:bbbbbb", "other:3:cccccc", "other:4:dddddd")
FOUR = tuple(sorted((ME, *OTHERS)))
INTERVAL = 300.0


@pytest.fixture
def others(me: JobScheduler, db_url: str) -> Iterator[Store]:
    """The other members' store, their rows made: ME's view holds four members."""
    engine = _db.make_engine(db_url)
    try:
        store = Store(engine, _db.mask(engine.url))
        now = me._timebase.now()
        for member in OTHERS:
            store.beat_membership(member, now, Instant(now + 30_000_000), shares=True)
        me._heartbeat.membership.round()
        assert me.wait_idle(TIMEOUT)
        assert me._membership.members == FOUR
        yield store
    finally:
        engine.dispose()


def _ran_here(sched: JobScheduler, job_id: str) -> list[tuple[Instant, Instant]]:
    return [
        (from_datetime(r.scheduled_for), from_datetime(r.started_at))
        for r in finished_runs(sched, job_id)
        if r.instance_id == sched.instance_id
    ]


@pytest.mark.usefixtures("others")
def test_a_refill_reads_only_the_rows_of_the_buckets_owned_here(me: JobScheduler) -> None:
    ids = [f"job-{n}" for n in range(60)]
    for job_id in ids:
        me.schedule(job_id, RECORD, INTERVAL, args=(job_id,), start_in=20.0)
    mine = owned_buckets(FOUR, ME)
    assert mine is not None
    owned = sorted(job_id for job_id in ids if bucket_of(job_id) in mine)
    assert 0 < len(owned) < len(ids) // 2
    returned: list[list[str]] = []
    load_due = me._store.load_due

    def spy(*args: Any, **kwargs: Any) -> Any:  # noqa: ANN401 - the store's answer, passed on
        entries, last = load_due(*args, **kwargs)
        returned.append([job_id for _, job_id, _ in entries])
        return entries, last

    with patch.object(me._store, "load_due", spy):
        me._dispatcher.repartition(True)  # the next refill reads the window again from its first row
        wait_until(lambda: bool(returned), message="a refill")
    assert sorted(returned[0]) == owned  # what the database returned: this member's share only


def test_a_row_whose_bucket_is_null_runs_on_its_owner_on_time(
    me: JobScheduler, others: Store, clock: FakeClock, db_url: str
) -> None:
    mine = next(f"mine-{n}" for n in range(1000) if owner_among(FOUR, f"mine-{n}") == ME)
    theirs = next(f"theirs-{n}" for n in range(1000) if owner_among(FOUR, f"theirs-{n}") != ME)
    for job_id in (mine, theirs):  # beyond the window: a refill has to load them
        me.schedule(job_id, RECORD, INTERVAL, args=(job_id,), start_in=90.0)
    db_sql(db_url, "UPDATE persched_jobs SET owner_bucket = NULL")  # as hand-written SQL leaves them
    job = me.get_job(mine)
    assert job is not None
    slot = from_datetime(job.next_run_at)
    clock.advance(40.0)  # the refill of the next half window reads them
    assert me.wait_idle(TIMEOUT)
    clock.advance(50.0)
    assert me.wait_idle(TIMEOUT)
    assert me._timebase.now() == slot
    assert _ran_here(me, mine) == [(slot, slot)]  # queued by the refill: on time, not found by a search
    assert jobs.calls(theirs) == []  # another member's: not queued here
