"""The heartbeat thread's periodic tasks, one round at a time, with no thread (persched._engine.heartbeat).

Each task is called as the thread calls it (`run_round(task, now)`), on a FakeClock at an odd
instant, against a stub of the few store methods it uses.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Final, cast

import pytest

from persched._engine.change_pickup import QUIET_CHECK, ChangePickup
from persched._engine.heartbeat import StartupSweep, run_round
from persched._engine.pause_ends import PauseEnds
from persched._engine.periodic import AT_ONCE, NEVER, Every
from persched._engine.timebase import Timebase
from persched._model.instant import Instant, Micros
from persched.errors import StoreError
from persched.testing import FakeClock

if TYPE_CHECKING:
    from persched._engine.membership import Membership
    from persched._engine.pickup import CommitWatch
    from persched._store import Store

SECOND: Final = 1_000_000
PERIOD: Final = Micros(10 * SECOND)
CHECK: Final = Micros(SECOND // 10)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(start=1_700_000_123.456789)


def _store(**methods: Any) -> Store:  # noqa: ANN401 - stub methods of any signature
    return cast("Store", SimpleNamespace(**methods))


def test_a_failing_round_is_logged_and_the_next_one_stays_due_a_period_on(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    failures: list[BaseException] = [StoreError("db", "the database went away"), ZeroDivisionError("a bug")]

    def action() -> None:
        raise failures.pop(0)

    task = Every("renewing membership", PERIOD, action)
    assert task.due == AT_ONCE  # the first round comes as soon as the thread starts
    now = clock.monotonic_us()
    with caplog.at_level(logging.WARNING, logger="persched"):
        run_round(task, now)
        run_round(task, now + PERIOD)
    assert task.due == now + 2 * PERIOD
    assert task.rounds == 2
    warning, error = caplog.records
    assert (warning.levelno, warning.getMessage()) == (
        logging.WARNING,
        "renewing membership failed, will retry: db: the database went away",
    )
    assert error.levelno == logging.ERROR
    assert error.getMessage().startswith("renewing membership failed, will retry\n")
    assert "ZeroDivisionError: a bug" in error.getMessage()


def test_the_sweep_runs_batch_after_batch_retries_a_period_later_and_then_is_done(clock: FakeClock) -> None:
    answers: list[bool | Exception] = [True, StoreError("db", "locked"), False]

    def sweep() -> bool:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    task = StartupSweep(sweep, clock, retry=PERIOD)
    now = clock.monotonic_us()
    run_round(task, now)
    assert task.due == now  # rows are left: the next batch at once
    run_round(task, now)
    assert task.due == now + PERIOD  # failed: tried again a period later
    clock.advance(10.0)
    run_round(task, clock.monotonic_us())
    assert task.due == NEVER


class _Watch:
    """SQLite's commit check, answering from a list."""

    def __init__(self, answers: list[bool]) -> None:
        self.answers = answers

    def changed(self) -> bool:
        return self.answers.pop(0)


def _pickup(clock: FakeClock, watch: _Watch, reads: list[int]) -> ChangePickup:
    def change_seq() -> int:
        reads.append(clock.monotonic_us())
        return 0  # nothing changed: the pick-up reads the counter and stops there

    membership = cast("Membership", SimpleNamespace())
    task = ChangePickup(
        _store(change_seq=change_seq),
        Timebase(clock),
        lambda *entry: None,
        membership,
        lambda shared: None,
        lambda: None,
        pickup=Micros(SECOND),
        pickup_check=CHECK,
    )
    task._watch = cast("CommitWatch", watch)  # what start() makes on SQLite
    task._next_check = AT_ONCE
    return task


def _run_due(task: ChangePickup, clock: FakeClock) -> int:
    """Move the clock to the task's due instant and run it there, as the thread would; return the wait."""
    waited = max(0, task.due - clock.monotonic_us())
    clock.advance(waited / SECOND)
    run_round(task, clock.monotonic_us())
    return waited


def test_the_commit_check_backs_off_while_quiet_and_a_commit_brings_it_back(clock: FakeClock) -> None:
    reads: list[int] = []
    quiet = [False] * 6
    task = _pickup(clock, _Watch([True, *quiet, True, False]), reads)
    start = clock.monotonic_us()
    run_round(task, start)  # a first look sees a "change": the counter is read at once
    assert reads == [start]
    # Quiet: each wait doubles (0.2 s, 0.4 s, 0.8 s), then the check keeps to the poll's second.
    waits = [_run_due(task, clock) for _ in quiet]
    assert waits[:4] == [CHECK, 2 * CHECK, 4 * CHECK, 8 * CHECK - 5 * CHECK]
    assert max(waits) <= QUIET_CHECK
    polls = len(reads)
    _run_due(task, clock)  # a commit: read the counter, and check every 0.1 s again
    assert len(reads) == polls + 1
    assert _run_due(task, clock) == CHECK


def test_a_requested_pickup_waits_for_pickup_check_after_the_last_one(clock: FakeClock) -> None:
    reads: list[int] = []
    task = _pickup(clock, _Watch([False] * 10), reads)
    start = clock.monotonic_us()
    run_round(task, start)
    task.request()  # a NOTIFY just after a pick-up: at most one pick-up per pickup_check
    assert task.due == start + CHECK
    _run_due(task, clock)
    assert reads == [start, start + CHECK]
    assert not task.owed


class _Pauses:
    """The store's timed pauses: ends in a list, resume failing while `failing`."""

    def __init__(self, ends: list[Instant]) -> None:
        self.ends = ends
        self.failing = False
        self.reads = 0

    def pause_ends(self, now: Instant | None) -> list[tuple[str, Instant]]:
        self.reads += 1
        if now is not None and self.failing:
            raise StoreError("db", "locked")
        return [(f"j{i}", end) for i, end in enumerate(self.ends) if now is None or end <= now]

    def resume_job(self, job_id: str, at: Instant, *, until: Instant) -> tuple[int, None]:
        self.ends.remove(until)
        return 1, None  # generation 1, nothing to queue


def test_a_pause_end_is_due_at_its_instant_and_a_failed_resume_is_retried_later(
    clock: FakeClock,
) -> None:
    timebase = Timebase(clock)
    pauses = _Pauses([Instant(timebase.now() + 3 * SECOND + 7)])
    task = PauseEnds(
        _store(pause_ends=pauses.pause_ends, resume_job=pauses.resume_job),
        timebase,
        lambda *entry: None,
        lambda job_id, generation: None,
        period=PERIOD,
    )
    start = clock.monotonic_us()
    run_round(task, start)
    assert task.due == start + 3 * SECOND + 7  # to the microsecond
    pauses.failing = True
    clock.advance(3.000007)
    run_round(task, clock.monotonic_us())
    assert task.due == start + PERIOD  # not at once again: the next read, which retries the resume
    assert pauses.ends, "not resumed"
    pauses.failing = False
    reads = pauses.reads
    task.reread()  # a pause with an end was made here: read at the next look, not a period later
    assert task.due == AT_ONCE
    run_round(task, clock.monotonic_us())
    assert pauses.reads > reads
    assert pauses.ends == []  # resumed
    assert task.due == start + PERIOD  # the periodic read comes next
