"""The bounded heap (persched._engine.horizon): only jobs due within the horizon are in memory.

Every test runs on a FakeClock at an odd instant, with a horizon of a few seconds, and checks
the runs in the database: jobs beyond the horizon run exactly on their slot when the horizon
gets there, changes made elsewhere and run-now requests reach jobs beyond it, a refill that
races a schedule() or deschedule() neither runs a descheduled job nor loses a new one, and a
start-up with more jobs than one refill reads runs them all on time.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

import pytest

from persched import JobScheduler
from persched._engine import horizon as horizon_module
from persched._engine.dispatcher import Dispatcher
from persched._engine.window import Window
from persched._model.instant import Instant, from_datetime
from persched.errors import InvalidJobError
from persched.testing import FakeClock
from tests.support import jobs
from tests.support.helpers import TIMEOUT, sql, wait_until
from tests.support.seams import store_of

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

START = 1_700_000_123.456789
HORIZON = 5.0  # seconds: small, so that most jobs of a test lie beyond it


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'jobs.db'}"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def schedulers(url: str, clock: FakeClock) -> Iterator[list[JobScheduler]]:
    made: list[JobScheduler] = []
    yield made
    jobs.release_all()
    for sched in reversed(made):
        if sched._lifecycle.state == "running":
            sched.shutdown(wait=True, timeout=TIMEOUT)


def _scheduler(made: list[JobScheduler], url: str, clock: FakeClock, **options: Any) -> JobScheduler:  # noqa: ANN401
    sched = JobScheduler(url, clock=clock, horizon_seconds=HORIZON, **options)
    made.append(sched)
    return sched


def _heap_jobs(sched: JobScheduler) -> set[str]:
    dispatcher = sched._dispatcher
    with dispatcher._cond:
        return {job_id for _, job_id, _ in dispatcher.window._heap}


def _runs(url: str) -> list[tuple[str, int, str, str]]:
    """(job_id, generation, scheduled_for, started_at) of every run, in start order."""
    rows = sql(url, "SELECT job_id, generation, scheduled_for, started_at FROM persched_runs ORDER BY run_id")
    return [(j, g, s, t) for j, g, s, t in rows]


def _advance_to(clock: FakeClock, sched: JobScheduler, seconds: float, step: float = 1.0) -> None:
    """Advance in steps from START to START + seconds, letting the scheduler settle at each."""
    target = START + seconds
    while clock.now() < target - 1e-7:
        clock.advance(min(step, round(target - clock.now(), 6)))
        assert sched.wait_idle(TIMEOUT)


def test_horizon_seconds_is_validated(url: str) -> None:
    for bad in (0, -1, 1.0, float("nan"), True, "5"):
        with pytest.raises(InvalidJobError, match="horizon_seconds"):
            JobScheduler(url, horizon_seconds=bad)  # type: ignore[arg-type]  # deliberately wrong


@pytest.mark.parametrize("before_start", [True, False], ids=["scheduled-before-start", "scheduled-while-running"])
def test_jobs_beyond_the_horizon_run_exactly_on_their_slot(
    url: str, clock: FakeClock, schedulers: list[JobScheduler], before_start: bool
) -> None:
    sched = _scheduler(schedulers, url, clock)
    offsets = {"soon": 3, "next": 8, "later": 17, "far": 40}
    if not before_start:
        sched.start()
    for key, offset in offsets.items():
        sched.schedule(key, jobs.record, 1000, args=(key,), start_in=offset)
    if before_start:
        sched.start()
    assert _heap_jobs(sched) <= {"soon"}  # the others are beyond the horizon: not in memory
    _advance_to(clock, sched, 41)
    runs = _runs(url)
    assert [r[0] for r in runs] == list(offsets)  # each once, in slot order
    for job_id, _, scheduled_for, started_at in runs:
        assert started_at == scheduled_for, f"{job_id} did not start on its slot"
        assert from_datetime(_dt(scheduled_for)) == _at(offsets[job_id])
    assert _heap_jobs(sched) == set()  # next slots are 1000 s away


def test_a_job_moved_elsewhere_from_beyond_to_within_the_horizon_is_picked_up(
    url: str, clock: FakeClock, schedulers: list[JobScheduler]
) -> None:
    sched = _scheduler(schedulers, url, clock, pickup_seconds=0.5)
    sched.schedule("moved", jobs.record, 1000, args=("moved",), start_in=500)
    sched.start()
    assert "moved" not in _heap_jobs(sched)
    other = _scheduler(schedulers, url, clock)  # another instance (never started: it only writes)
    replaced = other.schedule("moved", jobs.record, 999, args=("moved",), start_in=2)
    assert replaced.generation == 2
    clock.advance(1)  # the pick-up is due: the heartbeat queues the job within the horizon
    wait_until(lambda: "moved" in _heap_jobs(sched), message="the change made elsewhere was not picked up")
    _advance_to(clock, sched, 3)
    assert [(j, g, s == t) for j, g, s, t in _runs(url)] == [("moved", 2, True)]


@pytest.mark.parametrize("where", ["here", "elsewhere", "before-start"])
def test_run_now_of_a_job_beyond_the_horizon_runs_promptly(
    url: str, clock: FakeClock, schedulers: list[JobScheduler], where: str
) -> None:
    sched = _scheduler(schedulers, url, clock, pickup_seconds=0.5)
    sched.schedule("far", jobs.record, 1000, args=("far",), start_in=500)
    other = _scheduler(schedulers, url, clock)
    if where == "before-start":
        assert other.run_now("far")
    sched.start()
    if where == "here":
        assert sched.run_now("far")
    elif where == "elsewhere":
        assert other.run_now("far")
        clock.advance(0.5)  # the pick-up (the request is due at once: it runs without waiting for the slot)
    assert sched.wait_idle(TIMEOUT)
    wait_until(lambda: len(jobs.calls("far")) == 1, message="the run-now request did not run")
    assert len(_runs(url)) == 1
    _advance_to(clock, sched, 10)  # nothing else: the job's slot is 500 s away
    assert len(_runs(url)) == 1


class _BlockingRefill:
    """Wraps Store.load_due: the dispatcher's first refill blocks after (or before) its read."""

    def __init__(self, sched: JobScheduler, read_first: bool) -> None:
        self.real = sched._store.load_due
        self.read_first = read_first
        self.calls = 0
        self.blocked = threading.Event()
        self.release = threading.Event()

    def __call__(self, *args: Any) -> Any:  # noqa: ANN401 - as Store.load_due
        self.calls += 1
        if self.calls != 2:  # the first call is start()'s
            return self.real(*args)
        if self.read_first:
            result = self.real(*args)  # the read saw the rows before the changes below committed
            self.blocked.set()
            assert self.release.wait(TIMEOUT)
            return result
        self.blocked.set()
        assert self.release.wait(TIMEOUT)
        return self.real(*args)


def _droppable_beyond_the_cursor(self: Window, due_at: Instant) -> bool:
    """A broken bounded heap: drops every push beyond the cursor, also while a refill reads."""
    return self._cursor is not None and due_at > self._cursor[0]


@pytest.mark.parametrize(
    "read_first",
    [
        True,
        False,
        pytest.param("broken", marks=pytest.mark.xfail(strict=True, raises=AssertionError, reason="a new job is lost")),
    ],
    ids=["refill-reads-first", "changes-commit-first", "broken-drops-pushes-beyond-the-cursor"],
)
def test_a_refill_racing_schedule_and_deschedule_never_runs_the_old_nor_loses_the_new(
    url: str, clock: FakeClock, schedulers: list[JobScheduler], monkeypatch: pytest.MonkeyPatch, read_first: bool | str
) -> None:
    if read_first == "broken":
        monkeypatch.setattr(Window, "_droppable", _droppable_beyond_the_cursor)
    # No pick-up of this process's own changes within the test: it would queue the new job a
    # second later (SQLite's data_version check: 50 ms later) and hide a lost push.
    sched = _scheduler(schedulers, url, clock, pickup_seconds=1000, pickup_check_seconds=1000)
    sched.schedule("old", jobs.record, 1000, args=("old",), start_in=6)  # beyond the first horizon (5 s)
    refill = _BlockingRefill(sched, read_first in (True, "broken"))
    monkeypatch.setattr(sched._store, "load_due", refill)
    sched.start()
    clock.advance(2.5)  # half the horizon left: the dispatcher refills up to 7.5 s
    assert refill.blocked.wait(TIMEOUT)
    assert sched.deschedule("old")
    sched.schedule("new", jobs.record, 1000, args=("new",), start_in=4.5)  # at 7 s: in the refill's window
    refill.release.set()
    _advance_to(clock, sched, 12, step=0.5)
    assert [(j, s == t) for j, _, s, t in _runs(url)] == [("new", True)]


def test_start_up_with_more_jobs_than_one_refill_reads_runs_them_all_on_time(
    url: str, clock: FakeClock, schedulers: list[JobScheduler], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(horizon_module, "REFILL_ROWS", 7)
    monkeypatch.setattr(horizon_module, "SWEEP_ROWS", 4)  # the sweep goes on on the heartbeat thread
    sched = _scheduler(schedulers, url, clock)
    expected: dict[str, float] = {}
    for n in range(12):
        expected[f"tie{n:02}"] = 2  # more jobs at one instant than a refill reads
    for n in range(30):
        expected[f"spread{n:02}"] = 1 + (n * 7) % 20
    for n in range(3):
        expected[f"now{n}"] = 0  # due at once
    for key, offset in expected.items():
        sched.schedule(key, jobs.record, 1000, args=(key,), start_in=offset)
    loaded: list[int] = []
    start = Dispatcher.start

    def counted_start(self: Dispatcher, entries: list[Any], **options: Any) -> None:  # noqa: ANN401
        loaded.append(len(entries))
        start(self, entries, **options)

    # What start-up queued, not the heap later: the dispatcher may have refilled by then.
    monkeypatch.setattr(Dispatcher, "start", counted_start)
    sched.start()
    assert loaded == [7]  # one refill's rows (the sweep queues no run-now here)
    assert sched.wait_idle(TIMEOUT)
    _advance_to(clock, sched, 21)
    runs = _runs(url)
    assert sorted(r[0] for r in runs) == sorted(expected)  # every job, once
    for job_id, _, scheduled_for, started_at in runs:
        assert started_at == scheduled_for, f"{job_id} did not start on its slot"
        assert from_datetime(_dt(scheduled_for)) == _at(expected[job_id])


def test_a_row_ahead_of_the_clock_beyond_the_first_sweep_batch_is_corrected_in_the_background(
    url: str, schedulers: list[JobScheduler], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(horizon_module, "SWEEP_ROWS", 3)
    ahead = FakeClock(START + 3600)
    with JobScheduler(url, clock=ahead) as writer:
        for n in range(10):
            writer.schedule(f"job{n}", jobs.record, 0.5, args=(f"job{n}",))  # job9 sorts last: a later batch
    corrected = FakeClock(START + 20)  # the clock was put right; the process restarted

    def warned() -> list[str]:
        return [r.getMessage() for r in caplog.records if "further ahead than its schedule allows" in r.message]

    with caplog.at_level(logging.WARNING, logger="persched"):
        sched = _scheduler(schedulers, url, corrected)
        sched.start()
        soon = corrected.now() + 1.0  # one interval and a half: the corrected next slot
        wait_until(
            lambda: all(job.next_run_at.timestamp() < soon for job in sched.jobs()),
            message="the background sweep did not correct every row",
        )
        # Each warning is logged after the commit that corrects its row: wait for the last one too.
        wait_until(lambda: len(warned()) >= 10, message="a corrected row was not reported")
    assert len(warned()) == 10
    corrected.advance(0.5)
    assert sched.wait_idle(TIMEOUT)
    assert all(len(jobs.calls(f"job{n}")) == 1 for n in range(10))  # within one interval


def test_the_refill_reads_through_the_state_next_run_at_index(url: str, clock: FakeClock) -> None:
    """SQLite: the refill's query walks the (state, next_run_at) index, never a scan or a sort of the namespace."""
    sched = JobScheduler(url, clock=clock)
    sched.schedule("a", jobs.record, 10, args=("a",))
    statements: list[str] = []
    store = store_of(sched)

    from sqlalchemy import event

    def capture(_conn: Any, _cursor: Any, statement: str, params: Any, _context: Any, _many: bool) -> None:  # noqa: ANN401
        if "ORDER BY persched_jobs.next_run_at" in statement:
            statements.append(statement)
            plan = _cursor.connection.execute("EXPLAIN QUERY PLAN " + statement, params).fetchall()
            statements.append(" | ".join(str(row[-1]) for row in plan))

    event.listen(store.engine, "before_cursor_execute", capture)
    try:
        store.load_due((_instant(START), "a"), _instant(START + 60), 10)
    finally:
        event.remove(store.engine, "before_cursor_execute", capture)
        store.engine.dispose()
    plan = statements[-1]
    assert "USING INDEX ix_persched_jobs_state_next_run_at" in plan, plan
    assert "namespace" not in plan.split("USING INDEX")[1].split("|")[0], plan


def _dt(text: str) -> Any:  # noqa: ANN401 - a datetime
    from datetime import datetime, timezone

    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc)


def _at(offset: float) -> Instant:
    """START + offset, exactly (the FakeClock's instant, whole microseconds)."""
    return Instant(_instant(START) + round(offset * 1_000_000))


def _instant(seconds: float) -> Instant:
    from persched._model.instant import micros

    return Instant(micros(seconds))


def test_two_generations_of_one_job_due_in_one_cycle_do_not_fail_the_batch(
    url: str, clock: FakeClock, schedulers: list[JobScheduler], caplog: pytest.LogCaptureFixture
) -> None:
    """Seen (tests/scheduler/test_policy_races.py, 1 in 9 with the refill-first dispatcher): a stale
    generation's entry and a late duplicate of the live one's in one batch; the claim bounds each
    job_id's slot once, took the stale entry's bound for the live row, and the batch failed on an
    assertion, retried every second with the same entries (the job never ran again)."""
    sched = JobScheduler(url, clock=clock, horizon_seconds=60)  # every entry below is kept
    schedulers.append(sched)
    sched.start()
    old = sched.schedule("p", jobs.record, 30, args=("p",))  # generation 1, due at 30 s
    new = sched.schedule("p", jobs.record, 1, args=("p",), start_in=1)  # generation 2, due at 1 s
    assert new.generation == old.generation + 1
    _advance_to(clock, sched, 1)
    assert len(jobs.calls("p")) == 1  # next slot: 2 s
    sched._dispatcher.offer(_at(1), "p", new.generation)  # a late duplicate (a change picked up late)
    sched._dispatcher.offer(_at(30), "p", old.generation)  # the stale entry
    with caplog.at_level(logging.WARNING, logger="persched"):
        clock.advance(30)  # due together: the duplicate (1 s), the live entry (2 s), the stale one (30 s)
        assert sched.wait_idle(TIMEOUT)
    assert [r.getMessage() for r in caplog.records if "failed" in r.getMessage()] == []
    assert len(jobs.calls("p")) == 2  # the coalesced run of generation 2
