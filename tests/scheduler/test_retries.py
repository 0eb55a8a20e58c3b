"""Retries inside the slot (docs/reference/behaviour.md, "Retries"), on every engine.

Time comes only from a `FakeClock` started at an odd instant; after each
advance the test waits for the scheduler to be idle (`wait_idle`), so an
attempt that is due has run by then and one that is not due has not. Each
attempt is a run of the same slot with its own `Run.attempt`; the next one is
due exactly ``delay * backoff**(k-1)`` after attempt k ended, never at or
after the job's next slot.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Final

import pytest

from persched._model.instant import Instant, micros
from persched._store import Store
from persched._store import db as _db
from persched._store.health import problems
from persched.errors import InvalidJobError
from persched.testing import FakeClock
from tests.support import jobs
from tests.support.attempts import START, advance, settled_runs, started, stored_job
from tests.support.helpers import TIMEOUT, db_sql

if TYPE_CHECKING:
    from persched import Job, JobScheduler
    from tests.conftest import SchedulerFactory

pytestmark = pytest.mark.every_engine

US: Final = 0.000_001


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


def _failing(sched: JobScheduler, job_id: str, script: list[str], every: float, **options: Any) -> Job:  # noqa: ANN401
    return sched.schedule(
        job_id, jobs.follow, every, args=(job_id, script), start_in=0, **options, misfire="skip", grace_seconds=3600
    )


def test_each_attempt_starts_exactly_when_due_and_runs_the_same_slot(
    make_scheduler: SchedulerFactory, clock: FakeClock
) -> None:
    sched = started(make_scheduler, clock)
    _failing(sched, "flaky", ["error", "error", "ok"], 3600.0, retries=3, retry_delay_seconds=10, retry_backoff=2)
    [first] = settled_runs(sched, "flaky")
    assert (first.attempt, first.outcome) == (1, "error")
    assert first.finished_at is not None
    job = stored_job(sched, "flaky")
    assert job.pending_attempt == 2
    assert job.next_run_at == first.finished_at + timedelta(seconds=10)

    advance(sched, clock, 10 - US)  # one microsecond early: nothing
    assert len(settled_runs(sched, "flaky")) == 1
    advance(sched, clock, US)
    second = settled_runs(sched, "flaky")[-1]
    assert (second.attempt, second.outcome, second.scheduled_for) == (2, "error", first.scheduled_for)
    assert second.finished_at is not None
    assert stored_job(sched, "flaky").next_run_at == second.finished_at + timedelta(seconds=20)  # backoff 2

    advance(sched, clock, 20 - US)
    assert len(settled_runs(sched, "flaky")) == 2
    advance(sched, clock, US)
    runs = settled_runs(sched, "flaky")
    assert [(r.attempt, r.outcome) for r in runs] == [(1, "error"), (2, "error"), (3, "ok")]
    assert {r.scheduled_for for r in runs} == {first.scheduled_for}
    job = stored_job(sched, "flaky")
    assert job.pending_attempt is None
    assert job.next_run_at == first.scheduled_for + timedelta(hours=1)  # back on its grid
    assert job.failure_streak == 0  # the slot succeeded in the end
    assert (job.run_count, job.error_count) == (3, 2)


def test_an_attempt_never_reaches_the_next_slot(
    make_scheduler: SchedulerFactory, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    sched = started(make_scheduler, clock)
    # Attempt 2 at +25 s; attempt 3 would come 50 s after that, past the next slot at +60 s.
    _failing(sched, "tight", ["error", "error", "ok"], 60.0, retries=5, retry_delay_seconds=25)
    [first] = settled_runs(sched, "tight")
    advance(sched, clock, 25)
    assert [r.attempt for r in settled_runs(sched, "tight")] == [1, 2]
    job = stored_job(sched, "tight")
    assert job.pending_attempt is None
    assert job.next_run_at == first.scheduled_for + timedelta(seconds=60)
    gave_up = [r.getMessage() for r in caplog.records if "gave up" in r.getMessage()]
    assert len(gave_up) == 1
    assert "after 2 attempts" in gave_up[0]
    assert job.failure_streak == 1  # the slot ended in failure

    advance(sched, clock, 35)  # the next slot runs as its own first attempt, and succeeds
    runs = settled_runs(sched, "tight")
    assert [(r.attempt, r.outcome) for r in runs] == [(1, "error"), (2, "error"), (1, "ok")]
    assert runs[-1].scheduled_for == first.scheduled_for + timedelta(seconds=60)


def test_the_delay_is_capped_and_a_fixed_delay_job_retries_before_its_next_run(
    make_scheduler: SchedulerFactory, clock: FakeClock
) -> None:
    sched = started(make_scheduler, clock)
    sched.schedule(
        "fd",
        jobs.follow,
        600.0,
        args=("fd", ["error", "error", "error", "ok"]),
        start_in=0,
        recurrence="fixed_delay",
        retries=3,
        retry_delay_seconds=100,
        retry_backoff=3,
        retry_max_delay_seconds=150,
    )
    assert [r.attempt for r in settled_runs(sched, "fd")] == [1]
    advance(sched, clock, 100)  # attempt 2
    advance(sched, clock, 150)  # attempt 3: 300 s capped at 150 s
    runs = settled_runs(sched, "fd")
    assert [r.attempt for r in runs] == [1, 2, 3]
    last = runs[-1]
    assert last.finished_at is not None
    # Attempt 4 would be due 150 s after attempt 3 ended, before the next run (600 s after that end).
    assert stored_job(sched, "fd").next_run_at == last.finished_at + timedelta(seconds=150)
    advance(sched, clock, 150)
    runs = settled_runs(sched, "fd")
    assert [(r.attempt, r.outcome) for r in runs][-1] == (4, "ok")
    ended = runs[-1].finished_at
    assert ended is not None
    assert stored_job(sched, "fd").next_run_at == ended + timedelta(seconds=600)


def test_pause_deschedule_and_replacement_drop_a_pending_attempt(
    make_scheduler: SchedulerFactory, clock: FakeClock
) -> None:
    sched = started(make_scheduler, clock)
    for job_id in ("paused", "gone", "replaced"):
        _failing(sched, job_id, ["error"], 3600.0, retries=2, retry_delay_seconds=10)
        assert sched.wait_idle(TIMEOUT)
        assert stored_job(sched, job_id).pending_attempt == 2
    sched.pause("paused")
    sched.deschedule("gone")
    sched.schedule("replaced", jobs.follow, 3600.0, args=("replaced", []), retries=2, retry_delay_seconds=11)
    assert stored_job(sched, "paused").pending_attempt is None
    assert stored_job(sched, "replaced").pending_attempt is None
    advance(sched, clock, 30)
    for job_id in ("paused", "gone", "replaced"):
        assert [r.attempt for r in settled_runs(sched, job_id)] == [1], job_id
    sched.resume("paused")  # back on its grid: the dropped attempt does not come back
    advance(sched, clock, 30)
    assert [r.attempt for r in settled_runs(sched, "paused")] == [1]


def test_a_run_now_run_is_never_retried_and_leaves_a_pending_attempt_alone(
    make_scheduler: SchedulerFactory, clock: FakeClock
) -> None:
    sched = started(make_scheduler, clock)
    _failing(sched, "rn", ["error", "error", "ok"], 3600.0, retries=1, retry_delay_seconds=100)
    [first] = settled_runs(sched, "rn")
    pending_at = stored_job(sched, "rn").next_run_at
    assert sched.run_now("rn")
    assert sched.wait_idle(TIMEOUT)
    runs = settled_runs(sched, "rn")
    assert [(r.attempt, r.run_now, r.outcome) for r in runs] == [(1, False, "error"), (1, True, "error")]
    job = stored_job(sched, "rn")
    assert (job.pending_attempt, job.next_run_at) == (2, pending_at)
    advance(sched, clock, 100)
    last = settled_runs(sched, "rn")[-1]
    assert (last.attempt, last.scheduled_for, last.outcome) == (2, first.scheduled_for, "ok")


def test_a_pending_attempt_survives_a_restart_and_is_dropped_once_its_slot_passed(
    make_scheduler: SchedulerFactory, clock: FakeClock
) -> None:
    sched = started(make_scheduler, clock)
    _failing(sched, "kept", ["error", "ok"], 3600.0, retries=1, retry_delay_seconds=10)
    _failing(sched, "late", ["error", "ok"], 60.0, retries=1, retry_delay_seconds=10)
    assert sched.wait_idle(TIMEOUT)
    [kept_first] = settled_runs(sched, "kept")
    [late_first] = settled_runs(sched, "late")
    sched.shutdown()

    clock.advance(65)  # no scheduler runs: "kept"'s attempt is due and its slot current; "late"'s slot passed
    again = started(make_scheduler, clock)
    assert again.wait_idle(TIMEOUT)
    kept = settled_runs(again, "kept")
    assert [(r.attempt, r.scheduled_for, r.outcome) for r in kept] == [
        (1, kept_first.scheduled_for, "error"),
        (2, kept_first.scheduled_for, "ok"),
    ]
    late = settled_runs(again, "late")
    # Its attempt 2 never ran: the next slot (+60 s) ran instead, as its first attempt.
    assert [(r.attempt, r.scheduled_for) for r in late if r.outcome != "missed"] == [
        (1, late_first.scheduled_for),
        (1, late_first.scheduled_for + timedelta(seconds=60)),
    ]


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("retries", -1),
        ("retries", 101),
        ("retries", True),
        ("retries", 1.0),
        ("retries", "3"),
        ("retry_delay_seconds", 0),
        ("retry_delay_seconds", -1.0),
        ("retry_delay_seconds", float("nan")),
        ("retry_delay_seconds", True),
        ("retry_backoff", 0.5),
        ("retry_backoff", float("inf")),
        ("retry_backoff", float("nan")),
        ("retry_backoff", False),
        ("retry_backoff", "2"),
        ("retry_max_delay_seconds", 0),
        ("retry_max_delay_seconds", float("inf")),
        ("retry_lost", 1),
        ("retry_lost", "yes"),
        ("retry_lost", None),
    ],
)
def test_a_bad_retry_option_is_refused_by_name_and_writes_nothing(
    make_scheduler: SchedulerFactory, clock: FakeClock, option: str, value: object
) -> None:
    sched = make_scheduler(clock=clock)
    bad: dict[str, Any] = {option: value}
    with pytest.raises(InvalidJobError) as raised:
        sched.schedule("bad", jobs.record, 60.0, args=("bad",), **bad)
    assert raised.value.argument == option
    assert sched.get_job("bad") is None


def test_the_retry_options_are_part_of_the_definition(make_scheduler: SchedulerFactory, clock: FakeClock) -> None:
    sched = make_scheduler(clock=clock)
    options: dict[str, Any] = {
        "retries": 4,
        "retry_delay_seconds": 1.5,
        "retry_backoff": 1.25,
        "retry_max_delay_seconds": 30,
        "retry_lost": True,
    }
    job = sched.schedule("opts", jobs.record, 60.0, args=("opts",), **options)
    assert (job.retries, job.retry_delay_seconds, job.retry_backoff) == (4, 1.5, 1.25)
    assert (job.retry_max_delay_seconds, job.retry_lost) == (30.0, True)
    same = sched.schedule("opts", jobs.record, 60.0, args=("opts",), **options)
    assert same.generation == job.generation  # unchanged
    other = sched.schedule("opts", jobs.record, 60.0, args=("opts",), retries=5)
    assert other.generation == job.generation + 1  # replaced


def test_gave_up_is_logged_once_per_slot(
    make_scheduler: SchedulerFactory, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="persched")
    sched = started(make_scheduler, clock)
    _failing(sched, "doomed", ["error"] * 10, 3600.0, retries=2, retry_delay_seconds=5, retry_backoff=1)
    assert [r.attempt for r in settled_runs(sched, "doomed")] == [1]
    advance(sched, clock, 5)
    advance(sched, clock, 5)
    assert [(r.attempt, r.outcome) for r in settled_runs(sched, "doomed")] == [(1, "error"), (2, "error"), (3, "error")]
    gave_up = [r.getMessage() for r in caplog.records if "gave up" in r.getMessage()]
    assert len(gave_up) == 1
    assert "after 3 attempts" in gave_up[0]
    assert stored_job(sched, "doomed").failure_streak == 1


def test_persched_check_counts_failed_slots_not_failed_attempts(
    make_scheduler: SchedulerFactory, clock: FakeClock, db_url: str
) -> None:
    sched = started(make_scheduler, clock)
    _failing(sched, "flaky", ["error"] * 20, 60.0, retries=2, retry_delay_seconds=5, retry_backoff=1)
    engine = _db.make_engine(db_url)
    reader = Store(engine, _db.mask(engine.url))
    try:

        def failing(slots: int) -> list[str]:
            now = Instant(micros(clock.now()))
            return [p.job_id or "" for p in problems(reader, now, failures=slots) if p.kind == "failing"]

        assert [r.attempt for r in settled_runs(sched, "flaky")] == [1]
        assert failing(1) == []  # attempt 1 failed, and its slot has an attempt pending: not settled
        advance(sched, clock, 5)
        advance(sched, clock, 5)
        assert [r.attempt for r in settled_runs(sched, "flaky")] == [1, 2, 3]
        assert failing(1) == ["flaky"]
        assert failing(2) == []  # three failed attempts are one failed slot
        advance(sched, clock, 50)  # the next slot: attempts 1, 2 and 3 fail too
        advance(sched, clock, 5)
        advance(sched, clock, 5)
        assert [r.attempt for r in settled_runs(sched, "flaky")] == [1, 2, 3, 1, 2, 3]
        assert failing(2) == ["flaky"]
        assert failing(3) == []
    finally:
        engine.dispose()


def test_a_hand_edited_attempt_past_the_jobs_retries_is_not_run(
    make_scheduler: SchedulerFactory, clock: FakeClock, db_url: str
) -> None:
    sched = started(make_scheduler, clock)
    _failing(sched, "edited", ["error"], 3600.0, retries=2, retry_delay_seconds=10)
    [first] = settled_runs(sched, "edited")
    db_sql(db_url, "UPDATE persched_jobs SET retry_attempt = 99 WHERE job_id = 'edited'")
    advance(sched, clock, 10)
    assert [r.attempt for r in settled_runs(sched, "edited")] == [1]  # attempt 99 never starts: the slot gave up
    job = stored_job(sched, "edited")
    assert (job.pending_attempt, job.next_run_at) == (None, first.scheduled_for + timedelta(hours=1))
