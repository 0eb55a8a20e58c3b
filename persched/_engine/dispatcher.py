"""The dispatcher: the one thread a run's way starts from, which claims what is due and queues what follows.

One direction
-------------
A run goes one way: the `persched._engine.window.Window` (a passive heap) yields its due
entry to the ``persched-dispatcher`` thread, which reserves a worker for it,
claims it through the `persched._engine.runs.RunBook` (one transaction with the
completions handed in since the last cycle), and hands each won run to its
reserved worker in the `persched._engine.workers.WorkerPool`. The worker hands the
outcome in (`complete`); the next cycle writes it, and the store's answer (the
job's next slot, or where a lost claim's row stands) goes back into the
window. The `RunBook` never calls the dispatcher: it returns what to queue
(`persched._engine.runs.Dispatched`). `Dispatcher` makes the window and the
`persched._engine.handover.Handover` (the worker pool, the overrun watch and the
account of reserved workers), and starts and stops them with its thread:
the scheduler's `persched._engine.lifecycle.Lifecycle` starts and stops only
the dispatcher.

Threads and locks
-----------------
Entries are pushed by any thread (schedule(), the heartbeat after a recovery
or a change picked up) and popped only by the dispatcher. ``_cond`` guards
the window, the hand-over's account (the count of free workers, of runs that
gave theirs back and go on elsewhere, and the completions handed in) and the
stop flags, and nothing else: no database call, no user code, no logging and
no join happens while it is held. The dispatcher decides under it (pop every due entry it has free
workers for, reserving one worker each, so a claimed run never waits for a
thread; take the completions handed in), releases it, and then acts: it
queues what a claim or a write returned only once the `RunBook` has
returned, so the claim gate and ``_cond`` never nest (the hand-over, under
the gate, takes only the overrun watch's lock). Lock order: ``_cond`` before
a `FakeClock`'s lock, never the reverse.

Why stale entries are harmless
------------------------------
The heap is a hint; the store decides. An entry left behind by deschedule(),
by a replacement (new generation) or by another instance's run fails its
claim, because the claim is conditional on generation, state and slot. The
entry is then dropped, or queued again at the row's real next slot (the
claim's result tells which). Nothing is ever removed from the heap by search.

Sharing the work
----------------
Several instances on one database share a namespace's jobs: each job has one
owner among the live instances (`persched._engine.membership`), and an instance queues
only the jobs it owns (`persched._engine.window`, "Ownership"; a lone instance owns
every job). A lost claim whose slot another claim took (`ClaimMiss.taken`)
is queued again at the row's next slot only by the job's owner, in case the
claimer dies; any other instance drops it. What nobody queues (views differ
for a heartbeat, an owner is saturated, or it died and the others have not
seen it yet) the database hands out: while other members share the work,
every `search_every`, when workers are free and nothing in the heap is due,
the dispatcher reserves its free workers and searches (the claim by query,
`Store.claim_overdue`), which claims the oldest rows due more than
`search_every` ago, whoever owns them, SKIP LOCKED so that two instances
searching at once take disjoint rows. So an owner that falls behind is helped
by the instances with free workers. A job that a search ran is *adopted*: the
instance queues its next slots too (`persched._engine.runs.RunBook`), racing its owner,
until a claim of it loses to another claim (its owner is back, or another
instance adopted it); so the job of an owner that died or was cut off runs
late once, at the search, and on time after that, while the others have not
yet dropped the owner from their views (a lease). A search that took as
many rows as it had workers for may have left more behind (the share of an
owner that died): the next one is due at once, whenever workers are free and
nothing of the heap's is due, not `search_every` later, so the instances
with free workers run the overdue rows as fast as they free workers, not
a batch every `search_every`. The search's bound is not
shortened below `search_every`: `next_run_at` is the grid slot, without the
job's jitter, so a short bound would take a jittered row before it is due. A
single instance never searches.

Waiting
-------
The dispatcher sleeps on ``_cond`` with a timeout until the head entry is due
(measured on the monotonic clock through the `Timebase`), or until it is
notified: a new head, a freed worker, a completion handed in, or stop. An
idle scheduler with many jobs sleeps until the earliest one (no busy
polling), or the next refill of the window.

Lateness is measured when an entry is taken up
-----------------------------------------------
Each entry popped is stamped with `taken_at`, the instant the scheduler took
it up, and the claim measures a slot's lateness there (docs/how-to/schedules.md,
"Missed runs": a small `grace_seconds` must not drop the slots of a scheduler
that is not behind). An entry that came due while the dispatcher slept waiting for
it, with a worker free, was taken up on time: `taken_at` is its due time,
however long the claim's commit took. Not so, and `taken_at` is when it was
popped: an entry that came due while every worker was busy or while a cycle
ran; one pushed already late (a change picked up, a recovery: the sleep is
counted from that push, `_asleep_since`); and one whose wake-up came more
than `TAKE_UP_SLACK` after its due time (the process was stopped or starved:
a stall, not dispatch latency). Entries of one job and generation that are
due together take one worker between them (the rest are dropped: the claim
would refuse them); of two generations of one job due together, the earlier
entry is claimed and the other waits for the next cycle (the claim's slot
bound is per job_id: with both in one batch, a stale generation's bound would
apply to the live one's row).

Refills
-------
With a refill (`start(refill=...)`, `persched._engine.horizon`), the window is bounded
(`persched._engine.window`, "The bounded window"): the dispatcher reads the rows after
the cursor on its thread, with ``_cond`` released, and queues the owned ones.

Gathering a batch while behind
------------------------------
A cycle's commit costs about the same for one run as for thirty (SQLite's
fsync, a round trip), so while entries are due that found no free worker (a
backlog), the next cycle waits, up to `gather` of real time from when a
worker became free, for every worker to be free before it claims.
Without it, runs that end fast settle into groups: each cycle claims as many
as reported back while the one before committed, and two groups of 16 (or 24
and 8) take turns with 32 workers, two commits where one would do (the
figures: docs/explanation/performance.md, "The dispatch path"). Only a
backlog waits, so a scheduler that keeps up never does; the runs that wait
are late already, by more than this.

Waiting for a batch while keeping up
------------------------------------
While other members share the work on a server engine, each claims a few
entries a cycle when it keeps up (its share of the slots comes due a few at
a time), and pays a cycle's statements and wake-ups for each few. So a cycle
with fewer than `batch` entries due (or fewer than its free workers) waits
for more to come due, up to `batch_wait` counted from the earliest due entry
or completion it holds, on the scheduler's clock and in real time, whichever
ends first: a run starts up to `batch_wait` later, and a cycle carries more
runs, which is less CPU a run (docs/multi.md, "At the points of the capacity
model"). It ends at once when `batch` entries are due, when claiming stops,
when the instance is alone again or while `wait_idle()` waits; a new head,
a freed worker or a completion wakes it to look again. The wait is the
scheduler's choice, like its sleep for the head with a worker free: an entry
that comes due during it is taken up at its due time ("Lateness", above), so
a small `grace_seconds` drops no slot for it; the run's `started_at` shows
the wait. A lone instance never waits (nothing to share a cycle with), nor
does SQLite (`batch_wait` 0: a local commit).

Idle
----
`wait_idle()` (the testing kit behind `JobScheduler.wait_idle`) waits under
``_cond`` until no entry is due, no completion waits to be written, no cycle
is running, every worker is free and no run goes on elsewhere.
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

# Called on the dispatcher thread, on no lock: ``refill(cursor, before)`` returns the entries of
# the rows after `cursor` whose next_run_at lies before `before` (or the first of them) and the
# cursor after them (see `persched._engine.horizon.Horizon.refill`).
RefillCallback = Callable[[Cursor | None, Instant], tuple[list[Entry], Cursor]]
NO_HORIZON: Final = Micros(0)
TAKE_UP_SLACK: Final = 1_000_000  # µs: a wake-up later than this after its due time is a stall
# How long a cycle behind a backlog waits for busy workers to report back (module docstring).
GATHER: Final = 0.002  # real seconds
# How many runs a cycle of an instance sharing the work waits for, and how long at most, counted
# from the earliest due entry or completion it holds (module docstring, "Waiting for a batch").
BATCH: Final = 16
BATCH_WAIT: Final = 0.03  # seconds
# How often an instance with free workers searches, and how late a row must be.
SEARCH_EVERY: Final = Micros(500_000)


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
    """Owns the dispatch loop and its thread, the window and the hand-over to the workers.

    Args:
        timebase: The scheduler's time frame.
        runs: Claims, writes and counts what is in flight (`persched._engine.runs.RunBook`).
        workers: How many runs may be in flight at once (the worker pool's size).
        owns: Whether this instance owns a job (`persched._engine.membership`).
        reach: The largest jitter of the due times the store handed out (`Window`).
        allowed_modules: As for `WorkerPool`.
        max_batch: At most this many claims per cycle.
        search_every: How often to search for rows no claim took (module docstring), when
            workers are free and nothing in the heap is due; only rows this late are taken.
        gather: Real seconds a cycle behind a backlog waits for busy workers (module docstring).
        batch: While other members share the work, a cycle with fewer entries due than this
            (or than its free workers) waits for more to come due (module docstring).
        batch_wait: Seconds such a cycle waits at most, counted from the earliest due entry
            or completion it holds; 0: never waits (SQLite, whose commit is local).
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
        self._searched_at = Instant(0)  # when it last searched (start(): as if then)
        self._in_cycle = False
        self._backlog = False  # the last claim left due entries for want of workers
        self._gather_until: float | None = None  # _realtime.monotonic() when this gathering ends
        self._batch_until: float | None = None  # _realtime.monotonic() when this wait for a batch ends
        self._settling = 0  # callers in wait_idle(): no cycle waits for a batch meanwhile
        self._asleep_since: Instant | None = None  # when it began waiting for the head with a worker free
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
        """Fill the window with ``(due_at, job_id, generation)``, start the workers and the thread.

        With `refill`, the window is bounded (`persched._engine.window`): `entries` are the
        rows up to `cursor`, and refills load up to `horizon` ahead, `refill_rows` being
        what one refill reads at most. `shared`: other instances share the work (`repartition`).
        """
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
        """After `stop_claiming`: let the workers finish, write their completions, end every thread;
        False if a run is still going when `left()` (the time left, None: no limit) runs out."""
        drained = self.handover.drain(left)
        self.stop()  # after the workers: it writes their last completions
        self.join(left())
        self.retry_unwritten()
        self.handover.overrun.stop()
        return drained

    def finish_late(self) -> None:
        """After a `shutdown` that gave up on runs in flight: wait for them and write their outcomes."""
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
        """Wait for the dispatcher thread to end."""
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    # -- what makes a job due --------------------------------------------------------

    def offer(self, due_at: Instant, job_id: str, generation: int) -> None:
        """Queue a run of `job_id`'s `generation` for `due_at` if this instance owns the job
        (`persched._engine.window`, "Ownership")."""
        with self._cond:
            self._push(due_at, job_id, generation, self.window.offer)

    def _push(self, due_at: Instant, job_id: str, generation: int, into: Callable[[Instant, str, int], bool]) -> None:
        """Under ``_cond``: queue an entry; wake the thread if it is the new head."""
        if self._asleep_since is not None and due_at < self._asleep_since:
            # Late already: the sleep did not wait for it (module docstring).
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
        """The members' view changed: keep the owned entries only, reload the owned rows with the
        next refill, and search for overdue rows only while `shared` (module docstring)."""
        with self._cond:
            self.window.repartition()
            self._shared = shared
            self._cond.notify_all()

    def retime(self) -> None:
        """The time frame moved (`persched._engine.skew`): look at the head again, and reload the
        rows due within the horizon of the new time with the next refill."""
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
        """Block until nothing is due or being written and every worker is free; False on timeout (real seconds)."""
        deadline = None if timeout is None else _realtime.monotonic() + timeout
        with self._cond:
            self._settling += 1  # what is due is claimed now, not after a wait for a batch
            try:
                while not self._idle():
                    left = None if deadline is None else deadline - _realtime.monotonic()
                    if left is not None and left <= 0:
                        return False
                    # The dispatcher re-reads the clock now: a clock that moves without waking
                    # anyone (a test's frozen time, persched.testing.FrozenTimeClock) is taken up at once.
                    self._cond.notify_all()
                    # Bounded: advancing a FakeClock wakes this condition, the real clock does not.
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
        """Under ``_cond``: wait for completions, or due entries and free workers, and take them;
        or for a refill or a search to be due; None once stopped."""
        window = self.window
        self._asleep_since = None
        while True:
            now = self._timebase.now()
            # A refill first, unless it was the last thing done and entries are due: the
            # entries loaded by a long catch-up of refills start while it goes on.
            workers = self.handover
            head_due = window.head_due(now) and workers.free > 0
            if self._claiming and window.refill_due(now) and not (window.just_refilled and head_due):
                return Refill(*window.begin_refill(now))
            window.just_refilled = False
            if (left := self._gather_left()) > 0:
                self._cond.wait(left)
                continue
            if (left := self._batch_left(now)) > 0:
                # Waiting is this scheduler's choice, not lateness a grace measures: the entries
                # that come due meanwhile are taken up at their due time (module docstring).
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
                # Nothing of the heap's is due and workers are free: claim what nobody took.
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
            # The head may lie beyond the cursor, or nothing is queued.
            wakes.append(refill_at)
        return max(0, min(wakes) - now) / US_PER_SECOND if wakes else None

    def _gather_left(self) -> float:
        """Under ``_cond``: real seconds left to wait for busy workers before the next claim,
        0 to claim now (module docstring)."""
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
        0 to run it now (module docstring, "Waiting for a batch")."""
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
        """Under ``_cond``: when to search for rows no claim took (module docstring); None while
        no search may run (alone, not claiming, no free worker)."""
        if not self._shared or not self._claiming or self.handover.free <= 0:
            return None
        return Instant(self._searched_at + self._search_every)

    def _search_due(self, now: Instant) -> bool:
        """Under ``_cond``: whether to search for rows no claim took now."""
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
                    # Every worker it had found a row: more may be overdue, search again at once.
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
        # Hashed before taking the lock (thousands of rows); an entry kept by a view that
        # changes meanwhile costs at most one claim, and the change reloads anyway.
        owns = self.window.owns
        entries = [entry for entry in entries if owns(entry[1])]
        with self._cond:
            self.window.refilled(entries, cursor)
            self._cond.notify_all()


def taken_at(due_at: Instant, now: Instant, asleep_since: Instant | None) -> Instant:
    """When an entry popped at `now` was taken up, the dispatcher having slept for it with a worker
    free since `asleep_since` (None: it did not; module docstring, "Lateness")."""
    if asleep_since is None or now - due_at > TAKE_UP_SLACK:
        return now
    return Instant(min(now, max(due_at, asleep_since)))
