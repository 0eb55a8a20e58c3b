"""Disk full: SQLite's ``PRAGMA max_page_count`` pinned low on every connection of the scheduler.

The scheduler is built, then an engine ``connect`` listener sets
``max_page_count`` from `Limit` and the pool is disposed, so every connection
the store makes from then on is capped (a real SQLITE_FULL, not a mock). The
store frees no pages by itself, so what happens is:

1. ``schedule()`` of new jobs (INSERTs) fills the file; the call that does not
   fit raises `StoreError` ("database or disk is full"), writes nothing, and
   nothing else is raised.
2. The jobs already scheduled keep running while their run rows still fit in
   free space of existing pages; once they do not, each claim (an UPDATE plus
   an INSERT of the run row, one transaction) is rolled back whole: the
   dispatcher logs a warning and retries, nothing runs that was not claimed,
   no thread dies, no row is left 'running' without its open run.
3. Raising ``max_page_count`` again (new connections) recovers everything: the
   jobs run on, the refused schedule() succeeds when retried.

At the end: ``PRAGMA integrity_check`` is ok, no row 'running', no run open,
every schedule that returned is there exactly once with its generation, and
the history checker (FakeClock frame, all rules) accepts the history.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from contextlib import closing
from typing import TYPE_CHECKING, Final

from sqlalchemy import event

from persched import JobScheduler
from persched.errors import StoreError
from persched.testing import FakeClock
from tests.support import proof_jobs
from tests.support.helpers import EPOCH, TIMEOUT, sql, sqlite_path, wait_until
from tests.support.history import History, assert_consistent, runs_from_db
from tests.support.seams import store_of

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    import pytest
    from sqlalchemy.engine.interfaces import DBAPIConnection
    from sqlalchemy.pool import ConnectionPoolEntry

TARGET: Final = "tests.support.proof_jobs:tracked"
PAD: Final = "x" * 900  # arguments that make each new job row take real room
MAX_SCHEDULES: Final = 10_000  # bound of the fill loop
MAX_TICKS: Final = 2_000  # bound of the clock steps until the claims hit the full file
FULL: Final = "database or disk is full"


class Limit:
    """The ``max_page_count`` new connections get (0: SQLite's default)."""

    def __init__(self, sched: JobScheduler) -> None:
        self.pages = 0
        self._engine = store_of(sched).engine
        event.listen(self._engine, "connect", self._on_connect)

    def _on_connect(self, dbapi_conn: DBAPIConnection, record: ConnectionPoolEntry) -> None:
        if self.pages:
            cursor = dbapi_conn.cursor()
            try:
                cursor.execute(f"PRAGMA max_page_count = {self.pages}")
            finally:
                cursor.close()

    def set(self, pages: int) -> None:
        """Cap (or uncap, 0) every connection made from now on; drop the pooled ones."""
        self.pages = pages
        self._engine.dispose()


def _page_count(path: str) -> int:
    with closing(sqlite3.connect(path, timeout=TIMEOUT)) as conn:
        return int(conn.execute("PRAGMA page_count").fetchone()[0])


def test_disk_full_refuses_schedules_pauses_claims_and_recovers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="persched")
    url = f"sqlite:///{tmp_path / 'full.db'}"
    path = sqlite_path(url)
    clock = FakeClock(start=EPOCH)
    history = History(now=clock.monotonic)
    key = f"disk-full-{id(history)}"
    proof_jobs.register(key, history)
    sched = JobScheduler(url, workers=2, clock=clock, keep_runs=None, lease_seconds=30.0)
    limit = Limit(sched)
    limit.set(0)  # from here on every connection goes through the listener
    scheduled: dict[str, int] = {}

    def schedule(job_id: str, interval: float, *args: str) -> None:
        generation = history.schedule(lambda: sched.schedule(job_id, TARGET, interval, args=(key, *args)), job_id)
        assert generation is not None
        scheduled[job_id] = generation

    def ok_runs(job_id: str) -> int:
        return int(sql(url, "SELECT count(*) FROM persched_runs WHERE job_id=? AND outcome='ok'", (job_id,))[0][0])

    def drive_until(predicate: Callable[[], bool], message: str) -> None:
        def tick() -> bool:
            if predicate():
                return True
            clock.advance(0.5)
            return False

        wait_until(tick, timeout=TIMEOUT, message=message)

    def threads_alive() -> set[str]:
        return {t.name for t in threading.enumerate() if t.name.startswith("persched-")}

    try:
        schedule("a", 1.0)
        schedule("b", 1.0)
        schedule("fill0", 3600.0, PAD)
        sched.start()
        alive = threads_alive()
        drive_until(lambda: ok_runs("a") >= 1 and ok_runs("b") >= 1, "a and b ran")

        # 1. Fill the file with new jobs until schedule() is refused.
        limit.set(_page_count(path))
        refused: StoreError | None = None
        refused_id, fitted = "", 0
        for i in range(1, MAX_SCHEDULES):
            try:
                schedule(f"fill{i}", 3600.0, PAD)
            except StoreError as exc:  # noqa: PERF203 - the loop ends here
                refused, refused_id, fitted = exc, f"fill{i}", i - 1
                break
        assert refused is not None, f"{MAX_SCHEDULES} schedules fitted in a capped file"
        assert FULL in str(refused), refused
        assert sched.get_job(refused_id) is None, "a refused schedule() left a row"
        assert [j.job_id for j in sched.jobs() if j.job_id == "a"] == ["a"]
        # A deschedule only UPDATEs in place: it may still fit; if not, it is a StoreError too.
        deschedule_error: StoreError | None = None
        try:
            removed = history.deschedule(lambda: sched.deschedule("fill0"), "fill0")
        except StoreError as exc:
            deschedule_error, removed = exc, None
        if deschedule_error is None:
            assert removed is True
            del scheduled["fill0"]
        else:
            assert FULL in str(deschedule_error), deschedule_error
        deschedule_while_full = "refused" if deschedule_error else "done"

        # 2. The jobs go on while their run rows fit; then each claim is refused whole and retried.
        drive_until(
            lambda: any("claim failed" in r.getMessage() and FULL in r.getMessage() for r in caplog.records),
            "a claim hits the full file",
        )
        before = {j: ok_runs(j) for j in ("a", "b")}
        print(  # noqa: T201 - what the test found, for the report
            f"disk full: {fitted} more jobs fitted before schedule() was refused; deschedule while full: "
            f"{deschedule_while_full}; runs of a/b before the first refused claim: {before}"
        )
        for _ in range(4):  # while full: no run, no crash
            clock.advance(1.0)
        assert threads_alive() == alive, f"a thread died: {alive - threads_alive()}"
        rows = sql(url, "SELECT job_id, state FROM persched_jobs WHERE state = 'running'")
        open_runs = {r[0] for r in sql(url, "SELECT job_id FROM persched_runs WHERE outcome IS NULL")}
        assert {j for j, _ in rows} <= open_runs, f"a row 'running' without an open run: {rows}"
        bad = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
        assert not bad, [r.getMessage() for r in bad]

        # 3. Room again: everything recovers.
        limit.set(0)
        drive_until(lambda: all(ok_runs(j) >= before[j] + 2 for j in before), "a and b run again")
        schedule(refused_id, 1.0)
        drive_until(lambda: ok_runs(refused_id) >= 1, "the job refused while full runs once scheduled again")
    finally:
        sched.shutdown(wait=True, timeout=TIMEOUT)
        proof_jobs.unregister(key)

    with closing(sqlite3.connect(path, timeout=TIMEOUT)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        jobs = dict(conn.execute("SELECT job_id, generation FROM persched_jobs WHERE state != 'descheduled'"))
        running = conn.execute("SELECT job_id FROM persched_jobs WHERE state = 'running'").fetchall()
        open_runs_left = conn.execute("SELECT run_id FROM persched_runs WHERE outcome IS NULL").fetchall()
    assert jobs == scheduled, "a schedule was lost or duplicated"
    assert running == [], running
    assert open_runs_left == [], open_runs_left
    ops, starts = history.snapshot()
    runs = runs_from_db(path, offset_us=sched._timebase._offset)
    # R1-R3, R5 (liveness was driven above: the fill jobs, due in an hour, never ran on purpose).
    assert_consistent(ops, runs, starts)
