"""Change pick-up: a change made through another scheduler's store is picked up at the
next signal (SQLite's data_version check, PostgreSQL's NOTIFY), well before the counter's poll, and
by the poll alone where no signal arrives (lost, or MariaDB, which has none).

Every scheduler here runs on one FakeClock whose poll (`pickup_seconds`) is far away, so a pick-up
before the poll can only come from a signal. The second scheduler is never started: it writes the
store through an engine of its own, like another process or the command line.
"""

from __future__ import annotations

import itertools
import logging
import sqlite3
import threading
from datetime import timedelta
from typing import TYPE_CHECKING, Final
from unittest.mock import patch

import pytest

from persched._engine.heartbeat import Heartbeat
from persched._engine.pickup import CommitWatch
from persched._store.dialects.postgresql import PostgreSQLDialect
from persched._store.dialects.sqlite import SQLiteDialect
from persched.testing import FakeClock
from tests.support import jobs
from tests.support.engines import engine_params
from tests.support.helpers import TIMEOUT, heartbeat_settled

if TYPE_CHECKING:
    from persched import JobScheduler
    from tests.conftest import SchedulerFactory

POLL: Final = 600.0  # fake seconds: the counter's poll never comes unless a test advances this far
CHECK: Final = 0.25  # fake seconds: pickup_check_seconds
ODD_INSTANT: Final = 1_700_000_123.4567

with_signal = pytest.mark.parametrize("engine_name", engine_params("sqlite", "postgres"), indirect=True)
every_engine = pytest.mark.parametrize("engine_name", engine_params(), indirect=True)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(start=ODD_INSTANT)


def _pair(make_scheduler: SchedulerFactory, clock: FakeClock) -> tuple[JobScheduler, JobScheduler]:
    """A running scheduler and a second one, never started, on the same database."""
    running = make_scheduler(clock=clock, start=True, pickup_seconds=POLL, pickup_check_seconds=CHECK)
    heartbeat_settled(running, clock)  # or its first round, not a signal, may find the writer's change
    writer = make_scheduler(clock=clock, pickup_seconds=POLL, pickup_check_seconds=CHECK)
    return running, writer


def _ran(key: str, timeout: float = TIMEOUT) -> bool:
    started = jobs.gate(key).started.wait(timeout)
    jobs.gate(key).release.set()
    return started


def _signals_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    """No signal reaches the heartbeat: SQLite's check never sees a commit, PostgreSQL notifies nothing,
    and the listener's wake-up after it connected goes nowhere either."""
    monkeypatch.setattr(CommitWatch, "changed", lambda self: False)
    monkeypatch.setattr(PostgreSQLDialect, "announce_change", lambda self, conn: None)
    monkeypatch.setattr(Heartbeat, "request_pickup", lambda self: None)


@with_signal
@pytest.mark.parametrize(
    "signals",
    [
        "kept",
        pytest.param("lost", marks=pytest.mark.xfail(strict=True, raises=AssertionError, reason="waits for the poll")),
    ],
)
def test_a_change_made_elsewhere_is_picked_up_at_the_next_signal_not_the_poll(
    make_scheduler: SchedulerFactory, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, signals: str
) -> None:
    if signals == "lost":
        _signals_lost(monkeypatch)
    _, writer = _pair(make_scheduler, clock)
    writer.schedule("x", jobs.block, 3600.0, args=("x",), start_in=0)
    clock.advance(CHECK)  # one check, far from the poll
    # Without signals it never runs: a short wait proves that (with them it runs within milliseconds).
    assert _ran("x", TIMEOUT if signals == "kept" else 1.0), "the change was not picked up before the poll"


@every_engine
def test_without_signals_the_poll_still_picks_changes_up(
    make_scheduler: SchedulerFactory, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    _signals_lost(monkeypatch)
    _, writer = _pair(make_scheduler, clock)
    writer.schedule("x", jobs.block, 3600.0, args=("x",), start_in=0)
    clock.advance(POLL)
    assert _ran("x"), "the poll did not pick the change up"


@with_signal
def test_a_replacement_made_elsewhere_is_picked_up_at_the_next_signal(
    make_scheduler: SchedulerFactory, clock: FakeClock
) -> None:
    running, writer = _pair(make_scheduler, clock)
    running.schedule("x", jobs.record, 10.0, args=("x",))
    writer.schedule("x", jobs.block, 10.0, args=("x",))  # replaced elsewhere: a new generation
    clock.advance(CHECK)
    clock.advance(10.0 - CHECK)
    assert _ran("x"), "the new definition did not run (the old one's claim fails)"
    assert jobs.calls("x")[0].generation == 2


def test_a_failing_commit_check_reads_the_counter_instead_and_says_so_once(
    make_scheduler: SchedulerFactory,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(self: SQLiteDialect, raw: object) -> int:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(SQLiteDialect, "data_version", broken)
    with caplog.at_level(logging.WARNING, logger="persched"):
        _, writer = _pair(make_scheduler, clock)
        clock.advance(CHECK)
        writer.schedule("x", jobs.block, 3600.0, args=("x",), start_in=0)
        clock.advance(CHECK)
        assert _ran("x"), "the change was not picked up at the next check"
    failures = [r for r in caplog.records if "checking for commits by other connections failed" in r.message]
    assert len(failures) == 1


class _Steps:
    """Moves `clock` in fine steps and, after each, waits until `sched`'s heartbeat waits on the
    clock at the new instant (it has acted on the step: a wait that began before the step, after
    FakeClock's real-time bound ran out, does not count); records the fake monotonic instant of
    each commit check."""

    STEP: Final = 0.1

    def __init__(self, sched: JobScheduler, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
        self.clock = clock
        self.checks: list[int] = []
        self._waited_at = 0  # fake monotonic µs of the heartbeat's latest wait
        self._cond = sched._heartbeat._cond
        self._seen = threading.Condition()
        real_wait, real_version = FakeClock.wait, SQLiteDialect.data_version

        def wait(clock_self: FakeClock, cond: threading.Condition, timeout: float | None) -> None:
            if cond is self._cond:
                with self._seen:
                    self._waited_at = clock_self.monotonic_us()
                    self._seen.notify_all()
            real_wait(clock_self, cond, timeout)

        def data_version(dialect: SQLiteDialect, raw: object) -> int:
            self.checks.append(clock.monotonic_us())
            return real_version(dialect, raw)  # type: ignore[arg-type]  # a sqlite3 connection

        monkeypatch.setattr(FakeClock, "wait", wait)
        monkeypatch.setattr(SQLiteDialect, "data_version", data_version)

    def run(self, seconds: float) -> None:
        for _ in range(round(seconds / self.STEP)):
            self._step()

    def _step(self) -> None:
        self.clock.advance(self.STEP)
        now = self.clock.monotonic_us()
        with self._seen:
            assert self._seen.wait_for(lambda: self._waited_at >= now, TIMEOUT), "the heartbeat did not wait again"

    def gaps(self) -> list[float]:
        """Fake seconds between successive checks."""
        return [round((b - a) / 1e6, 6) for a, b in itertools.pairwise(self.checks)]


def test_a_quiet_database_is_checked_less_and_less_often_down_to_once_a_second_then_at_once_after_a_commit(
    make_scheduler: SchedulerFactory,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Idle CPU: each check that finds no commit doubles the wait (0.1 s, 0.2, 0.4, 0.8,
    then every 1 s); a change made elsewhere is picked up at the next of those checks, and the
    check is back at `pickup_check_seconds` right after it."""
    running = make_scheduler(clock=clock, start=True, pickup_seconds=POLL, pickup_check_seconds=0.1)
    heartbeat_settled(running, clock)
    steps = _Steps(running, clock, monkeypatch)
    writer = make_scheduler(clock=clock, pickup_seconds=POLL, pickup_check_seconds=0.1)
    writer.schedule("warm", jobs.record, 3600.0, args=("warm",))  # the writer's own first commits
    steps.run(0.1)
    steps.checks.clear()
    steps.run(4.0)
    assert steps.gaps() == [0.2, 0.4, 0.8, 1.0, 1.0]
    steps.checks.clear()
    with caplog.at_level(logging.INFO, logger="persched"):
        writer.schedule("x", jobs.record, 3600.0, args=("x",))  # not due: no claim commits after it
        steps.run(1.0)  # the next check comes within a second of a quiet spell
    assert "picked up a change made elsewhere: x" in caplog.text, "the change was not picked up at the next check"
    seen = steps.checks[0]
    steps.run(0.5)
    assert [round((b - seen) / 1e6, 6) for b in steps.checks[1:3]] == [0.1, 0.3], "not back at pickup_check_seconds"


@every_engine
def test_a_pickup_held_between_reading_the_time_and_the_rows_does_not_move_a_finished_job_back(
    make_scheduler: SchedulerFactory, clock: FakeClock
) -> None:
    """A pick-up reads the time, then the changed rows. Held in between for over a minute (a
    suspended process) while this instance's run outlasts two slots and ends, it finds the row that
    run's end moved on: written by this clock, not by one that was ahead, so it stays where it is,
    and the slots that passed while the run was in flight never run (docs/reference/behaviour.md,
    "Runs of one job never overlap")."""
    sched = make_scheduler(clock=clock, heartbeat_seconds=1.0, start=True)
    sched._heartbeat.stop()  # the test runs the pick-up round itself
    sched._heartbeat.join(TIMEOUT)
    gate = jobs.gate("ov")
    sched.schedule("ov", jobs.block_then_fail, 60.0, args=("ov",), start_in=0, overlap="skip")
    assert gate.started.wait(TIMEOUT)
    [running] = sched.runs("ov")
    slot = running.scheduled_for
    # A change made elsewhere (a pick-up reads nothing for this scheduler's own): the pick-up reads
    # every row changed since its last look, the run's job's too.
    make_scheduler(clock=clock).schedule("elsewhere", jobs.record, 3600.0)
    store = sched._store
    read_changes = store.changes_since
    held, go = threading.Event(), threading.Event()

    def held_pickup(*args: object) -> object:
        held.set()
        assert go.wait(TIMEOUT)
        return read_changes(*args)  # type: ignore[arg-type]

    with patch.object(store, "changes_since", side_effect=held_pickup):
        pickup = threading.Thread(target=sched._heartbeat.pickup.round, name="held-pickup")
        pickup.start()
        assert held.wait(TIMEOUT), "the pick-up found no change to read"
        clock.advance(130)  # the slots +60 and +120 pass while the run is in flight
        gate.release.set()
        assert sched.wait_idle(TIMEOUT)  # its end is recorded: the job waits for +180
        go.set()
        pickup.join(TIMEOUT)
    assert not pickup.is_alive()
    assert sched.wait_idle(TIMEOUT)
    runs = [(r.attempt, r.outcome, r.scheduled_for) for r in sched.runs("ov") if r.outcome != "missed"]
    assert runs == [(1, "error", slot)]
    job = sched.get_job("ov")
    assert job is not None
    assert job.next_run_at == slot + timedelta(seconds=180)


@every_engine
def test_a_pickup_reads_no_rows_for_this_schedulers_own_changes(
    make_scheduler: SchedulerFactory, clock: FakeClock
) -> None:
    """The pick-up is for changes made elsewhere: this scheduler's own schedule() and deschedule()
    queued and announced theirs, so after only those a pick-up reads the counter and stops; a
    change made elsewhere is read as before."""
    sched = make_scheduler(clock=clock, start=True)
    sched._heartbeat.stop()  # the test runs the pick-up round itself
    sched._heartbeat.join(TIMEOUT)
    pickup, store = sched._heartbeat.pickup, sched._store
    sched.schedule("mine", jobs.record, 3600.0, args=("mine",))
    sched.deschedule("mine")
    with patch.object(store, "changes_since", wraps=store.changes_since) as read:
        pickup.round()
        assert read.call_count == 0
        make_scheduler(clock=clock).schedule("elsewhere", jobs.record, 3600.0, args=("elsewhere",))
        pickup.round()
        assert read.call_count == 1
