"""Instances share the work (the default): each job has one owner among the live instances.

One in-process scheduler (`ME`, the ``me`` fixture of tests/multi/conftest.py: a FakeClock at an
odd instant, its heartbeat thread stopped so that the test runs each membership round itself)
and another instance (`OTHER`) played by hand through a second `Store`: it beats, claims and
finishes exactly when the test says.
Deterministic: every step waits for `wait_idle` or for an event, none for an interleaving.

- An instance queues only the jobs it owns; a job another member owns is not even tried.
- A job whose owner does not run it is found by the search once it is overdue.
- A member whose count stands still for a lease is dropped (its row deleted) and its jobs move
  here; one that beats on is kept however long it lives; one that leaves hands over at once.
- A member that joins takes its share: the old owner drops those entries.
- The owner queues a job again after another instance took a slot of it.
- deschedule(wait=True) waits for a claim by query under way.
- The search runs only while others share the work, every `SEARCH_EVERY`.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from typing import TYPE_CHECKING, Any
from unittest.mock import patch

import pytest

from persched import AsyncJobScheduler, JobScheduler
from persched._engine.dispatcher import SEARCH_EVERY
from persched._model.instant import Instant, Micros, from_datetime, seconds
from persched._store import Claim, Store
from persched._store import db as _db
from persched._store.observer import Observer
from persched.errors import InvalidJobError
from tests.multi._cluster import ME, ME_LEASE_SECONDS, job_owned_by
from tests.support import jobs
from tests.support.helpers import TIMEOUT, db_sql, finished_runs, wait_until
from tests.support.race_jobs import RECORD
from tests.support.store_calls import claim_one, finish_one

if TYPE_CHECKING:
    from collections.abc import Iterator

    from persched.testing import FakeClock


OTHER = "other:2:bbbbbb"
BOTH = (ME, OTHER)
LEASE_SECONDS = ME_LEASE_SECONDS
LEASE = Micros(int(LEASE_SECONDS * 1_000_000))
INTERVAL = 10.0


class Conflicts(Observer):
    def __init__(self) -> None:
        self.lost: list[str] = []

    def claim_conflict(self, job_id: str) -> None:
        self.lost.append(job_id)


@pytest.fixture
def other(me: JobScheduler, db_url: str) -> Iterator[Store]:
    """The other instance's store (the database is migrated: `me` started)."""
    engine = _db.make_engine(db_url)
    try:
        yield Store(engine, _db.mask(engine.url))
    finally:
        engine.dispose()


def round_(sched: JobScheduler) -> None:
    """One membership round of `sched`'s heartbeat, then let the dispatcher settle."""
    sched._heartbeat.membership.round()
    assert sched.wait_idle(TIMEOUT)


def beat(other: Store, sched: JobScheduler) -> None:
    """`OTHER` renews its membership row (joins if it has none)."""
    now = sched._timebase.now()
    other.beat_membership(OTHER, now, Instant(now + 30_000_000), shares=True)


def members(db_url: str) -> set[str]:
    return {row[0] for row in db_sql(db_url, "SELECT instance_id FROM persched_instances")}


def next_slot(sched: JobScheduler, job_id: str) -> Instant:
    job = sched.get_job(job_id)
    assert job is not None
    return from_datetime(job.next_run_at)


def run_elsewhere(other: Store, sched: JobScheduler, job_id: str) -> Instant:
    """`OTHER` claims and finishes the job's next slot (at that slot); return the slot."""
    slot = next_slot(sched, job_id)
    job = sched.get_job(job_id)
    assert job is not None
    claim = claim_one(other, job_id, job.generation, slot, slot, OTHER, LEASE)
    assert isinstance(claim, Claim)
    assert finish_one(other, claim, OTHER, Instant(slot + 1_000), "ok", None) is not None
    return slot


def ran_here(sched: JobScheduler, job_id: str) -> list[tuple[Instant, Instant]]:
    """(scheduled_for, started_at) of the runs of `job_id` that `sched` ran."""
    return [
        (from_datetime(r.scheduled_for), from_datetime(r.started_at))
        for r in finished_runs(sched, job_id)
        if r.instance_id == sched.instance_id
    ]


MINE = job_owned_by(ME, BOTH, "mine-")
THEIRS = job_owned_by(OTHER, BOTH, "theirs-")


def test_an_instance_queues_only_the_jobs_it_owns(me: JobScheduler, other: Store, clock: FakeClock) -> None:
    conflicts = Conflicts()
    me.set_observer(conflicts)
    beat(other, me)
    round_(me)
    assert me._membership is not None
    assert me._membership.members == tuple(sorted(BOTH))
    me.schedule(MINE, RECORD, INTERVAL, args=(MINE,))
    me.schedule(THEIRS, RECORD, INTERVAL, args=(THEIRS,))
    for _ in range(3):
        run_elsewhere(other, me, THEIRS)  # its owner runs it on time
        clock.advance(INTERVAL)
        assert me.wait_idle(TIMEOUT)
    assert len(ran_here(me, MINE)) == 3
    assert jobs.calls(THEIRS) == []
    assert conflicts.lost == []  # not even tried


def test_a_job_its_owner_does_not_run_is_found_once_overdue(me: JobScheduler, other: Store, clock: FakeClock) -> None:
    beat(other, me)
    round_(me)
    me.schedule(THEIRS, RECORD, INTERVAL, args=(THEIRS,))
    slot = next_slot(me, THEIRS)
    clock.advance(INTERVAL + seconds(SEARCH_EVERY) / 2)
    assert me.wait_idle(TIMEOUT)
    assert jobs.calls(THEIRS) == []  # due, but not overdue yet
    clock.advance(seconds(SEARCH_EVERY))
    assert me.wait_idle(TIMEOUT)
    assert [scheduled for scheduled, _ in ran_here(me, THEIRS)] == [slot]


def test_a_member_that_stops_beating_is_dropped_after_a_lease(
    me: JobScheduler, other: Store, clock: FakeClock, db_url: str
) -> None:
    beat(other, me)
    round_(me)
    me.schedule(THEIRS, RECORD, INTERVAL, args=(THEIRS,), start_in=LEASE_SECONDS + 5.0)
    slot = next_slot(me, THEIRS)
    clock.advance(LEASE_SECONDS - 0.001)  # its count stood still for less than a lease
    round_(me)
    assert members(db_url) == set(BOTH)
    clock.advance(0.001)
    round_(me)
    assert members(db_url) == {ME}  # forgotten: its row deleted
    clock.advance(seconds(Micros(slot - me._timebase.now())))  # the slot, not a microsecond later
    assert me.wait_idle(TIMEOUT)
    assert ran_here(me, THEIRS) == [(slot, slot)]  # queued here again: on time, not found by a search


def test_a_member_that_beats_on_is_kept(me: JobScheduler, other: Store, clock: FakeClock, db_url: str) -> None:
    me.schedule(THEIRS, RECORD, INTERVAL, args=(THEIRS,))
    for _ in range(12):  # four leases
        beat(other, me)
        round_(me)
        clock.advance(LEASE_SECONDS / 3)
        run_elsewhere(other, me, THEIRS)  # its owner runs it on time
    assert members(db_url) == set(BOTH)
    assert jobs.calls(THEIRS) == []


def test_a_member_that_leaves_hands_its_jobs_over_at_the_next_round(
    me: JobScheduler, other: Store, clock: FakeClock
) -> None:
    beat(other, me)
    round_(me)
    me.schedule(THEIRS, RECORD, INTERVAL, args=(THEIRS,), start_in=5.0)
    other.leave_membership(OTHER)
    round_(me)
    assert me._membership is not None
    assert me._membership.members == (ME,)
    slot = next_slot(me, THEIRS)
    clock.advance(5.0)
    assert me.wait_idle(TIMEOUT)
    assert ran_here(me, THEIRS) == [(slot, slot)]


def test_a_member_that_joins_takes_its_share(me: JobScheduler, other: Store, clock: FakeClock) -> None:
    conflicts = Conflicts()
    me.set_observer(conflicts)
    me.schedule(THEIRS, RECORD, INTERVAL, args=(THEIRS,), start_in=5.0)  # queued here: me is alone
    beat(other, me)
    round_(me)  # OTHER owns it now: the entry is dropped
    clock.advance(5.0)
    run_elsewhere(other, me, THEIRS)
    clock.advance(INTERVAL)
    run_elsewhere(other, me, THEIRS)
    assert me.wait_idle(TIMEOUT)
    assert jobs.calls(THEIRS) == []
    assert conflicts.lost == []


def test_forgetting_a_member_is_conditional_on_the_count_seen(me: JobScheduler, other: Store) -> None:
    beat(other, me)
    now = me._timebase.now()
    counts, _ = other.beat_membership(OTHER, now, Instant(now + 30_000_000), shares=True)
    (count,) = [beats for member, (beats, _) in counts.items() if member == OTHER]
    beat(other, me)  # it beat again after the count was seen
    assert other.forget_member(OTHER, count) is False
    assert isinstance(count, int)
    assert other.forget_member(OTHER, count + 1) is True


def test_the_owner_queues_its_job_again_after_a_slot_taken_elsewhere(
    me: JobScheduler, other: Store, clock: FakeClock
) -> None:
    beat(other, me)
    round_(me)
    me.schedule(MINE, RECORD, INTERVAL, args=(MINE,))
    run_elsewhere(other, me, MINE)  # OTHER's search, say, took this slot
    clock.advance(INTERVAL)
    assert me.wait_idle(TIMEOUT)
    slot = next_slot(me, MINE)
    clock.advance(INTERVAL)
    assert me.wait_idle(TIMEOUT)
    assert ran_here(me, MINE) == [(slot, slot)]


def test_deschedule_and_wait_waits_for_a_claim_by_query_under_way(
    me: JobScheduler, other: Store, clock: FakeClock
) -> None:
    beat(other, me)
    round_(me)
    me.schedule(THEIRS, RECORD, INTERVAL, args=(THEIRS,))
    committed, go = threading.Event(), threading.Event()
    store = me._store
    real = store.claim_overdue

    def paused(*args: Any) -> Any:  # noqa: ANN401 - claim_overdue's arguments and result
        found = real(*args)
        if found.entries:
            committed.set()
            assert go.wait(TIMEOUT)
        return found

    seen_at_return: list[int] = []

    def deschedule() -> None:
        me.deschedule(THEIRS, wait=True, timeout=TIMEOUT)
        seen_at_return.append(len(jobs.calls(THEIRS)))

    with patch.object(store, "claim_overdue", paused):
        clock.advance(INTERVAL + seconds(SEARCH_EVERY) * 1.5)
        assert committed.wait(TIMEOUT)  # the search committed its claim, not handed over yet
        waiter = threading.Thread(target=deschedule)
        waiter.start()
        waiter.join(0.5)  # without the count of searches under way it returns here, the run not started
        go.set()
        waiter.join(TIMEOUT)
    assert seen_at_return == [1]  # it returned after the run it raced


def test_the_search_runs_only_while_others_share_every_search_every(
    me: JobScheduler, other: Store, clock: FakeClock
) -> None:
    me.schedule(MINE, RECORD, 3600.0, args=(MINE,), start_in=50.0)  # a job, due later than the test looks
    searches: list[Instant] = []
    store = me._store
    real = store.claim_overdue

    def counted(*args: Any) -> Any:  # noqa: ANN401 - claim_overdue's arguments and result
        searches.append(me._timebase.now())
        return real(*args)

    def two_seconds() -> None:
        for _ in range(20):  # a wake-up every 0.1 s
            clock.advance(0.1)
            assert me.wait_idle(TIMEOUT)

    with patch.object(store, "claim_overdue", counted):
        two_seconds()
        assert searches == []  # alone: it owns every job, nobody else to help
        beat(other, me)
        round_(me)
        two_seconds()
    assert 3 <= len(searches) <= 5  # every SEARCH_EVERY (0.5 s), not every 0.1 s
    assert all(b - a >= SEARCH_EVERY for a, b in itertools.pairwise(searches))


def test_a_job_a_search_ran_is_adopted_until_its_owner_is_back(
    me: JobScheduler, other: Store, clock: FakeClock
) -> None:
    conflicts = Conflicts()
    me.set_observer(conflicts)
    beat(other, me)
    round_(me)
    me.schedule(THEIRS, RECORD, INTERVAL, args=(THEIRS,))
    clock.advance(INTERVAL + seconds(SEARCH_EVERY) * 1.5)  # OTHER is silent: the search runs it, late
    assert me.wait_idle(TIMEOUT)
    for _ in range(2):  # adopted: the next slots run here on time
        slot = next_slot(me, THEIRS)
        clock.advance(seconds(Micros(slot - me._timebase.now())))
        assert me.wait_idle(TIMEOUT)
        assert max(ran_here(me, THEIRS)) == (slot, slot)
    run_elsewhere(other, me, THEIRS)  # its owner is back and takes a slot first
    for _ in range(3):
        clock.advance(INTERVAL)
        assert me.wait_idle(TIMEOUT)
        run_elsewhere(other, me, THEIRS)
    assert len(ran_here(me, THEIRS)) == 3
    assert conflicts.lost == [THEIRS]  # one lost claim, then it is the owner's again


@pytest.fixture
def beating(db_url: str, clock: FakeClock) -> Iterator[JobScheduler]:
    """`ME` with its heartbeat thread running (beats every 10 s of clock, pick-ups every 1 s)."""
    sched = JobScheduler(db_url, clock=clock, instance_id=ME, lease_seconds=LEASE_SECONDS)
    sched.start()
    try:
        yield sched
    finally:
        jobs.release_all()
        sched.shutdown(wait=True, timeout=TIMEOUT)


def test_a_join_and_a_leave_are_seen_within_a_pickup_not_a_heartbeat(
    beating: JobScheduler, db_url: str, clock: FakeClock
) -> None:
    """A member's join and leave move the change counter, so the others see them at their next
    pick-up (1 s; on PostgreSQL at once) instead of their next beat (10 s): ownership settles, and
    the old owner stops racing the newcomer for its share, in the first second."""
    engine = _db.make_engine(db_url)
    try:
        other = Store(engine, _db.mask(engine.url))
        me = beating._membership
        assert me is not None
        beating.schedule(THEIRS, RECORD, INTERVAL, args=(THEIRS,), start_in=5.0)  # queued here: ME is alone
        beat(other, beating)
        clock.advance(1.0)  # one pick-up; the next beat is 9 s away
        wait_until(lambda: me.members == tuple(sorted(BOTH)), message="ME sees OTHER join")
        clock.advance(4.0)  # the slot: OTHER's now, so ME does not even try it
        assert beating.wait_idle(TIMEOUT)
        assert jobs.calls(THEIRS) == []
        other.leave_membership(OTHER)
        clock.advance(1.0)
        wait_until(lambda: me.members == (ME,), message="ME sees OTHER leave")
    finally:
        engine.dispose()


def test_a_leave_committed_while_a_pickup_reads_the_changes_is_seen_by_that_pickup(
    me: JobScheduler, other: Store
) -> None:
    """A pick-up asks the membership first and reads the changes after: a leave committed in
    between moves the counter past what the membership saw, so the next pick-up sees no move.
    The pick-up that read it looks at the members again, instead of leaving OTHER in the view
    until the next beat."""
    membership, pickup = me._membership, me._heartbeat.pickup
    beat(other, me)  # a join: the counter moves
    real = me._store.changes_since

    def changes_since_after_a_leave(*args: Any, **kwargs: Any) -> Any:  # noqa: ANN401 - the store's own types
        other.leave_membership(OTHER)  # commits after the membership looked, before the counter is read
        return real(*args, **kwargs)

    with patch.object(me._store, "changes_since", changes_since_after_a_leave):
        pickup.round()
    pickup.round()  # the counter stands still now
    assert membership.members == (ME,)


def test_a_member_that_does_not_share_is_no_reason_to_beat_at_each_change(
    me: JobScheduler, other: Store, db_url: str
) -> None:
    """An earlier release's racing instance (its row marked ``shares`` false) is in no view: a
    pick-up that sees the change counter move compares the rows with those of the last beat, not
    with the view, and so does not beat again at every job change for that row."""
    now = me._timebase.now()
    other.beat_membership(OTHER, now, Instant(now + LEASE), shares=False)
    round_(me)
    membership = me._membership
    assert membership.members == (ME,)  # seen, but given no share

    def my_beats() -> object:
        (count,) = [b for m, b in db_sql(db_url, "SELECT instance_id, beats FROM persched_instances") if m == ME]
        return count

    before = my_beats()
    assert membership.notice() is False
    assert my_beats() == before  # no beat: no row came or went


def test_share_work_false_warns_and_shares_all_the_same(me: JobScheduler, db_url: str, clock: FakeClock) -> None:
    """docs/reference/options.md, "share_work": False is deprecated, named at the caller's line,
    and the instance shares the work like any other (its row says so; each counts the other)."""
    with pytest.warns(DeprecationWarning, match=r"share_work=False has no effect.*next minor release") as warned:
        late = JobScheduler(db_url, clock=clock, instance_id=OTHER, lease_seconds=LEASE_SECONDS, share_work=False)
    assert [w.filename for w in warned] == [__file__]
    try:
        late.start()
        late._heartbeat.stop()  # the test runs the membership rounds
        late._heartbeat.join(TIMEOUT)
        rows = dict(db_sql(db_url, "SELECT instance_id, shares FROM persched_instances"))
        assert rows == {ME: True, OTHER: True}  # SQLite's 1 is True too
        round_(me)
        round_(late)
        assert me._membership.members == late._membership.members == BOTH
        theirs = job_owned_by(OTHER, BOTH, "j")
        assert late._membership.owns(theirs)
        assert not me._membership.owns(theirs)
    finally:
        late.shutdown(wait=True, timeout=TIMEOUT)


def test_share_work_false_on_the_async_front_warns_at_the_callers_line(db_url: str) -> None:
    with pytest.warns(DeprecationWarning, match="share_work=False has no effect") as warned:
        sched = AsyncJobScheduler(db_url, share_work=False)
    assert [w.filename for w in warned] == [__file__]
    asyncio.run(sched.shutdown())


@pytest.mark.parametrize("value", ["no", None, 0])
def test_share_work_must_be_a_bool(db_url: str, value: object) -> None:
    with pytest.raises(InvalidJobError) as raised:
        JobScheduler(db_url, share_work=value)  # type: ignore[arg-type]  # the wrong type on purpose
    assert raised.value.argument == "share_work"
