"""The dispatcher: the one thread that claims what is due, and writes what finished.

``persched-dispatcher`` pops due entries from the `persched._engine.window.Window`,
claims them through the `persched._engine.runs.RunBook` in one transaction with
the outcomes handed in since the last cycle, and hands each won run to the worker
it reserved for it. The `RunBook` never calls back: it returns what to queue
(`persched._engine.runs.Dispatched`). Any thread may push an entry; only this
thread pops.

``_cond`` guards the window, the hand-over's account of workers and outcomes,
and the stop flags. No database call, user code, logging or join happens under
it. The thread decides under it (pop what it has free workers for, reserving one
each, so a claimed run never waits for a thread), releases it, then acts. It
queues what a claim returned only after the `RunBook` returned, so the claim gate
and ``_cond`` never nest. Lock order: ``_cond`` before a `FakeClock`'s lock.

Why stale entries are harmless: the claim is conditional on generation, state
and slot, so an entry left by a deschedule, a replacement or another instance's
run fails its claim and is dropped or queued at the row's real slot.

Waiting, lateness (`taken_at`), gathering a batch while behind, waiting for a batch while
keeping up, refills and the search for overdue rows: docs/explanation/engine.md, "The dispatcher".
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, NamedTuple

from .. import _realtime
from .._model.instant import US_PER_SECOND, Instant, Micros, micros
from .handover import Handover
from .runs import Dispatched
from .tracebacks import describe
from .window import Cursor, Entry, Window

if TYPE_CHECKING:
    from .._store.records import ClaimEntry, Completion
    from .runs import RunBook
    from .timebase import Timebase

__all__ = ["Dispatcher", "RefillCallback"]

logger = logging.getLogger(__name__)

# On the dispatcher thread, on no lock: `persched._engine.horizon.Horizon.refill`.
RefillCallback = Callable[[Cursor | None, Instant], tuple[list[Entry], Cursor]]
NO_HORIZON: Final = Micros(0)
TAKE_UP_SLACK: Final = 1_000_000  # µs: a wake-up later than this after its due time is a stall
GATHER: Final = 0.002  # real seconds a cycle behind a backlog waits for busy workers
SEARCH_EVERY: Final = Micros(500_000)  # how often to search for overdue rows, and how late they must be
# While other instances share the work on a server engine, a cycle waits for this many runs, at most
# this long from its earliest due entry or completion (docs/explanation/engine.md, "Waiting for a batch").
BATCH: Final = 32
BATCH_WAIT: Final = 0.06  # seconds


class Cycle(NamedTuple):
    """Completions to write and due entries to claim (a worker reserved for each)."""

    completions: list[Completion]
    due: list[ClaimEntry]


class Search(NamedTuple):
    """A claim by query: `limit` workers reserved, rows due before `before`."""

    limit: int
    before: Instant


class Refill(NamedTuple):
    """Read the rows after `cursor` (None: from the first) due before `before`."""

    cursor: Cursor | None
    before: Instant


class Dispatcher:
    """The dispatch loop and its thread; makes the window and the hand-over to the workers.

    `batch` and `batch_wait`: while other instances share the work, a cycle with fewer entries due
    than `batch` (or than its free workers) waits up to `batch_wait` seconds for more; 0: never
    (SQLite, whose commit is local).
    """

    def __init__(
        self,
        timebase: Timebase,
        runs: RunBook,
        workers: int,
        owns: Callable[[str], bool],
        reach: Callable[[], Micros],
        allowed_modules: tuple[str, ...] | None = None,
        *,
        max_batch: int = 256,
        search_every: Micros = SEARCH_EVERY,
        gather: float = GATHER,
        batch: int = BATCH,
        batch_wait: float = BATCH_WAIT,
    ) -> None:
        self._timebase = timebase
        self._runs = runs
        self.window = Window(timebase, owns, reach)
        self._cond = threading.Condition()
        self.handover = Handover(self._cond, timebase, runs, workers, allowed_modules, self._queue)
        self.pool = self.handover.pool
        self._max_batch = max_batch
        self._search_every = search_every
        self._gather = gather
        self._batch = batch
        self._batch_wait = Micros(micros(batch_wait))
        self._refill: RefillCallback | None = None
        self._shared = False  # other instances share the work: search for what nobody queued
        self._searched_at = Instant(0)
        self._in_cycle = False
        self._backlog = False  # the last claim left due entries for want of workers
        self._gather_until: float | None = None  # _realtime.monotonic()
        self._batch_until: float | None = None  # _realtime.monotonic() when this wait for a batch ends
        self._settling = 0  # callers in wait_idle(): no cycle waits for a batch meanwhile
        self._asleep_since: Instant | None = None  # waiting for the head with a worker free since
        self._claiming = True  # False once shutdown began: completions only
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name="persched-dispatcher", daemon=True)

    # -- lifecycle -------------------------------------------------------------------

    def start(
        self,
        entries: list[Entry],
        *,
        refill: RefillCallback | None = None,
        cursor: Cursor | None = None,
        horizon: Micros = NO_HORIZON,
        refill_rows: int = 0,
        shared: bool = False,
    ) -> None:
        """Fill the window, start the workers and the thread; with `refill`, the window is bounded."""
        with self._cond:
            self._shared = shared
            self._searched_at = self._timebase.now()
            self._refill = refill
            self.window.load(entries, cursor, horizon, refill_rows, bounded=refill is not None)
        self.pool.start()
        self._thread.start()

    def stop_claiming(self) -> None:
        """Shutdown's linearization point: no claim commits after this returns; completions are still written."""
        self._runs.stop_claiming()
        with self._cond:
            self._claiming = False
            self._cond.notify_all()

    def shutdown(self, left: Callable[[], float | None]) -> bool:
        """After `stop_claiming`: drain the workers, write their outcomes, end the threads; False on timeout."""
        drained = self.handover.drain(left)
        self.stop()  # after the workers: it writes their last completions
        self.join(left())
        self.retry_unwritten()
        self.handover.overrun.stop()
        return drained

    def finish_late(self) -> None:
        """After a `shutdown` that gave up: wait for the runs in flight and write their outcomes."""
        self.pool.join(lambda: None)
        self.join(None)
        self.retry_unwritten()

    def stop(self) -> None:
        """Write the completions handed in so far, then end the thread (idempotent)."""
        with self._cond:
            self._claiming = False
            self._stopping = True
            self._cond.notify_all()

    def join(self, timeout: float | None) -> None:
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    # -- what makes a job due --------------------------------------------------------

    def offer(self, due_at: Instant, job_id: str, generation: int) -> None:
        """Queue a run of `job_id`'s `generation` for `due_at` if this instance owns the job."""
        with self._cond:
            self._push(due_at, job_id, generation, self.window.offer)

    def _push(self, due_at: Instant, job_id: str, generation: int, into: Callable[[Instant, str, int], bool]) -> None:
        """Under ``_cond``: queue an entry; wake the thread if it is the new head."""
        if self._asleep_since is not None and due_at < self._asleep_since:
            # Late already: the sleep did not wait for it.
            self._asleep_since = max(self._asleep_since, self._timebase.now())
        if into(due_at, job_id, generation):
            self._cond.notify_all()

    def _queue(self, dispatched: Dispatched) -> None:
        """Under ``_cond``: queue what a claim or a write left (`persched._engine.runs.Dispatched`)."""
        for entry in dispatched.push:
            self._push(*entry, self.window.push)
        for entry in dispatched.offer:
            self._push(*entry, self.window.offer)

    def repartition(self, shared: bool) -> None:
        """The members' view changed: keep the owned entries, reload the owned rows; search only while `shared`."""
        with self._cond:
            self.window.repartition()
            self._shared = shared
            self._cond.notify_all()

    def retime(self) -> None:
        """The time frame moved (`persched._engine.skew`): look at the head again, reload the rows."""
        with self._cond:
            self.window.retime()
            self._cond.notify_all()

    def pickup_bound(self) -> Instant | None:
        """The latest next_run_at a changed job can have and still need a push (None: every one)."""
        with self._cond:
            return self.window.pickup_bound()

    def retry_unwritten(self) -> None:
        """Write the completions a failed write left behind (heartbeat, and shutdown's last step)."""
        dispatched = self._runs.retry_unwritten()
        with self._cond:
            self._queue(dispatched)

    # -- idle ------------------------------------------------------------------------

    def wait_idle(self, timeout: float | None) -> bool:
        """Block until nothing is due or being written and every worker is free; False on timeout."""
        deadline = None if timeout is None else _realtime.monotonic() + timeout
        with self._cond:
            self._settling += 1  # what is due is claimed now, not after a wait for a batch
            try:
                while not self._idle():
                    left = None if deadline is None else deadline - _realtime.monotonic()
                    if left is not None and left <= 0:
                        return False
                    # Re-read the clock now: a FrozenTimeClock moves without waking anyone.
                    self._cond.notify_all()
                    # Bounded: a FakeClock's advance wakes this condition, the real clock does not.
                    self._cond.wait(0.05 if left is None else min(left, 0.05))
                return True
            finally:
                self._settling -= 1

    def _idle(self) -> bool:
        now = self._timebase.now()
        due = self._claiming and (self.window.head_due(now) or self.window.refill_due(now))
        due = due or self.window.refilling is not None or self._search_due(now)
        return not (due or self._in_cycle) and self.handover.settled()

    # -- the loop --------------------------------------------------------------------

    def _next_step(self) -> Cycle | Search | Refill | None:
        """Under ``_cond``: wait for the next thing to do and take it; None once stopped."""
        window = self.window
        self._asleep_since = None
        while True:
            now = self._timebase.now()
            # A refill first, unless it was the last thing done and entries are due:
            # a long catch-up of refills must not hold back the entries it loaded.
            workers = self.handover
            head_due = window.head_due(now) and workers.free > 0
            if self._claiming and window.refill_due(now) and not (window.just_refilled and head_due):
                return Refill(*window.begin_refill(now))
            window.just_refilled = False
            if (left := self._gather_left()) > 0:
                self._cond.wait(left)
                continue
            if (left := self._batch_left(now)) > 0:
                # Waiting is this scheduler's choice, not lateness a grace measures: the entries that
                # come due meanwhile are taken up at their due time (docs/explanation/engine.md).
                if self._asleep_since is None:
                    self._asleep_since = now
                self._cond.wait(left)  # a FakeClock's advance() wakes it too
                continue
            due: list[ClaimEntry] = []
            if self._claiming and len(window) and workers.free:
                limit = min(workers.free, self._max_batch)
                asleep: Instant | None = self._asleep_since
                due = [(job, gen, at, taken_at(at, now, asleep)) for at, job, gen in window.pop_due(now, limit)]
                workers.reserve(len(due))  # before the claim
                self._backlog = len(due) == limit and window.head_due(now)
                self._gather_until = None
            if due or workers.completions:
                self._in_cycle = True
                self._batch_until = None
                return Cycle(workers.take_completions(), due)
            if self._search_due(now):
                limit = min(workers.free, self._max_batch)
                workers.reserve(limit)  # before the claim
                self._searched_at = now
                self._in_cycle = True
                return Search(limit, Instant(now - self._search_every))
            if self._stopping:
                workers.collecting = False
                return None
            self._timebase.clock.wait(self._cond, self._sleep())

    def _sleep(self) -> float | None:
        """Under ``_cond``: real seconds until the head, a search or a refill is due (None: until notified)."""
        now = self._timebase.now()
        wakes: list[Instant] = []
        head = self.window.head()
        if self._claiming and head is not None and self.handover.free:
            self._asleep_since = now if self._asleep_since is None else self._asleep_since
            wakes.append(head)
        else:
            self._asleep_since = None
        if (search_at := self._next_search()) is not None:
            wakes.append(search_at)
        if self._claiming and (refill_at := self.window.refill_wake()) is not None:
            wakes.append(refill_at)
        return max(0, min(wakes) - now) / US_PER_SECOND if wakes else None

    def _gather_left(self) -> float:
        """Under ``_cond``: real seconds left to gather a batch while behind; 0 to claim now."""
        if not (self._backlog and self._claiming and 0 < self.handover.free < self.handover.size):
            return 0.0
        if not self.window.head_due(self._timebase.now()):
            return 0.0
        now = _realtime.monotonic()
        if self._gather_until is None:
            self._gather_until = now + self._gather
        return max(0.0, self._gather_until - now)

    def _batch_left(self, now: Instant) -> float:
        """Under ``_cond``: real seconds left to wait for a batch to come due before the next cycle,
        0 to run it now (docs/explanation/engine.md, "Waiting for a batch")."""
        workers = self.handover
        target = min(self._batch, workers.free, self._max_batch)
        held = [at for at in (self.window.head(), workers.completed_at) if at is not None and at <= now]
        if not (self._batch_wait and self._shared and self._claiming and not self._settling and target > 1 and held):
            self._batch_until = None
            return 0.0
        until = min(held) + self._batch_wait
        full = self.window.nth_due(target)  # when `target` entries are due
        if now >= until or (full is not None and full <= now):
            self._batch_until = None
            return 0.0
        # On the scheduler's clock and in real time, whichever ends first: a FakeClock standing
        # still does not hold a cycle for longer than the bound.
        real = _realtime.monotonic()
        if self._batch_until is None:
            self._batch_until = real + (until - now) / US_PER_SECOND
        wake = until if full is None else min(until, full)
        return max(0.0, min(self._batch_until - real, (wake - now) / US_PER_SECOND))

    def _next_search(self) -> Instant | None:
        """Under ``_cond``: when to search for overdue rows; None while no search may run."""
        if not self._shared or not self._claiming or self.handover.free <= 0:
            return None
        return Instant(self._searched_at + self._search_every)

    def _search_due(self, now: Instant) -> bool:
        search_at = self._next_search()
        return search_at is not None and now >= search_at

    def _loop(self) -> None:
        while True:
            with self._cond:
                step = self._next_step()
            if step is None:
                return
            if isinstance(step, Refill):
                self._do_refill(step)
                continue
            reserved = step.limit if isinstance(step, Search) else len(step.due)
            dispatched = Dispatched()
            try:
                if isinstance(step, Search):
                    dispatched = self._runs.claim_overdue(step.limit, step.before, self.handover.hand_over)
                else:
                    dispatched = self._runs.cycle(step.completions, step.due, self.handover.hand_over)
            except BaseException as exc:  # noqa: BLE001 - the dispatcher must outlive any failure
                what = "a search for overdue runs" if isinstance(step, Search) else "a dispatch cycle"
                logger.error("%s failed\n%s", what, describe(exc))
            with self._cond:
                if isinstance(step, Search) and dispatched.handed_over >= step.limit:
                    # Every worker found a row: more may be overdue, search again at once.
                    self._searched_at = Instant(self._searched_at - self._search_every)
                self._queue(dispatched)
                self.handover.give_back(reserved - dispatched.handed_over)
                self._in_cycle = False
                self._cond.notify_all()

    def _do_refill(self, step: Refill) -> None:
        """On no lock: read the rows after the cursor up to `before` and queue the owned ones."""
        assert self._refill is not None
        try:
            entries, cursor = self._refill(step.cursor, step.before)
        except BaseException as exc:  # noqa: BLE001 - the dispatcher must outlive any failure; retried
            logger.warning("loading the jobs due before %s failed, will retry: %s", step.before, describe(exc))
            with self._cond:
                self.window.refill_failed()
                self._cond.notify_all()
            return
        with self._cond:
            self.window.refilled(entries, cursor)
            self._cond.notify_all()


def taken_at(due_at: Instant, now: Instant, asleep_since: Instant | None) -> Instant:
    """When an entry popped at `now` was taken up (docs/explanation/engine.md, "Lateness is measured ...")."""
    if asleep_since is None or now - due_at > TAKE_UP_SLACK:
        return now
    return Instant(min(now, max(due_at, asleep_since)))
