"""Knowing it is alive, from the database alone: the instance rows and the problems `persched check` reports.

Each scheduler keeps a row in persched_instances (sharing the work or not)
whose ``lease_until`` its heartbeat moves on; `persched._store.health` judges
liveness and problems from the rows and an explicit `now`, so these tests
drive the schedulers with a FakeClock and ask at chosen instants.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import pytest

from persched import JobScheduler
from persched._model.instant import Instant, micros
from persched._store import Store
from persched._store import db as _db
from persched._store.health import live_instances, problems
from persched.testing import FakeClock
from tests.support.helpers import TIMEOUT, wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.every_engine

START: Final = 1_700_000_000.25  # FakeClock start, off the whole second
LEASE: Final = 30.0  # JobScheduler's default lease_seconds
FAIL: Final = "tests.support.jobs:fail"
RECORD: Final = "tests.support.jobs:record"


@pytest.fixture
def reader(db_url: str) -> Iterator[Store]:
    """A store of its own on the test's database, as `persched check` opens one."""
    engine = _db.make_engine(db_url)
    yield Store(engine, _db.mask(engine.url))
    engine.dispose()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def idle(db_url: str, clock: FakeClock) -> Iterator[JobScheduler]:
    """A scheduler that is never started: its jobs are written, and nothing runs them."""
    sched = JobScheduler(db_url, clock=clock)
    yield sched
    sched.shutdown(wait=True, timeout=TIMEOUT)


def now_of(clock: FakeClock, after: float = 0.0) -> Instant:
    return Instant(micros(clock.now()) + micros(after))


def test_every_scheduler_keeps_a_live_instance_row(db_url: str, clock: FakeClock, reader: Store) -> None:
    with JobScheduler(db_url, clock=clock) as sched:
        (row,) = live_instances(reader, now_of(clock))
        assert row.instance_id == sched.instance_id
        assert row.shares is True
    assert live_instances(reader, now_of(clock)) == []  # a clean shutdown deletes its row


def test_a_row_is_live_until_its_lease_lapses(db_url: str, clock: FakeClock, reader: Store) -> None:
    sched = JobScheduler(db_url, clock=clock, lease_seconds=LEASE)
    sched.start()
    try:
        # The last beat was at start (the heartbeat waits for the FakeClock to move).
        wait_until(lambda: live_instances(reader, now_of(clock)) != [], message="the instance row")
        assert [r.instance_id for r in live_instances(reader, now_of(clock, LEASE))] == [sched.instance_id]
        assert live_instances(reader, now_of(clock, LEASE + 1e-6)) == []
    finally:
        sched.shutdown(wait=True, timeout=TIMEOUT)


def test_a_namespace_with_jobs_and_no_scheduler_is_a_problem(db_url: str, clock: FakeClock, reader: Store) -> None:
    with JobScheduler(db_url, clock=clock) as sched:
        sched.schedule("hourly", RECORD, 3600.0, args=("hourly",))
        assert problems(reader, now_of(clock)) == []
    (found,) = problems(reader, now_of(clock))
    assert (found.kind, found.namespace, found.count) == ("no_scheduler", "default", 1)


def test_paused_jobs_need_no_scheduler_and_are_never_overdue(
    idle: JobScheduler, clock: FakeClock, reader: Store
) -> None:
    sched = idle
    sched.schedule("paused", RECORD, 60.0, args=("paused",), start_in=0)
    sched.pause("paused")
    assert problems(reader, now_of(clock, 10 * LEASE)) == []


def test_a_job_is_overdue_once_late_by_more_than_its_grace_plus_the_lease(
    idle: JobScheduler, clock: FakeClock, reader: Store
) -> None:
    sched = idle
    sched.schedule("late", RECORD, 60.0, args=("late",), start_in=0, grace_seconds=2.5)
    due = 2.5 + LEASE  # no instance row: the default lease
    assert {p.kind for p in problems(reader, now_of(clock, due))} == {"no_scheduler"}
    overdue = [p for p in problems(reader, now_of(clock, due + 1e-6)) if p.kind == "overdue"]
    assert [(p.job_id, p.late) for p in overdue] == [("late", micros(due + 1e-6))]


def test_a_job_whose_last_runs_all_failed_is_failing(db_url: str, clock: FakeClock, reader: Store) -> None:
    with JobScheduler(db_url, clock=clock) as sched:
        sched.schedule("flaky", FAIL, 1.0, args=("flaky", "boom"), start_in=0)
        for n in range(1, 4):
            wait_until(lambda n=n: _finished(sched, "flaky") >= n, message=f"{n} runs")  # type: ignore[misc]
            if n < 3:
                assert [p for p in problems(reader, now_of(clock)) if p.kind == "failing"] == []
                clock.advance(1.0)
        (failing,) = [p for p in problems(reader, now_of(clock)) if p.kind == "failing"]
        assert (failing.job_id, failing.count) == ("flaky", 3)
        assert [p for p in problems(reader, now_of(clock), failures=4) if p.kind == "failing"] == []
        sched.schedule("flaky", RECORD, 1.0, args=("flaky",), start_in=0)  # a new definition starts afresh
        assert [p for p in problems(reader, now_of(clock)) if p.kind == "failing"] == []


def _finished(sched: JobScheduler, job_id: str) -> int:
    return len([r for r in sched.runs(job_id) if r.outcome is not None])
