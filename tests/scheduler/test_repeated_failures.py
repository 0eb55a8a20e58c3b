"""`pause_after_failures=N`: N failed slots in a row pause the job, on every engine
(docs/reference/behaviour.md#repeated-failures).

Time comes only from a `FakeClock` started at an odd instant; each slot's
outcome is waited for before the clock moves on, so no slot is coalesced.
The race with a resume holds the failing run in flight (a gate) while the
operator pauses and resumes, so its failure is recorded after the resume;
it also runs against a resume that does not clear the count (``broken``,
strict xfail), to show that the test can fail.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Final

import pytest
from sqlalchemy import update

from persched import JobScheduler, JobSpec
from persched._store import Store
from persched._store.schema import jobs as jobs_table
from persched.errors import InvalidJobError
from persched.testing import FakeClock
from tests.support import jobs
from tests.support.attempts import START, started, stored_job
from tests.support.helpers import TIMEOUT, finished_runs, wait_until
from tests.support.seams import patch_store, store_of

if TYPE_CHECKING:
    from collections.abc import Callable

    from persched._engine.events import Event
    from persched._model.instant import Instant
    from tests.conftest import SchedulerFactory

pytestmark = pytest.mark.every_engine

EVERY: Final = 10.0
NOTE: Final = "paused after 3 consecutive failures"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


def _run_slots(sched: JobScheduler, clock: FakeClock, job_id: str, total: int) -> None:
    """Let the slots of `job_id` run, one interval apart, until `total` of its runs have finished, each waited
    for to its outcome. A slot due at once (``start_in=0``) is let run first, so it counts however fast it was."""
    assert sched.wait_idle(TIMEOUT)
    while (done := len(finished_runs(sched, job_id))) < total:
        clock.advance(EVERY)

        def ran(done: int = done) -> bool:
            return len(finished_runs(sched, job_id)) > done

        wait_until(ran, message=f"slot {done + 1} of {job_id}")


def _paused_events(sched: JobScheduler) -> list[Event]:
    seen: list[Event] = []
    sched.add_listener(seen.append, kinds=["job_paused"])
    return seen


def _pause_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and "consecutive failures" in r.getMessage()
    ]


def test_fewer_failures_in_a_row_than_n_never_pause(
    make_scheduler: SchedulerFactory, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    sched = started(make_scheduler, clock)
    events = _paused_events(sched)
    script = ["error", "error", "ok", "error", "error"]  # N - 1, a success, N - 1
    with caplog.at_level(logging.WARNING, logger="persched"):
        sched.schedule("a", jobs.follow, EVERY, args=("a", script), start_in=0, pause_after_failures=3)
        _run_slots(sched, clock, "a", len(script))
    job = stored_job(sched, "a")
    assert (job.paused, job.pause_note, job.failure_streak, job.pause_after_failures) == (False, None, 2, 3)
    assert [r.outcome for r in reversed(finished_runs(sched, "a"))] == script
    _run_slots(sched, clock, "a", len(script) + 1)  # and it goes on running (a success past the script)
    assert stored_job(sched, "a").failure_streak == 0
    assert events == []
    assert _pause_warnings(caplog) == []


def test_n_failures_in_a_row_pause_the_job_with_a_note_an_event_and_one_warning(
    make_scheduler: SchedulerFactory, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    sched = started(make_scheduler, clock)
    events = _paused_events(sched)
    with caplog.at_level(logging.WARNING, logger="persched"):
        script = ["ok", "error", "error", "error"]
        sched.schedule("a", jobs.follow, EVERY, args=("a", script), start_in=0, pause_after_failures=3)
        _run_slots(sched, clock, "a", 4)
        wait_until(lambda: len(events) == 1, message="the job_paused event")
    job = stored_job(sched, "a")
    assert (job.paused, job.state.value, job.pause_note, job.failure_streak) == (True, "paused", NOTE, 3)
    (event,) = events
    assert (event.kind, event.job_id, event.generation) == ("job_paused", "a", job.generation)
    (warning,) = _pause_warnings(caplog)
    assert "a" in warning
    assert NOTE in warning
    # Paused: no slot runs, however long the clock moves.
    clock.advance(5 * EVERY)
    sched.wait_idle(timeout=TIMEOUT)
    assert len(jobs.calls("a")) == 4
    # A resume clears the note and the count: N more failures before it pauses again.
    assert sched.resume("a")
    job = stored_job(sched, "a")
    assert (job.paused, job.pause_note, job.failure_streak) == (False, None, 0)
    clock.advance(EVERY)
    wait_until(lambda: len(jobs.calls("a")) == 5, message="the first slot after the resume")
    wait_until(lambda: stored_job(sched, "a").last_outcome == "ok", message="its outcome")
    assert not stored_job(sched, "a").paused


def test_the_count_survives_a_restart(make_scheduler: SchedulerFactory, clock: FakeClock) -> None:
    first = started(make_scheduler, clock)
    first.schedule("a", jobs.fail, EVERY, args=("a", "down"), start_in=0, pause_after_failures=3)
    _run_slots(first, clock, "a", 2)
    assert stored_job(first, "a").failure_streak == 2
    first.shutdown(wait=True, timeout=TIMEOUT)
    second = started(make_scheduler, clock)
    assert stored_job(second, "a").failure_streak == 2
    clock.advance(EVERY)
    wait_until(lambda: stored_job(second, "a").paused, message="paused by the third failure, after the restart")
    job = stored_job(second, "a")
    assert (job.pause_note, job.failure_streak, len(jobs.calls("a"))) == (NOTE, 3, 3)


def test_a_replacement_starts_the_count_again(make_scheduler: SchedulerFactory, clock: FakeClock) -> None:
    sched = started(make_scheduler, clock)
    sched.schedule("a", jobs.fail, EVERY, args=("a", "down"), start_in=0, pause_after_failures=3)
    _run_slots(sched, clock, "a", 2)
    replaced = sched.schedule("a", jobs.fail, EVERY, args=("a", "still down"), pause_after_failures=3)
    assert (replaced.generation, replaced.failure_streak) == (2, 0)
    _run_slots(sched, clock, "a", 4)  # two more, of generation 2
    job = stored_job(sched, "a")
    assert (job.paused, job.failure_streak) == (False, 2)
    # An unchanged declaration keeps the generation, and the count with it.
    assert sched.schedule("a", jobs.fail, EVERY, args=("a", "still down"), pause_after_failures=3).failure_streak == 2


def test_a_job_without_the_option_is_never_paused(make_scheduler: SchedulerFactory, clock: FakeClock) -> None:
    sched = started(make_scheduler, clock)
    sched.schedule("a", jobs.fail, EVERY, args=("a", "down"), start_in=0)
    _run_slots(sched, clock, "a", 4)
    job = stored_job(sched, "a")
    assert (job.paused, job.failure_streak, job.error_count) == (False, 4, 4)


def test_a_pause_of_its_own_is_kept_with_its_note(make_scheduler: SchedulerFactory, clock: FakeClock) -> None:
    """The Nth failure of a job that someone paused while it ran leaves that pause and its note as they are."""
    sched = started(make_scheduler, clock)
    sched.schedule("a", jobs.block_then_fail, EVERY, args=("a",), start_in=0, pause_after_failures=1)
    gate = jobs.gate("a")
    assert gate.started.wait(TIMEOUT)
    assert sched.pause("a", note="maintenance")
    gate.release.set()
    wait_until(lambda: stored_job(sched, "a").last_outcome == "error", message="the failure recorded")
    job = stored_job(sched, "a")
    assert (job.paused, job.pause_note, job.failure_streak) == (True, "maintenance", 1)


def _keeping_the_count(store: Store) -> Callable[..., object]:
    """A resume that does not clear the count: the broken variant of the race below."""

    def resume_job(job_id: str, now: Instant, *, until: Instant | None = None) -> object:
        before = store.get_job(job_id)
        result = Store.resume_job(store, job_id, now, until=until)
        assert before is not None
        with store.engine.begin() as conn:
            conn.execute(
                update(jobs_table).where(jobs_table.c.job_id == job_id).values(failure_streak=before.failure_streak)
            )
        return result

    return resume_job


@pytest.mark.parametrize(
    "broken",
    [
        False,
        pytest.param(
            True,
            id="broken-resume-keeps-the-count",
            marks=pytest.mark.xfail(strict=True, raises=AssertionError, reason="paused by failures from before"),
        ),
    ],
    ids=["correct", "broken"],
)
def test_a_resume_before_the_nth_failure_is_recorded_is_never_undone(
    make_scheduler: SchedulerFactory, clock: FakeClock, broken: bool
) -> None:
    sched = started(make_scheduler, clock)
    store = store_of(sched)
    resume: dict[str, Any] = {"side_effect": _keeping_the_count(store)} if broken else {"wraps": store.resume_job}
    with patch_store(sched, "resume_job", **resume):
        sched.schedule("a", jobs.fail_then_block, EVERY, args=("a",), start_in=0, pause_after_failures=2)
        wait_until(lambda: stored_job(sched, "a").failure_streak == 1, message="the first failure")
        clock.advance(EVERY)
        gate = jobs.gate("a")
        assert gate.started.wait(TIMEOUT)  # the second run is in flight; it will fail
        assert sched.pause("a", note="looking into it")
        assert sched.resume("a")  # the operator is done: the count starts again
        gate.release.set()
        wait_until(lambda: stored_job(sched, "a").run_count == 2, message="the second failure recorded")
    job = stored_job(sched, "a")
    assert (job.paused, job.pause_note, job.failure_streak, job.last_outcome) == (False, None, 1, "error")


def test_a_failure_recorded_while_an_operator_paused_the_job_leaves_that_pause_alone(
    make_scheduler: SchedulerFactory, clock: FakeClock
) -> None:
    sched = started(make_scheduler, clock)
    sched.schedule("a", jobs.fail_then_block, EVERY, args=("a",), start_in=0, pause_after_failures=2)
    wait_until(lambda: stored_job(sched, "a").failure_streak == 1, message="the first failure")
    clock.advance(EVERY)
    gate = jobs.gate("a")
    assert gate.started.wait(TIMEOUT)
    assert sched.pause("a", note="looking into it")
    gate.release.set()
    wait_until(lambda: stored_job(sched, "a").run_count == 2, message="the second failure recorded")
    job = stored_job(sched, "a")
    assert (job.paused, job.pause_note, job.failure_streak) == (True, "looking into it", 2)
    assert sched.resume("a")
    job = stored_job(sched, "a")
    assert (job.paused, job.pause_note, job.failure_streak) == (False, None, 0)


BAD_VALUES: Final = [0, -1, -(2**70), 1.5, 3.0, float("nan"), float("inf"), True, False, "3", [3], 2**31, 10**30]


@pytest.mark.parametrize("value", BAD_VALUES, ids=repr)
def test_bad_values_are_refused_by_name_and_write_nothing(make_scheduler: SchedulerFactory, value: object) -> None:
    sched = make_scheduler()
    with pytest.raises(InvalidJobError, match="pause_after_failures") as raised:
        sched.schedule("a", jobs.record, EVERY, args=("a",), pause_after_failures=value)  # type: ignore[arg-type]  # bad on purpose
    assert raised.value.argument == "pause_after_failures"
    with pytest.raises(InvalidJobError, match="pause_after_failures"):
        sched.declare([JobSpec("b", jobs.record, EVERY, args=("b",), pause_after_failures=value)])
    assert sched.jobs() == []


def test_the_bounds_are_accepted(make_scheduler: SchedulerFactory) -> None:
    sched = make_scheduler()
    assert sched.schedule("one", jobs.record, EVERY, args=("one",), pause_after_failures=1).pause_after_failures == 1
    most = 2**31 - 1
    assert (
        sched.schedule("most", jobs.record, EVERY, args=("most",), pause_after_failures=most).pause_after_failures
        == most
    )


def test_two_threads_never_double_the_warning(
    make_scheduler: SchedulerFactory, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Two jobs that reach their count in the same cycle: one WARNING and one event each."""
    sched = started(make_scheduler, clock)
    events = _paused_events(sched)
    with caplog.at_level(logging.WARNING, logger="persched"):
        for job_id in ("a", "b"):
            sched.schedule(job_id, jobs.fail, EVERY, args=(job_id, "down"), start_in=0, pause_after_failures=1)
        wait_until(lambda: len(events) == 2, message="both paused")
    assert sorted(e.job_id for e in events) == ["a", "b"]
    assert len(_pause_warnings(caplog)) == 2
