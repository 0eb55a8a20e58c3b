"""Instances share the work instead of racing for it (issue 19), on every engine.

One in-process scheduler (`ME`, ``share_work=True``, a FakeClock at an odd instant) and another
instance played by hand through a second `Store` (`OTHER`): it claims and
finishes slots exactly when the test says. Deterministic: every step waits
for `wait_idle` or for an event, none for an interleaving.

- A slot another instance took is not tried here again at that job's next
  slots (before issue 19 the loser requeued at the next slot and lost every
  slot again: one wasted claim per slot per extra instance).
- A job whose claimer stopped queueing it (it stopped, or is saturated) is
  still found here, by the claim by query, once it is overdue.
- deschedule(wait=True) waits for a claim by query under way, whose jobs are
  not known before its commit.
- An instance that owns no job (the others took them all, as after its
  outage) queues the slots due soon and races for them: it rejoins.
- An instance searches every `SEARCH_EVERY`, not at every wake-up.
"""

from __future__ import annotations

import itertools
import threading
from typing import TYPE_CHECKING, Any
from unittest.mock import patch

import pytest

from persched import JobScheduler
from persched._engine.dispatcher import JOIN_AHEAD, SEARCH_EVERY
from persched._model.instant import Instant, Micros, from_datetime, seconds
from persched._store import Claim, Store
from persched._store import db as _db
from persched._store.observer import Observer
from persched.testing import FakeClock
from tests.support import jobs
from tests.support.helpers import TIMEOUT, finished_runs
from tests.support.race_jobs import RECORD
from tests.support.store_calls import claim_one, finish_one

if TYPE_CHECKING:
    from collections.abc import Iterator


ME = "me:1:aaaaaa"
OTHER = "other:2:bbbbbb"
LEASE = Micros(30_000_000)
INTERVAL = 10.0


class Conflicts(Observer):
    def __init__(self) -> None:
        self.lost: list[str] = []

    def claim_conflict(self, job_id: str) -> None:
        self.lost.append(job_id)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(start=1_700_000_123.4567)


@pytest.fixture
def me(db_url: str, clock: FakeClock) -> Iterator[JobScheduler]:
    # No pick-up after the first (neither polled nor signalled): it would queue this instance's own
    # schedule() again.
    sched = JobScheduler(
        db_url, clock=clock, instance_id=ME, pickup_seconds=3600.0, pickup_check_seconds=3600.0, share_work=True
    )
    sched.start()
    try:
        yield sched
    finally:
        jobs.release_all()
        sched.shutdown(wait=True, timeout=TIMEOUT)


@pytest.fixture
def other(me: JobScheduler, db_url: str) -> Iterator[Store]:
    """The other instance's store (the database is migrated: `me` started)."""
    engine = _db.make_engine(db_url)
    try:
        yield Store(engine, _db.mask(engine.url))
    finally:
        engine.dispose()


def next_slot(sched: JobScheduler, job_id: str) -> Instant:
    job = sched.get_job(job_id)
    assert job is not None
    return from_datetime(job.next_run_at)


def own_another_job(sched: JobScheduler) -> None:
    """Give `sched` a job of its own, due later than the test looks (within the heap's horizon):
    it owns a job, so it does not rejoin."""
    sched.schedule("mine", RECORD, 3600.0, args=("mine",), start_in=50.0)


def lose_to_other(other: Store, sched: JobScheduler, clock: FakeClock, job_id: str) -> None:
    """`OTHER` runs the job's next slot; the entry `sched` had for it then loses (taken) and is dropped."""
    run_elsewhere(other, sched, job_id)
    clock.advance(INTERVAL)
    assert sched.wait_idle(TIMEOUT)


def run_elsewhere(other: Store, sched: JobScheduler, job_id: str) -> Instant:
    """`OTHER` claims and finishes the job's next slot (at that slot); return the slot."""
    slot = next_slot(sched, job_id)
    job = sched.get_job(job_id)
    assert job is not None
    claim = claim_one(other, job_id, job.generation, slot, slot, OTHER, LEASE)
    assert isinstance(claim, Claim)
    assert finish_one(other, claim, OTHER, Instant(slot + 1_000), "ok", None) is not None
    return slot


def test_a_slot_taken_elsewhere_is_not_tried_here_at_the_next_slots(
    me: JobScheduler, other: Store, clock: FakeClock
) -> None:
    lost = Conflicts()
    me.set_observer(lost)
    me.schedule("a", RECORD, INTERVAL, args=("a",))
    lose_to_other(other, me, clock, "a")  # the slot `me` had queued comes due: lost
    for _ in range(3):
        lose_to_other(other, me, clock, "a")  # `me` no longer tries: nothing lost
    assert lost.lost == ["a"]  # before issue 19: one more lost claim at every slot
    assert jobs.calls("a") == []


def test_a_job_nobody_queues_any_more_is_found_once_overdue(me: JobScheduler, other: Store, clock: FakeClock) -> None:
    own_another_job(me)
    me.schedule("a", RECORD, INTERVAL, args=("a",))
    lose_to_other(other, me, clock, "a")  # not queued again: OTHER then stops
    slot = next_slot(me, "a")
    clock.advance(INTERVAL + seconds(SEARCH_EVERY) / 2)
    assert me.wait_idle(TIMEOUT)
    assert jobs.calls("a") == []  # due, but not overdue yet
    clock.advance(seconds(SEARCH_EVERY))
    assert me.wait_idle(TIMEOUT)
    (run,) = [r for r in finished_runs(me, "a") if r.instance_id == ME]
    assert (from_datetime(run.scheduled_for), run.outcome) == (slot, "ok")


def test_deschedule_and_wait_waits_for_a_claim_by_query_under_way(
    me: JobScheduler, other: Store, clock: FakeClock
) -> None:
    own_another_job(me)
    me.schedule("a", RECORD, INTERVAL, args=("a",))
    lose_to_other(other, me, clock, "a")
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
        me.deschedule("a", wait=True, timeout=TIMEOUT)
        seen_at_return.append(len(jobs.calls("a")))

    with patch.object(store, "claim_overdue", paused):
        clock.advance(INTERVAL + seconds(SEARCH_EVERY) * 1.5)
        assert committed.wait(TIMEOUT)  # the search committed its claim of "a", not handed over yet
        waiter = threading.Thread(target=deschedule)
        waiter.start()
        waiter.join(0.5)  # without the count of searches under way it returns here, the run not started
        go.set()
        waiter.join(TIMEOUT)
    assert seen_at_return == [1]  # it returned after the run it raced


def test_an_instance_that_owns_no_job_races_for_the_slots_due_soon(
    me: JobScheduler, other: Store, clock: FakeClock
) -> None:
    # OTHER took "a" (as the instance that stayed connected takes every job during an outage).
    me.schedule("a", RECORD, INTERVAL, args=("a",))
    lose_to_other(other, me, clock, "a")
    slot = next_slot(me, "a")  # OTHER would run it on time: it is never overdue
    clock.advance(seconds(Micros(slot - me._timebase.now() - JOIN_AHEAD // 2)))
    assert me.wait_idle(TIMEOUT)  # a search: "a" is due within JOIN_AHEAD, so it is queued here
    assert jobs.calls("a") == []
    clock.advance(seconds(JOIN_AHEAD) / 2)  # the slot, not a microsecond later
    assert me.wait_idle(TIMEOUT)
    (run,) = [r for r in finished_runs(me, "a") if r.instance_id == ME]  # before: never, while OTHER ran it
    assert (from_datetime(run.scheduled_for), from_datetime(run.started_at)) == (slot, slot)


def test_an_instance_searches_every_search_every(me: JobScheduler, clock: FakeClock) -> None:
    own_another_job(me)
    searches: list[Instant] = []
    store = me._store
    real = store.claim_overdue

    def counted(*args: Any) -> Any:  # noqa: ANN401 - claim_overdue's arguments and result
        searches.append(me._timebase.now())
        return real(*args)

    with patch.object(store, "claim_overdue", counted):
        for _ in range(20):  # 2 s, a wake-up every 0.1 s
            clock.advance(0.1)
            assert me.wait_idle(TIMEOUT)
    assert 3 <= len(searches) <= 5  # every SEARCH_EVERY (0.5 s), not every 0.1 s
    assert all(b - a >= SEARCH_EVERY for a, b in itertools.pairwise(searches))
