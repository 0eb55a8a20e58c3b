"""Shared helpers for the black-box tests: bounded waiting, fixed times, raw SQL.

Every blocking call in the tests is bounded by `TIMEOUT` real seconds. Polling
for an assertion (`wait_until`) is fine; sleeping in the hope of an
interleaving is not. `sql` reads and writes the SQLite file itself (plain
``sqlite3``); `db_sql` does the same on any engine, for the tests that run on
every engine.
"""

from __future__ import annotations

import gc
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from typing import TYPE_CHECKING, Any, Final

from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from persched import _realtime
from persched._model.instant import Instant, micros, to_datetime

if TYPE_CHECKING:
    import threading
    from collections.abc import Callable
    from datetime import datetime
    from types import CodeType, FrameType

    from persched import JobScheduler, Run
    from persched.testing import FakeClock

__all__ = [
    "EPOCH",
    "START_TIMEOUT",
    "TIMEOUT",
    "at",
    "at_us",
    "db_sql",
    "finished_runs",
    "heartbeat_settled",
    "sql",
    "sqlite_path",
    "stop_gracefully",
    "thread_runs",
    "wait_finished",
    "wait_started",
    "wait_until",
]

TIMEOUT: Final = 10.0  # real seconds; the bound of every blocking call in the tests
# Real seconds for a child process to import persched, migrate and reach its first sign of life: on
# 2 cores that other work keeps busy (load 10-15) an import alone may take most of TIMEOUT.
START_TIMEOUT: Final = 3 * TIMEOUT
POLL: Final = 0.02  # real seconds: the longest pause between two checks of a predicate
EPOCH: Final = 1_800_000_000.0  # FakeClock start: 2027-01-15T08:00:00Z, a round number


def at_us(offset: float) -> Instant:
    """Return the instant `offset` seconds after `EPOCH` (exact, whole microseconds)."""
    return Instant(micros(EPOCH) + micros(offset))


def at(offset: float) -> datetime:
    """Return the aware UTC datetime `offset` seconds after `EPOCH` (exact)."""
    return to_datetime(at_us(offset))


def stop_gracefully(proc: subprocess.Popen[Any], what: str, output: Callable[[], str]) -> int:
    """SIGTERM to `proc` (a graceful stop) and its exit status; if it has not stopped after
    3 x TIMEOUT, it is killed and an AssertionError names `what`, with its `output`."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(3 * TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(TIMEOUT)
        raise AssertionError(f"{what} did not stop on SIGTERM:\n{output()}") from None


def heartbeat_settled(sched: JobScheduler, clock: FakeClock) -> None:
    """Wait until `sched`'s heartbeat waits on `clock`: its first round, which picks up at once
    whatever changed since start(), is over, so a later change is found only by a signal or a poll."""
    wait_until(lambda: sched._heartbeat._cond in clock._conds, message="the heartbeat waits on the clock")


def thread_runs(thread: threading.Thread, code: CodeType) -> bool:
    """`thread` is running `code` right now (anywhere on its stack): it waits there, say."""
    frame = current_frames().get(thread.ident or 0)
    while frame is not None:
        if frame.f_code is code:
            return True
        frame = frame.f_back
    return False


def current_frames() -> dict[int, FrameType]:
    """`sys._current_frames()` with the garbage collector held off while it runs.

    Before 3.11.9 it can deadlock the interpreter: it takes the runtime's
    thread-list lock, and a collection that runs inside it (a frame object is
    allocated) may wait for the GIL that a thread waiting on that lock holds.
    Holding the collector off is how CPython itself fixed it.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        return sys._current_frames()
    finally:
        if enabled:
            gc.enable()


def wait_until(predicate: Callable[[], bool], timeout: float = TIMEOUT, message: str = "") -> None:
    """Poll `predicate` until it is true; fail after `timeout` real seconds (also in frozen time).

    The first looks come 1 ms apart, then the pause doubles up to `POLL`: what is
    quick is seen at once, and a long wait does not spend the CPU the scheduler
    under test needs (a predicate often reads the database).
    """
    deadline = _realtime.monotonic() + timeout
    pause = 0.001
    while not predicate():
        if _realtime.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for: {message}")
        time.sleep(pause)
        pause = min(pause * 2, POLL)


def wait_started(proc: subprocess.Popen[Any], ready: Callable[[], bool], what: str, output: Callable[[], str]) -> None:
    """Wait until the child `proc` is `ready` (a marker, a line); fail with its `output` if it ended first.

    Bounded by `START_TIMEOUT`: the wait ends as soon as the child exits, so
    the long bound costs nothing but the time a starved start-up needs.
    """
    wait_until(lambda: ready() or proc.poll() is not None, timeout=START_TIMEOUT, message=what)
    assert proc.poll() is None, f"{what}: the child exited ({proc.returncode}) first:\n{output()}"


def finished_runs(sched: JobScheduler, job_id: str) -> list[Run]:
    """Return the runs of `job_id` that have an outcome, newest first."""
    return [r for r in sched.runs(job_id, limit=10_000) if r.outcome is not None]


def wait_finished(sched: JobScheduler, job_id: str, n: int) -> list[Run]:
    """Wait until `job_id` has at least `n` finished runs; return them, newest first."""
    wait_until(lambda: len(finished_runs(sched, job_id)) >= n, message=f"{n} runs of {job_id}")
    return finished_runs(sched, job_id)


def sqlite_path(url: str) -> str:
    """Return the file path of a ``sqlite:///path`` URL."""
    prefix = "sqlite:///"
    assert url.startswith(prefix), url
    return url[len(prefix) :]


def sql(url: str, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Run one statement on the SQLite file behind `url` and commit; return its rows."""
    with closing(sqlite3.connect(sqlite_path(url), timeout=TIMEOUT)) as conn:
        rows = conn.execute(statement, params).fetchall()
        conn.commit()
        return rows


def db_sql(url: str, statement: str, **params: object) -> list[tuple[Any, ...]]:
    """Run one statement (``:name`` parameters) on the database behind `url`, any engine; commit; return its rows."""
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            result = conn.execute(text(statement), params)
            return [tuple(row) for row in result] if result.returns_rows else []
    finally:
        engine.dispose()
