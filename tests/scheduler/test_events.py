"""Events: `JobScheduler.add_listener` / `remove_listener`, delivered on ``persched-events``.

Time comes from the FakeClock; listeners hand events to the test through a
`queue.Queue` read with a timeout, and blocking listeners wait on Events.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import TYPE_CHECKING

import pytest

from persched._engine.events import EVENT_KINDS, Event, EventBus
from persched.errors import InvalidJobError
from tests.support import cli_jobs, jobs
from tests.support.helpers import TIMEOUT, at, sql, wait_until

if TYPE_CHECKING:
    from persched.testing import FakeClock
    from tests.conftest import SchedulerFactory


class Collector:
    """A listener that queues every event it gets."""

    def __init__(self) -> None:
        self.events: queue.Queue[Event] = queue.Queue()
        self.threads: set[str] = set()

    def __call__(self, event: Event) -> None:
        self.threads.add(threading.current_thread().name)
        self.events.put(event)

    def next(self) -> Event:
        return self.events.get(timeout=TIMEOUT)

    def next_of(self, kind: str) -> Event:
        while (event := self.next()).kind != kind:
            pass
        return event


def test_job_events(make_scheduler: SchedulerFactory) -> None:
    sched = make_scheduler(start=True)
    seen = Collector()
    sched.add_listener(seen, kinds=["job_scheduled", "job_replaced", "job_descheduled"])
    sched.schedule("j", jobs.record, 60.0, args=("j",))
    sched.schedule("j", jobs.record, 60.0, args=("j",))  # identical: no event
    sched.schedule("j", jobs.record, 30.0, args=("j",))
    assert sched.deschedule("j")
    assert not sched.deschedule("j")  # nothing to remove: no event
    sched.schedule("j", jobs.record, 30.0, args=("j",))
    got = [seen.next() for _ in range(4)]
    assert [(e.kind, e.job_id, e.generation) for e in got] == [
        ("job_scheduled", "j", 1),
        ("job_replaced", "j", 2),
        ("job_descheduled", "j", 2),
        ("job_scheduled", "j", 3),
    ]
    assert got[0].job is not None
    assert got[0].job.interval_seconds == 60.0
    assert got[1].job is not None
    assert got[1].job.interval_seconds == 30.0
    assert got[0].at == at(0)
    assert seen.threads == {"persched-events"}
    assert seen.events.empty()


def test_events_before_start_are_delivered_and_the_thread_stops(make_scheduler: SchedulerFactory) -> None:
    sched = make_scheduler()
    seen = Collector()
    sched.add_listener(seen)
    sched.schedule("early", jobs.record, 5.0, args=("early",))
    assert seen.next().kind == "job_scheduled"
    sched.shutdown()  # never started: the events thread must still end (conftest checks)


def test_run_events(make_scheduler: SchedulerFactory, fake_clock: FakeClock) -> None:
    sched = make_scheduler(start=True)
    seen = Collector()
    sched.add_listener(seen, kinds=("run_started", "run_finished", "run_failed"))
    sched.schedule("ok", jobs.record, 10.0, args=("ok",), start_in=0)
    started = seen.next()
    finished = seen.next()
    assert (started.kind, finished.kind) == ("run_started", "run_finished")
    assert started.run is not None
    assert finished.run is not None
    assert started.run.outcome is None
    assert started.run.scheduled_for == at(0)
    assert finished.run.run_id == started.run.run_id
    assert finished.run.outcome == "ok"
    assert finished.run.instance_id == sched.instance_id
    assert sched.deschedule("ok")
    sched.schedule("bad", jobs.fail, 10.0, args=("bad", "kaput"), start_in=0)
    failed = seen.next_of("run_failed")
    assert failed.run is not None
    assert failed.run.outcome == "error"
    assert failed.run.error is not None
    assert "RuntimeError: kaput" in failed.run.error
    stored = sched.runs("bad")[0]
    assert stored.error == failed.run.error


def test_kinds_are_checked(make_scheduler: SchedulerFactory) -> None:
    sched = make_scheduler()
    with pytest.raises(InvalidJobError, match="kinds"):
        sched.add_listener(Collector(), kinds=["run_exploded"])  # type: ignore[list-item]  # deliberately wrong
    with pytest.raises(InvalidJobError, match="callback"):
        sched.add_listener(42)  # type: ignore[arg-type]  # deliberately wrong
    assert {
        "job_scheduled",
        "job_replaced",
        "job_descheduled",
        "run_started",
        "run_finished",
        "run_failed",
        "run_stopped",
        "run_lost",
        "job_paused",
        "job_resumed",
        "run_overran",
    } == EVENT_KINDS


def test_a_raising_listener_is_logged_and_ignored(
    make_scheduler: SchedulerFactory, fake_clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    def raising(event: Event) -> None:
        raise RuntimeError(f"listener bug on {event.kind}")

    sched = make_scheduler(start=True)
    seen = Collector()
    sched.add_listener(raising)
    sched.add_listener(seen, kinds=["run_finished"])
    with caplog.at_level(logging.ERROR, logger="persched._engine.events"):
        sched.schedule("j", jobs.record, 1.0, args=("j",), start_in=0)
        for n in range(1, 4):
            if n > 1:
                fake_clock.advance(1.0)
            event = seen.next()
            assert event.run is not None
            assert event.run.outcome == "ok"
        assert len(jobs.calls("j")) == 3
    errors = [r for r in caplog.records if r.name == "persched._engine.events" and r.levelno == logging.ERROR]
    assert errors
    assert "listener bug" in errors[0].getMessage()  # the traceback is in the text (persched._engine.tracebacks)
    assert "Traceback (most recent call last)" in errors[0].getMessage()


def test_a_blocking_listener_does_not_stall_dispatch(make_scheduler: SchedulerFactory, fake_clock: FakeClock) -> None:
    release = threading.Event()
    entered = threading.Event()

    def blocking(event: Event) -> None:
        entered.set()
        release.wait(TIMEOUT)

    sched = make_scheduler(start=True)
    seen = Collector()
    sched.add_listener(blocking, kinds=["run_started"])
    sched.add_listener(seen, kinds=["run_started", "run_finished"])
    try:
        sched.schedule("j", jobs.record, 1.0, args=("j",), start_in=0)
        assert entered.wait(TIMEOUT)
        for n in range(2, 6):
            fake_clock.advance(1.0)
            wait_until(lambda n=n: len(jobs.calls("j")) >= n, message=f"run {n} while a listener blocks")  # type: ignore[misc]  # default-bound loop var
        assert seen.events.empty()  # stuck behind the blocking listener, in order
    finally:
        release.set()
    kinds = [seen.next().kind for _ in range(10)]
    assert kinds == ["run_started", "run_finished"] * 5


def test_remove_listener(make_scheduler: SchedulerFactory) -> None:
    sched = make_scheduler()
    removed = Collector()
    barrier = Collector()
    sched.add_listener(removed)
    sched.add_listener(barrier)
    sched.schedule("a", jobs.record, 5.0, args=("a",))
    assert removed.next().job_id == "a"
    assert sched.remove_listener(removed)
    assert not sched.remove_listener(removed)
    sched.schedule("b", jobs.record, 5.0, args=("b",))
    assert barrier.next().job_id == "a"
    assert barrier.next().job_id == "b"  # delivered in order: `removed` would have had it first
    assert removed.events.empty()


def test_run_lost_event(make_scheduler: SchedulerFactory, fake_clock: FakeClock, sqlite_url: str) -> None:
    sched = make_scheduler(start=True, lease_seconds=3.0, heartbeat_seconds=1.0)
    seen = Collector()
    sched.add_listener(seen, kinds=["run_lost"])
    sched.schedule("ghost", cli_jobs.noop, 60.0, start_in=600)
    # Another instance claimed it and died: its job row is running, its run open.
    sql(sqlite_url, "UPDATE persched_jobs SET state='running', owner='dead' WHERE job_id='ghost'")
    sql(
        sqlite_url,
        "INSERT INTO persched_runs (job_id, generation, scheduled_for, started_at, instance_id, lease_until) "
        "SELECT job_id, generation, next_run_at, next_run_at, 'dead', next_run_at FROM persched_jobs "
        "WHERE job_id='ghost'",
    )

    def lost() -> bool:
        fake_clock.advance(0.5)  # the heartbeat observes the lease standing still, on fake time
        return not seen.events.empty()

    wait_until(lost, message="run_lost event")
    event = seen.next()
    assert (event.kind, event.job_id, event.generation) == ("run_lost", "ghost", 1)
    assert event.run is not None
    assert event.run.outcome == "lost"
    assert event.run.instance_id == "dead"


def test_a_full_queue_drops_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    bus = EventBus(max_pending=2)
    release = threading.Event()
    entered = threading.Event()
    got: list[str] = []

    def blocking(event: Event) -> None:
        entered.set()
        release.wait(TIMEOUT)
        got.append(event.job_id)

    bus.add(blocking)
    try:
        with caplog.at_level(logging.WARNING, logger="persched._engine.events"):
            bus.emit(Event("job_scheduled", "held", 1, at(0)))
            assert entered.wait(TIMEOUT)  # "held" is being delivered; the queue is empty again
            for n in range(5):
                bus.emit(Event("job_scheduled", f"e{n}", 1, at(0)))
        assert bus.dropped == 3
        assert any("dropped" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    finally:
        release.set()
        bus.stop(TIMEOUT)
    assert got == ["held", "e0", "e1"]
