"""Change pick-up (SPEC-multi): a change made through another scheduler's store is picked up at the
next signal (SQLite's data_version check, PostgreSQL's NOTIFY), well before the counter's poll, and
by the poll alone where no signal arrives (lost, or MariaDB, which has none).

Every scheduler here runs on one FakeClock whose poll (`pickup_seconds`) is far away, so a pick-up
before the poll can only come from a signal. The second scheduler is never started: it writes the
store through an engine of its own, like another process or the command line.
"""

from __future__ import annotations

import logging
import sqlite3
from typing import TYPE_CHECKING, Final

import pytest

from persched._heartbeat import Heartbeat
from persched._pickup import CommitWatch
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

with_signal = pytest.mark.parametrize(
    "engine_name", [p for p in engine_params() if p.values[0] in ("sqlite", "postgres")], indirect=True
)
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


def _ran(key: str) -> bool:
    started = jobs.gate(key).started.wait(TIMEOUT)
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
    assert _ran("x"), "the change was not picked up before the poll"


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
