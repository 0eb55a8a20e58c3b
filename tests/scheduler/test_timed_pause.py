"""Steering the whole: pause(until=, note=), pause_all() and resume_all(), driven by a FakeClock on every engine.

A timed pause ends at its `until` instant on the scheduler's clock: the
heartbeat wakes at it, and the resume is the store's conditional update
(still paused, with that very end), so several instances resume a job once.
The grid goes on from `until` itself: slots that passed while paused do not
run. Bad arguments are an InvalidJobError and write nothing.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Final

import pytest

from persched import JobScheduler
from persched._engine.pause_ends import PauseEnds
from persched._engine.timebase import Timebase
from persched._model.instant import Micros
from persched._store import Store
from persched._store import db as _db
from persched.errors import InvalidJobError
from persched.testing import FakeClock
from tests.support import jobs
from tests.support.helpers import TIMEOUT, heartbeat_settled, wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator

    from persched import Job
    from persched._model.instant import Instant

pytestmark = pytest.mark.every_engine

START: Final = 1_700_000_000.25  # FakeClock start, off the whole second
RECORD: Final = "tests.support.jobs:record"


def at(offset: float) -> datetime:
    return datetime.fromtimestamp(START, timezone.utc) + timedelta(seconds=offset)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def sched(db_url: str, clock: FakeClock) -> Iterator[JobScheduler]:
    with JobScheduler(db_url, clock=clock) as started:
        yield started


def job_of(sched: JobScheduler, job_id: str) -> Job:
    job = sched.get_job(job_id)
    assert job is not None
    return job


def ran(key: str) -> int:
    return len(jobs.calls(key))


def test_a_timed_pause_ends_at_its_instant_and_the_grid_goes_on_from_there(
    sched: JobScheduler, clock: FakeClock
) -> None:
    sched.schedule("tick", RECORD, 10.0, args=("tick",))  # slots at +10, +20, +30, ...
    assert sched.pause("tick", until=at(25.5), note="maintenance window")
    paused = job_of(sched, "tick")
    assert (paused.paused, paused.paused_until, paused.pause_note) == (True, at(25.5), "maintenance window")
    heartbeat_settled(sched, clock)
    clock.advance(25.5 - 1e-6)  # the slots at +10 and +20 pass while paused
    assert sched.wait_idle(TIMEOUT)
    assert job_of(sched, "tick").paused
    clock.advance(1e-6)
    wait_until(lambda: not job_of(sched, "tick").paused, message="the pause ended at its instant")
    resumed = job_of(sched, "tick")
    assert (resumed.paused_until, resumed.pause_note, resumed.next_run_at) == (None, None, at(30))
    assert ran("tick") == 0
    clock.advance(4.5)
    wait_until(lambda: ran("tick") == 1, message="the first slot after the pause")
    assert [r.scheduled_for for r in sched.runs("tick")] == [at(30)]


def test_wait_idle_after_an_advance_past_the_end_sees_the_job_resumed_and_run(
    sched: JobScheduler, clock: FakeClock
) -> None:
    """No settling, no polling: the advance that reaches the end resumes the job before wait_idle() returns."""
    sched.schedule("straight", RECORD, 10.0, args=("straight",))  # slots at +10, +20, +30, ...
    assert sched.pause("straight", until=at(25.5))
    clock.advance(25.5)
    assert sched.wait_idle(TIMEOUT)
    resumed = job_of(sched, "straight")
    assert (resumed.paused, resumed.paused_until, resumed.next_run_at) == (False, None, at(30))
    clock.advance(4.5)
    assert sched.wait_idle(TIMEOUT)
    assert [r.scheduled_for for r in sched.runs("straight")] == [at(30)]


def test_a_timed_pause_ends_once_however_many_instances_wake_for_it(
    sched: JobScheduler, db_url: str, clock: FakeClock
) -> None:
    sched.schedule("tick", RECORD, 10.0, args=("tick",))
    sched.pause("tick", until=at(15.0))
    clock.advance(15.0)
    stores = [Store(_db.make_engine(db_url), "test") for _ in range(2)]
    try:
        offered: list[tuple[Instant, str, int]] = []
        resumed: list[str] = []
        # Two more instances wake for the same end as the scheduler's own heartbeat: one resume in all.
        ends = [
            PauseEnds(
                store,
                Timebase(clock),
                lambda *entry: offered.append(entry),
                lambda j, g: resumed.append(j),
                period=Micros(10_000_000),
            )
            for store in stores
        ]
        for end in ends:
            end.resume_ended()
        wait_until(lambda: not job_of(sched, "tick").paused, message="the pause ended")
        assert len(resumed) <= 1
        assert len(offered) == len(resumed)
        assert job_of(sched, "tick").next_run_at == at(20.0)
    finally:
        for store in stores:
            store.engine.dispose()


def test_a_timed_pause_survives_a_restart(db_url: str, clock: FakeClock) -> None:
    with JobScheduler(db_url, clock=clock) as first:
        first.schedule("tick", RECORD, 10.0, args=("tick",))
        first.pause("tick", until=at(42.0), note="until the upgrade")
    clock.advance(50.0)  # nothing runs meanwhile
    with JobScheduler(db_url, clock=clock) as second:
        # Resumed at +42 (not at the restart): the slot at +50 is due now, those at +10 .. +40 never run.
        wait_until(lambda: ran("tick") == 1, message="the pause ended after the restart")
        assert [r.scheduled_for for r in second.runs("tick")] == [at(50.0)]


def test_resume_clears_the_end_and_the_note(sched: JobScheduler) -> None:
    sched.schedule("tick", RECORD, 10.0, args=("tick",))
    sched.pause("tick", until=at(100.0), note="why")
    assert sched.resume("tick")
    job = job_of(sched, "tick")
    assert (job.paused, job.paused_until, job.pause_note) == (False, None, None)


def test_a_replacement_keeps_a_timed_pause(sched: JobScheduler) -> None:
    sched.schedule("tick", RECORD, 10.0, args=("tick",))
    sched.pause("tick", until=at(100.0), note="why")
    sched.schedule("tick", RECORD, 20.0, args=("tick",))
    job = job_of(sched, "tick")
    assert (job.paused, job.paused_until, job.pause_note) == (True, at(100.0), "why")


def test_pause_all_and_resume_all_count_what_they_changed(sched: JobScheduler, clock: FakeClock) -> None:
    assert sched.pause_all() == 0
    assert sched.resume_all() == 0
    for job_id in ("a", "b", "c"):
        sched.schedule(job_id, RECORD, 10.0, args=(job_id,))
    sched.pause("a")
    assert sched.pause_all(until=at(60.0), note="freeze") == 2
    assert {j.job_id: (j.paused_until, j.pause_note) for j in sched.jobs()} == {
        "a": (None, None),
        "b": (at(60.0), "freeze"),
        "c": (at(60.0), "freeze"),
    }
    assert sched.pause_all() == 0
    clock.advance(5.0)
    assert sched.resume_all() == 3
    assert [j.paused for j in sched.jobs()] == [False, False, False]
    assert {j.next_run_at for j in sched.jobs()} == {at(10.0)}


@pytest.mark.parametrize(
    ("until", "note", "argument"),
    [
        (datetime(2030, 1, 1), None, "until"),  # naive
        (at(0.0), None, "until"),  # now: not ahead
        (at(-1.0), None, "until"),
        ("2030-01-01T00:00:00Z", None, "until"),
        (None, "x" * 501, "note"),
        (None, 42, "note"),
        (None, "bad \ud800 surrogate", "note"),
    ],
)
def test_bad_pause_arguments_write_nothing(sched: JobScheduler, until: object, note: object, argument: str) -> None:
    sched.schedule("tick", RECORD, 10.0, args=("tick",))
    before = job_of(sched, "tick")
    with pytest.raises(InvalidJobError) as raised:
        sched.pause("tick", until=until, note=note)  # type: ignore[arg-type]
    assert raised.value.argument == argument
    with pytest.raises(InvalidJobError):
        sched.pause_all(until=until, note=note)  # type: ignore[arg-type]
    assert job_of(sched, "tick") == before


def test_a_note_of_500_characters_is_kept_whole(sched: JobScheduler) -> None:
    note = "é" * 499 + "\U0001f600"  # characters, not bytes: 4-byte UTF-8 included
    sched.schedule("tick", RECORD, 10.0, args=("tick",))
    sched.pause("tick", note=note)
    assert job_of(sched, "tick").pause_note == note
