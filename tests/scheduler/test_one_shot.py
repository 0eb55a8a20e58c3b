"""One-shot jobs: ``schedule(job_id, fn, run_at=instant)`` runs once, then the job is finished.

Through the public API, on SQLite and PostgreSQL, driven by a FakeClock at an
odd instant; ``wait_idle()`` waits for the runs that became due.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any, Final

import pytest

from persched import JobScheduler, JobState
from persched._model.instant import to_datetime
from persched.errors import InvalidJobError, SchedulerStateError
from persched.testing import FakeClock
from tests.support import jobs
from tests.support.helpers import TIMEOUT
from tests.support.seams import now_of

if TYPE_CHECKING:
    from collections.abc import Iterator
    from datetime import datetime

START: Final = 1_700_000_000.123457  # an odd instant: sub-second, not a round number
TARGET: Final = "tests.support.jobs:record"


pytestmark = pytest.mark.every_engine  # db_url: tests/conftest.py


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def opened(db_url: str, clock: FakeClock) -> Iterator[list[JobScheduler]]:
    """Schedulers made by a test (on `db_url` and `clock`), shut down at teardown."""
    made: list[JobScheduler] = []
    yield made
    jobs.release_all()
    for sched in made:
        sched.shutdown(wait=True, timeout=TIMEOUT)  # idempotent


def open_scheduler(made: list[JobScheduler], url: str, clock: FakeClock, *, start: bool = True) -> JobScheduler:
    sched = JobScheduler(url, clock=clock)
    made.append(sched)
    if start:
        sched.start()
    return sched


def now(clock: FakeClock) -> datetime:
    return to_datetime(clock.now_us())


def idle(sched: JobScheduler) -> None:
    assert sched.wait_idle(TIMEOUT)


def test_a_one_shot_job_runs_once_at_its_instant_and_is_finished(
    db_url: str, clock: FakeClock, opened: list[JobScheduler]
) -> None:
    sched = open_scheduler(opened, db_url, clock)
    when = now(clock) + timedelta(seconds=30.5)
    job = sched.schedule("once", TARGET, args=("once",), run_at=when)
    assert (job.run_at, job.next_run_at, job.interval_seconds, job.cron) == (when, when, None, None)
    assert job.state == JobState.SCHEDULED
    assert job.schedule == "once at " + when.isoformat().replace("+00:00", "Z")

    clock.advance(30.499999)  # one microsecond early
    idle(sched)
    assert jobs.calls("once") == []
    clock.advance(0.000001)
    idle(sched)
    (call,) = jobs.calls("once")
    assert call.scheduled_for == when
    clock.advance(86_400 * 365)
    idle(sched)
    assert len(jobs.calls("once")) == 1

    done = sched.get_job("once")  # finished, not deleted: listed with its history
    assert done is not None
    assert (done.state, done.run_count, done.run_at) == (JobState.FINISHED, 1, when)
    assert [j.job_id for j in sched.jobs()] == ["once"]
    (run,) = sched.runs("once")
    assert (run.scheduled_for, run.outcome) == (when, "ok")
    with pytest.raises(SchedulerStateError, match="finished"):
        sched.run_now("once")


def test_an_instant_that_passed_while_the_process_was_down_runs_once_at_start_up(
    db_url: str, clock: FakeClock, opened: list[JobScheduler]
) -> None:
    sched = open_scheduler(opened, db_url, clock, start=False)  # scheduled before start()
    when = now(clock) + timedelta(seconds=10)
    sched.schedule("late", TARGET, args=("late",), run_at=when)
    sched.schedule("late-skip", TARGET, args=("late-skip",), run_at=when, misfire="skip")
    clock.advance(3 * 3600)  # the process is "down" for three hours
    sched.start()
    idle(sched)
    (call,) = jobs.calls("late")  # coalesce (the default): one run, for its own instant
    assert call.scheduled_for == when
    assert jobs.calls("late-skip") == []  # skip: more than grace_seconds late, dropped and recorded
    (missed,) = sched.runs("late-skip")
    assert (missed.outcome, missed.scheduled_for, missed.missed_count) == ("missed", when, 1)
    for job_id in ("late", "late-skip"):
        job = sched.get_job(job_id)
        assert job is not None
        assert job.state == JobState.FINISHED


def test_a_past_instant_at_schedule_runs_at_once(db_url: str, clock: FakeClock, opened: list[JobScheduler]) -> None:
    sched = open_scheduler(opened, db_url, clock)
    when = now(clock) - timedelta(minutes=5)
    sched.schedule("past", TARGET, args=("past",), run_at=when)
    idle(sched)
    (call,) = jobs.calls("past")
    assert call.scheduled_for == when


def test_re_declaring_a_finished_one_shot_job_keeps_it_finished_and_a_new_instant_replaces_it(
    db_url: str, clock: FakeClock, opened: list[JobScheduler]
) -> None:
    sched = open_scheduler(opened, db_url, clock)
    when = now(clock) + timedelta(seconds=1)
    first = sched.schedule("redeclared", TARGET, args=("redeclared",), run_at=when)
    clock.advance(2)
    idle(sched)
    again = sched.schedule("redeclared", TARGET, args=("redeclared",), run_at=when)  # e.g. at the next start-up
    assert (again.generation, again.state) == (first.generation, JobState.FINISHED)
    clock.advance(60)
    idle(sched)
    assert len(jobs.calls("redeclared")) == 1

    later = now(clock) + timedelta(seconds=5)
    replaced = sched.schedule("redeclared", TARGET, args=("redeclared",), run_at=later)
    assert (replaced.generation, replaced.state) == (first.generation + 1, JobState.SCHEDULED)
    clock.advance(5)
    idle(sched)
    assert [c.scheduled_for for c in jobs.calls("redeclared")] == [when, later]


def test_a_restart_after_the_run_does_not_run_it_again(
    db_url: str, clock: FakeClock, opened: list[JobScheduler]
) -> None:
    sched = open_scheduler(opened, db_url, clock)
    when = now(clock) + timedelta(seconds=1)
    sched.schedule("restart", TARGET, args=("restart",), run_at=when)
    clock.advance(1)
    idle(sched)
    sched.shutdown(wait=True, timeout=TIMEOUT)
    clock.advance(3600)
    again = open_scheduler(opened, db_url, clock)
    idle(again)
    assert len(jobs.calls("restart")) == 1
    job = again.get_job("restart")
    assert job is not None
    assert job.state == JobState.FINISHED


def test_run_now_before_the_instant_is_extra_and_the_instant_still_runs(
    db_url: str, clock: FakeClock, opened: list[JobScheduler]
) -> None:
    sched = open_scheduler(opened, db_url, clock)
    when = now(clock) + timedelta(seconds=60)
    sched.schedule("early", TARGET, args=("early",), run_at=when)
    assert sched.run_now("early")
    idle(sched)
    clock.advance(60)
    idle(sched)
    runs = sched.runs("early")
    assert [(r.run_now, r.outcome) for r in runs] == [(False, "ok"), (True, "ok")]
    assert runs[0].scheduled_for == when


@pytest.mark.parametrize(
    ("extra", "argument"),
    [
        ({"interval_seconds": 60.0}, "interval_seconds"),
        ({"cron": "0 3 * * *"}, "cron"),
        ({"start_in": 5.0}, "start_in"),
        ({"recurrence": "fixed_delay"}, "recurrence"),
        ({"misfire": "nope"}, "misfire"),
        ({"grace_seconds": -1.0}, "grace_seconds"),
    ],
)
def test_a_one_shot_job_refuses_what_does_not_apply(
    extra: dict[str, Any],
    argument: str,
    make_scheduler: Any,  # noqa: ANN401 - the conftest factory
) -> None:
    sched: JobScheduler = make_scheduler()
    when = to_datetime(now_of(sched)) + timedelta(seconds=1)
    with pytest.raises(InvalidJobError) as info:
        sched.schedule("bad", TARGET, run_at=when, **extra)
    assert info.value.argument == argument
    assert sched.get_job("bad") is None


@pytest.mark.parametrize("window", ["start_at", "end_at"])
def test_a_one_shot_job_has_no_window(window: str, make_scheduler: Any) -> None:  # noqa: ANN401 - conftest factory
    sched: JobScheduler = make_scheduler()
    when = to_datetime(now_of(sched)) + timedelta(seconds=1)
    window_arg: dict[str, Any] = {window: when}
    with pytest.raises(InvalidJobError, match="no window") as info:
        sched.schedule("bad", TARGET, run_at=when, **window_arg)
    assert info.value.argument == window


def test_run_at_must_be_timezone_aware(make_scheduler: Any) -> None:  # noqa: ANN401 - conftest factory
    sched: JobScheduler = make_scheduler()
    naive = to_datetime(now_of(sched)).replace(tzinfo=None)
    with pytest.raises(InvalidJobError, match="timezone-aware") as info:
        sched.schedule("bad", TARGET, run_at=naive)
    assert info.value.argument == "run_at"
