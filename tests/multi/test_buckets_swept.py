"""The sweep follows the owner buckets (`persched._engine.horizon`): buckets gained are swept too.

An instance sharing the work sweeps only the rows of its own owner buckets at start-up. The
buckets it gains later, from a member that left or died (perhaps before or while it swept them
itself), are swept when the view changes: their rows written by a clock ahead are put back on
their grid and their run-now requests beyond the horizon are queued, not left to wait for a
restart. One in-process scheduler (`ME`, a FakeClock) and a member (`GHOST`) whose row was
written by hand and never renewed; a FakeClock that ran an hour ahead wrote the rows before.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, cast

import pytest

from persched import JobScheduler
from persched._engine import horizon as horizon_module
from persched._engine.horizon import Horizon
from persched._engine.membership import owned_buckets, owner_among
from persched._engine.timebase import Timebase
from persched._model.instant import Instant, from_datetime
from persched._store import Store
from persched._store import db as _db
from persched.testing import FakeClock
from tests.multi._cluster import ME, job_owned_by
from tests.store.test_store_contract import job_row
from tests.support import jobs
from tests.support.helpers import TIMEOUT, wait_until
from tests.support.race_jobs import RECORD

if TYPE_CHECKING:
    from collections.abc import Iterator

    from persched._engine.membership import Membership

START = 1_700_000_123.4567
AHEAD = 3600.0  # seconds the writing clock ran ahead
GHOST = "ghost:2:bbbbbb"  # no proof of its process in its id: only the lease drops it
BOTH = (GHOST, ME)
LEASE_SECONDS = 30.0
INTERVAL = 10.0


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    """A store of its own on the test's database, migrated."""
    with _unstarted(db_url, FakeClock(START)) as first:
        first.jobs()  # the first use migrates
    engine = _db.make_engine(db_url)
    try:
        yield Store(engine, _db.mask(engine.url))
    finally:
        engine.dispose()


@contextmanager
def _unstarted(db_url: str, clock: FakeClock) -> Iterator[JobScheduler]:
    """A scheduler never started: it only writes (a client, or one on a clock ahead)."""
    sched = JobScheduler(db_url, clock=clock)
    try:
        yield sched
    finally:
        sched.shutdown(wait=True, timeout=TIMEOUT)


def _next_slot(sched: JobScheduler, job_id: str) -> Instant:
    job = sched.get_job(job_id)
    assert job is not None
    return from_datetime(job.next_run_at)


def _on_grid(sched: JobScheduler, job_id: str) -> bool:
    """Whether the job's next slot lies within one interval of now (not where the clock ahead put it)."""
    return _next_slot(sched, job_id) - sched._timebase.now() <= INTERVAL * 1_000_000


def test_the_buckets_of_a_member_that_is_gone_are_swept_when_they_move_here(db_url: str, store: Store) -> None:
    mine = job_owned_by(ME, BOTH, "mine-")
    theirs = job_owned_by(GHOST, BOTH, "theirs-")
    far = job_owned_by(GHOST, BOTH, "far-")
    with _unstarted(db_url, FakeClock(START + AHEAD)) as ahead:
        for job_id in (mine, theirs):
            ahead.schedule(job_id, RECORD, INTERVAL, args=(job_id,))
    clock = FakeClock(START)  # the clock put right
    with _unstarted(db_url, clock) as client:
        client.schedule(far, RECORD, 1000.0, args=(far,), start_in=500.0)  # beyond the horizon
        assert client.run_now(far)  # pending, while no instance runs
    now = Instant(round(START * 1_000_000))
    store.beat_membership(GHOST, now, Instant(now + 30_000_000), shares=True)  # it never beats again

    sched = JobScheduler(db_url, clock=clock, instance_id=ME, lease_seconds=LEASE_SECONDS)
    sched.start()
    try:
        assert sched._membership.members == BOTH  # the ghost is in the view for a lease
        assert _on_grid(sched, mine)  # the start-up sweep corrected this instance's share...
        assert not _on_grid(sched, theirs)  # ...and only that
        clock.advance(LEASE_SECONDS)  # the ghost's count stood still for a lease: its buckets move here
        wait_until(lambda: sched._membership.members == (ME,), message="the ghost was not dropped")
        wait_until(lambda: jobs.calls(far) != [], message="the run-now request beyond the horizon did not run")
        wait_until(lambda: _on_grid(sched, theirs), message="the row written ahead was not put back on its grid")
        slot = _next_slot(sched, theirs)
        clock.advance(INTERVAL)
        assert sched.wait_idle(TIMEOUT)
        assert slot <= Instant(round(clock.now() * 1_000_000))
        assert len(jobs.calls(theirs)) == 1  # on its corrected slot
        assert len(jobs.calls(far)) == 1
    finally:
        sched.shutdown(wait=True, timeout=TIMEOUT)


class _View:
    """A membership whose owned buckets the test sets (`Horizon` reads `buckets` only)."""

    def __init__(self, buckets: frozenset[int] | None) -> None:
        self.buckets = buckets


def test_buckets_gained_in_the_middle_of_the_sweep_are_swept_from_their_first_row(
    db_url: str, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(horizon_module, "SWEEP_ROWS", 2)
    ids = [f"job-{n:02d}" for n in range(12)]
    # The ghost's job sorts before the cursor of the first batch, which reads two rows of ME's.
    assert [owner_among(BOTH, job_id) for job_id in ids[:3]] == [GHOST, ME, ME]
    with _unstarted(db_url, FakeClock(START + AHEAD)) as writer:
        for job_id in ids:
            writer.schedule(job_id, RECORD, INTERVAL, args=(job_id,))
    far = job_owned_by(GHOST, BOTH, "a-")  # sorts first: before the walk's cursor too
    with _unstarted(db_url, FakeClock(START)) as client:
        client.schedule(far, RECORD, 1000.0, args=(far,), start_in=500.0)
        assert client.run_now(far)
    view = _View(owned_buckets(BOTH, ME))
    horizon = Horizon(store, Timebase(FakeClock(START)), cast("Membership", view))
    queued: list[str] = []
    assert horizon.sweep(lambda due, job_id, generation: queued.append(job_id))  # ME's buckets
    view.buckets = None  # the ghost left: every bucket is ME's now
    while horizon.sweep(lambda due, job_id, generation: queued.append(job_id)):
        pass
    now = Instant(round(START * 1_000_000))
    ahead = [job_id for job_id in ids if from_datetime(job_row(store, job_id).next_run_at) - now > INTERVAL * 1_000_000]
    assert ahead == []  # every row written ahead was put back, the one before the walk's cursor too
    assert queued.count(far) == 1  # and the run-now request of a job gained is queued here
