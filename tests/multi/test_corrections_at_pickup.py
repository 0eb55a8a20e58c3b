"""Rows written by a clock that was ahead are put back on their grid when a running instance meets them.

One in-process scheduler (`ME`, a FakeClock at an odd instant) and an instance whose clock is an
hour ahead, played by hand through a second `Store` or an unstarted scheduler: a clock that tells
a test's time is never compared with the database's, so nothing keeps it to the right time (as
with ``max_clock_skew_seconds=None``, or an older persched). Every step waits for `wait_idle` or
for the row the test looks at, none for an interleaving; on every engine.

- A claim that lost to that instance finds the row an hour ahead and puts it back: the job runs
  within one interval, and the slot that instance ran early is passed by when its time comes.
- A job that instance scheduled is put back at the change pick-up.
Either way no ``(job_id, scheduled_for)`` runs twice, and the row keeps its generation
(docs/reference/behaviour.md#clock-corrections-across-a-restart).
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import TYPE_CHECKING, Final

import pytest

from persched import JobScheduler
from persched._model.instant import Instant, Micros, from_datetime, micros
from persched._store import Claim, Store
from persched._store import db as _db
from persched.testing import FakeClock
from tests.support.helpers import TIMEOUT, heartbeat_settled, wait_until
from tests.support.race_jobs import RECORD
from tests.support.store_calls import claim_one, finish_one

if TYPE_CHECKING:
    from collections.abc import Iterator

T: Final = 1_700_000_000.25
HOUR: Final = 3600.0
INTERVAL: Final = 10.0
LEASE: Final = Micros(30_000_000)
ME: Final = "me:1:aaaaaa"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T)


@pytest.fixture
def me(db_url: str, clock: FakeClock) -> Iterator[JobScheduler]:
    sched = JobScheduler(db_url, clock=clock, instance_id=ME, lease_seconds=30.0)
    sched.start()
    try:
        yield sched
    finally:
        sched.shutdown(wait=True, timeout=TIMEOUT)


@pytest.fixture
def ahead(me: JobScheduler, db_url: str) -> Iterator[Store]:
    """The store of the instance an hour ahead (the database is migrated: `me` started)."""
    engine = _db.make_engine(db_url)
    try:
        yield Store(engine, _db.mask(engine.url))
    finally:
        engine.dispose()


def at(offset: float) -> Instant:
    return Instant(micros(T + offset))


def next_slot(sched: JobScheduler, job_id: str) -> Instant:
    job = sched.get_job(job_id)
    assert job is not None
    assert job.generation == 1  # a correction keeps the generation
    return from_datetime(job.next_run_at)


def slots(sched: JobScheduler, job_id: str) -> list[tuple[Instant, str | None]]:
    """``(scheduled_for, instance_id)`` of each run, oldest first."""
    runs = reversed(sched.runs(job_id, limit=1000))
    return [(from_datetime(r.scheduled_for), r.instance_id) for r in runs if r.outcome == "ok"]


def warned(caplog: pytest.LogCaptureFixture, words: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if words in r.getMessage()]


def test_a_claim_that_lost_to_a_clock_ahead_puts_the_row_back(
    me: JobScheduler, ahead: Store, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="persched")
    job = me.schedule("x", RECORD, INTERVAL, args=("x",))  # first slot T + 10
    claim = claim_one(ahead, "x", job.generation, at(INTERVAL), at(HOUR), "ahead", LEASE)
    assert isinstance(claim, Claim)
    assert claim.scheduled_for == at(HOUR)  # the slots of the hour coalesced into its "now"
    assert finish_one(ahead, claim, "ahead", at(HOUR + 0.5), "ok", None) == at(HOUR + INTERVAL)

    clock.advance(INTERVAL)  # ME's claim of T + 10 loses: the row lies an hour ahead
    assert me.wait_idle(TIMEOUT)
    assert next_slot(me, "x") == at(2 * INTERVAL)
    assert len(warned(caplog, "further ahead than its schedule allows")) == 1
    clock.advance(INTERVAL)
    assert me.wait_idle(TIMEOUT)
    assert slots(me, "x") == [(at(HOUR), "ahead"), (at(2 * INTERVAL), ME)]  # within one interval

    clock.advance(HOUR - 2 * INTERVAL + 5)  # T + 3605: the latest slot is T + 3600, which ran early
    assert me.wait_idle(TIMEOUT)
    assert next_slot(me, "x") == at(HOUR + INTERVAL)
    assert len(warned(caplog, "has run already")) == 1
    clock.advance(5)
    assert me.wait_idle(TIMEOUT)
    ran = slots(me, "x")
    assert ran[-1] == (at(HOUR + INTERVAL), ME)
    assert [slot for slot, n in Counter(slot for slot, _ in ran).items() if n > 1] == []


def test_a_job_scheduled_by_a_clock_ahead_is_put_back_at_pick_up(
    me: JobScheduler, db_url: str, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="persched")
    heartbeat_settled(me, clock)
    writer = JobScheduler(db_url, clock=FakeClock(T + HOUR), instance_id="writer")  # never started
    try:
        writer.schedule("y", RECORD, INTERVAL, args=("y",))  # first slot T + 3610, written at T + 3600
    finally:
        writer.shutdown()
    clock.advance(1.0)  # pickup_seconds: the poll, if no signal came first
    wait_until(lambda: next_slot(me, "y") <= at(1.0 + INTERVAL), message="y put back at the pick-up")
    assert next_slot(me, "y") == at(INTERVAL)  # its phase kept: T + 3610 less an hour
    # Logged once the correction committed, by the thread that made it: maybe just after the row moved.
    ahead = "further ahead than its schedule allows"
    wait_until(lambda: bool(warned(caplog, ahead)), message="the correction's WARNING")
    assert len(warned(caplog, ahead)) == 1
    clock.advance(INTERVAL)
    assert me.wait_idle(TIMEOUT)
    assert slots(me, "y") == [(at(INTERVAL), ME)]
