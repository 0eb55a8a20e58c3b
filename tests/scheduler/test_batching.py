"""The dispatcher gathers a batch while behind (persched._engine.dispatcher "Gathering a batch"), waits
for one while it shares the work ("Waiting for a batch while keeping up"), and searches again at once
after a search that filled every worker ("Sharing the work").

The dispatcher is driven directly: a stand-in run book records what each cycle
was given and hands every claimed entry to a "worker" that the test plays,
completing runs with `Dispatcher.complete` when it chooses.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any, cast

import pytest

from persched._engine.dispatcher import SEARCH_EVERY, Dispatcher
from persched._engine.runs import Dispatched
from persched._engine.timebase import Timebase
from persched._model.instant import Instant, Micros, seconds
from persched.testing import FakeClock
from tests.support.helpers import TIMEOUT, wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator

    from persched._engine.runs import RunBook
    from persched._store.records import ClaimEntry, Completion

WORKERS = 4
START = 1_700_000_123.456789


class Cycles:
    """The run book the dispatcher claims through: records ``(completions, job ids claimed)`` per
    cycle; every entry goes to a worker."""

    namespace = "default"  # the runs' namespace, which the dispatcher's workers put in each RunContext

    def __init__(self) -> None:
        self.seen: list[tuple[list[Any], list[str]]] = []
        self.entries: list[ClaimEntry] = []  # every entry claimed, in order
        self.lock = threading.Lock()
        self.searches: list[int] = []  # the limit of each search for overdue rows
        self.overdue = 0  # how many rows a search finds

    def cycle(self, completions: list[Any], due: list[ClaimEntry], hand_over: object) -> Dispatched:
        with self.lock:
            self.seen.append((completions, [job_id for job_id, _, _, _ in due]))
            self.entries.extend(due)
        return Dispatched(handed_over=len(due))

    def on_overrun(self, claim: object) -> None:
        raise AssertionError("no run here has a max runtime")

    def stop_claiming(self) -> None:
        pass

    def retry_unwritten(self) -> Dispatched:
        return Dispatched()

    def claim_overdue(self, limit: int, before: object, hand_over: object) -> Dispatched:
        with self.lock:
            self.searches.append(limit)
            return Dispatched(handed_over=min(limit, self.overdue))

    def claimed(self) -> list[list[str]]:
        with self.lock:
            return [ids for _, ids in self.seen if ids]

    def written(self) -> list[Any]:
        with self.lock:
            return [c for completions, _ in self.seen for c in completions]


def done(n: int) -> Completion:
    """A completion as the test's workers report it: only its identity matters here."""
    return cast("Completion", f"done-{n}")


@pytest.fixture
def cycles() -> Cycles:
    return Cycles()


@pytest.fixture
def started(cycles: Cycles) -> Iterator[list[Dispatcher]]:
    made: list[Dispatcher] = []
    yield made
    for dispatcher in made:
        dispatcher.stop_claiming()
        dispatcher.shutdown(lambda: TIMEOUT)


def _dispatcher(started: list[Dispatcher], cycles: Cycles, jobs: int, gather: float) -> Dispatcher:
    timebase = Timebase(FakeClock(START))
    due = timebase.now()
    dispatcher = Dispatcher(
        timebase, cast("RunBook", cycles), WORKERS, lambda job_id: True, lambda: Micros(0), gather=gather
    )
    dispatcher.start([(due, f"j{n:02}", 1) for n in range(jobs)])
    started.append(dispatcher)
    return dispatcher


@pytest.mark.parametrize(
    "gather",
    [
        TIMEOUT * 6,
        pytest.param(
            0.0, marks=pytest.mark.xfail(strict=True, raises=AssertionError, reason="one claim per worker freed")
        ),
    ],
    ids=["gathers", "broken-no-gathering"],
)
def test_behind_a_backlog_the_next_claim_waits_for_every_busy_worker(
    started: list[Dispatcher], cycles: Cycles, monkeypatch: pytest.MonkeyPatch, gather: float
) -> None:
    gathering = threading.Event()
    real = Dispatcher._gather_left

    def watched(self: Dispatcher) -> float:
        left = real(self)
        if left > 0:
            gathering.set()
        return left

    monkeypatch.setattr(Dispatcher, "_gather_left", watched)
    dispatcher = _dispatcher(started, cycles, 3 * WORKERS, gather)
    wait_until(lambda: len(cycles.claimed()) == 1, message="the first claim")
    assert cycles.claimed() == [["j00", "j01", "j02", "j03"]]  # 8 entries left due: a backlog
    dispatcher.handover.complete(done(0))
    # The dispatcher either gathers (waits for the three others) or claims at once.
    wait_until(lambda: gathering.is_set() or len(cycles.claimed()) > 1, message="the dispatcher's next step")
    for n in (1, 2, 3):
        dispatcher.handover.complete(done(n))
    wait_until(lambda: len(cycles.written()) == WORKERS, message="the four completions written")
    # One cycle wrote the four completions and claimed four runs: one commit, not two or four.
    assert cycles.claimed()[1] == ["j04", "j05", "j06", "j07"]
    assert cycles.seen[1][0] == ["done-0", "done-1", "done-2", "done-3"]


def test_gathering_is_bounded_by_its_real_time(started: list[Dispatcher], cycles: Cycles) -> None:
    gather = 0.05
    dispatcher = _dispatcher(started, cycles, 3 * WORKERS, gather)
    wait_until(lambda: len(cycles.claimed()) == 1, message="the first claim")
    freed = time.monotonic()
    dispatcher.handover.complete(done(0))  # the three other workers stay busy
    wait_until(lambda: len(cycles.claimed()) == 2, message="the claim for the one free worker")
    assert time.monotonic() - freed >= gather
    assert cycles.seen[1] == (["done-0"], ["j04"])


def test_without_a_backlog_a_completion_is_written_at_once(started: list[Dispatcher], cycles: Cycles) -> None:
    dispatcher = _dispatcher(started, cycles, WORKERS - 1, gather=TIMEOUT * 6)  # fewer due than workers
    wait_until(lambda: len(cycles.claimed()) == 1, message="the first claim")
    dispatcher.handover.complete(done(0))  # two workers stay busy: nothing is behind, nothing waits
    wait_until(lambda: cycles.written() == ["done-0"], message="the completion written without gathering")


def _searching(started: list[Dispatcher], cycles: Cycles, overdue: int) -> tuple[Dispatcher, FakeClock]:
    """A dispatcher that shares the work, nothing in its heap, `overdue` rows for each search to find;
    its first search is due."""
    clock = FakeClock(START)
    dispatcher = Dispatcher(Timebase(clock), cast("RunBook", cycles), WORKERS, lambda job_id: True, lambda: Micros(0))
    cycles.overdue = overdue
    dispatcher.start([], shared=True)
    started.append(dispatcher)
    clock.advance(seconds(SEARCH_EVERY))
    wait_until(lambda: len(cycles.searches) == 1, message="the first search")
    return dispatcher, clock


def test_a_search_that_filled_every_worker_is_followed_by_another_once_workers_are_free(
    started: list[Dispatcher], cycles: Cycles
) -> None:
    dispatcher, _ = _searching(started, cycles, overdue=WORKERS)
    for n in range(WORKERS):
        dispatcher.handover.complete(done(n))
    # The clock stands still: without the repeat, the next search would wait SEARCH_EVERY.
    wait_until(lambda: len(cycles.searches) == 2, message="a second search at once")
    assert cycles.searches == [WORKERS, WORKERS]


def test_a_search_that_found_fewer_rows_than_workers_waits_search_every(
    started: list[Dispatcher], cycles: Cycles
) -> None:
    dispatcher, clock = _searching(started, cycles, overdue=WORKERS - 1)
    for n in range(WORKERS - 1):
        dispatcher.handover.complete(done(n))
    assert dispatcher.wait_idle(TIMEOUT)  # the completions written, no search due
    assert len(cycles.searches) == 1
    clock.advance(seconds(SEARCH_EVERY))
    wait_until(lambda: len(cycles.searches) == 2, message="the search SEARCH_EVERY later")


# Two entries due 10 ms and 13 ms after the start: a batch wait of 5 ms from the first covers the gap.
FIRST, SECOND = Micros(10_000), Micros(13_000)
COVERS = TIMEOUT * 6  # seconds: on the FakeClock, and in real time no test reaches
SHORT = 0.002  # seconds: ends before the second entry is due


def _two_due(
    started: list[Dispatcher],
    cycles: Cycles,
    monkeypatch: pytest.MonkeyPatch,
    *,
    shared: bool,
    batch_wait: float,
    batch: int = WORKERS,
) -> tuple[Dispatcher, FakeClock, threading.Event, Instant]:
    """A dispatcher (sharing the work or alone) with "a" due at FIRST and "b" at SECOND, and an event
    set whenever a cycle waits for a batch."""
    waiting = threading.Event()
    real = Dispatcher._batch_left

    def watched(self: Dispatcher, now: Instant) -> float:
        left = real(self, now)
        if left > 0:
            waiting.set()
        return left

    monkeypatch.setattr(Dispatcher, "_batch_left", watched)
    clock = FakeClock(START)
    timebase = Timebase(clock)
    start = timebase.now()
    dispatcher = Dispatcher(
        timebase,
        cast("RunBook", cycles),
        WORKERS,
        lambda job_id: True,
        lambda: Micros(0),
        batch=batch,
        batch_wait=batch_wait,
    )
    dispatcher.start([(Instant(start + FIRST), "a", 1), (Instant(start + SECOND), "b", 1)], shared=shared)
    started.append(dispatcher)
    return dispatcher, clock, waiting, start


def test_a_shared_instance_claims_two_entries_in_one_cycle_when_its_batch_wait_covers_the_gap(
    started: list[Dispatcher], cycles: Cycles, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, clock, waiting, _ = _two_due(started, cycles, monkeypatch, shared=True, batch_wait=COVERS)
    clock.advance(seconds(FIRST))
    wait_until(lambda: waiting.is_set() or bool(cycles.claimed()), message="the dispatcher's step for 'a'")
    clock.advance(seconds(Micros(SECOND - FIRST)))  # "b" due: two of a batch of four, the wait goes on
    clock.advance(COVERS)  # the wait's bound
    wait_until(lambda: bool(cycles.claimed()), message="the claim")
    assert cycles.claimed() == [["a", "b"]]


def test_a_wait_for_a_batch_ends_when_the_batch_is_due_and_its_entries_are_taken_up_on_time(
    started: list[Dispatcher], cycles: Cycles, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, clock, waiting, start = _two_due(started, cycles, monkeypatch, shared=True, batch_wait=COVERS, batch=2)
    clock.advance(seconds(FIRST))
    wait_until(waiting.is_set, message="the wait for a batch")
    clock.advance(seconds(Micros(SECOND - FIRST)))  # "b" due: a batch of two, claimed without the bound
    wait_until(lambda: bool(cycles.claimed()), message="the claim")
    assert cycles.claimed() == [["a", "b"]]
    # Taken up at their due times: the wait is the scheduler's, not lateness a grace would measure.
    assert [taken for _, _, _, taken in cycles.entries] == [start + FIRST, start + SECOND]


def test_a_shared_instance_claims_in_two_cycles_when_its_batch_wait_ends_before_the_second_entry(
    started: list[Dispatcher], cycles: Cycles, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, clock, waiting, _ = _two_due(started, cycles, monkeypatch, shared=True, batch_wait=SHORT)
    clock.advance(seconds(FIRST))
    # The first look after "a" came due waits (SHORT is left on both clocks); the wait then ends
    # within SHORT of real time, or when the FakeClock reaches FIRST + SHORT.
    wait_until(waiting.is_set, message="the wait for a batch")
    clock.advance(SHORT)
    wait_until(lambda: cycles.claimed() == [["a"]], message="'a' claimed alone")
    clock.advance(seconds(Micros(SECOND - FIRST)) - SHORT)
    wait_until(lambda: len(cycles.claimed()) == 2, message="'b' claimed")
    assert cycles.claimed() == [["a"], ["b"]]


def test_a_lone_instance_claims_at_once(
    started: list[Dispatcher], cycles: Cycles, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, clock, waiting, _ = _two_due(started, cycles, monkeypatch, shared=False, batch_wait=COVERS)
    clock.advance(seconds(FIRST))
    wait_until(lambda: cycles.claimed() == [["a"]], message="'a' claimed at once, the clock standing still")
    assert not waiting.is_set()


def test_a_stop_ends_the_wait_for_a_batch(
    started: list[Dispatcher], cycles: Cycles, monkeypatch: pytest.MonkeyPatch
) -> None:
    dispatcher, clock, waiting, _ = _two_due(started, cycles, monkeypatch, shared=True, batch_wait=COVERS)
    clock.advance(seconds(FIRST))
    wait_until(waiting.is_set, message="the wait for a batch")
    dispatcher.stop_claiming()
    assert dispatcher.shutdown(lambda: TIMEOUT)
    # The thread ended within TIMEOUT, where the wait had TIMEOUT * 6 to go; it claimed nothing.
    assert not any(t.name == "persched-dispatcher" and t.is_alive() for t in threading.enumerate())
    assert cycles.claimed() == []


def test_wait_idle_ends_the_wait_for_a_batch(
    started: list[Dispatcher], cycles: Cycles, monkeypatch: pytest.MonkeyPatch
) -> None:
    dispatcher, clock, waiting, _ = _two_due(started, cycles, monkeypatch, shared=True, batch_wait=COVERS)
    clock.advance(seconds(FIRST))
    wait_until(waiting.is_set, message="the wait for a batch")

    def worker() -> None:  # the test's worker: runs "a" once it is claimed
        wait_until(lambda: cycles.claimed() == [["a"]], message="'a' claimed")
        dispatcher.handover.complete(done(0))

    playing = threading.Thread(target=worker)
    playing.start()
    assert dispatcher.wait_idle(TIMEOUT)  # the clock stands still: only wait_idle ends the wait
    playing.join(TIMEOUT)
    assert cycles.claimed() == [["a"]]
    assert cycles.written() == ["done-0"]
