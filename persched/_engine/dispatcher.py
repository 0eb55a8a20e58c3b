"""The heap of due times and the dispatcher thread that starts runs.

Threads and locks
-----------------
The heap holds one small entry per scheduled job: ``(due_at, job_id,
generation)``, where `due_at` is the slot the store had for the job when the
entry was pushed (an `Instant` in the scheduler's `Timebase` frame). Every
field is comparable, so ties never compare payloads (the hazard behind
CPython `sched`'s sequence numbers, bpo-19270, cannot arise); three fields
keep an entry under 200 bytes. Entries are pushed by any thread (schedule(),
a completion, the heartbeat after a recovery or a change picked up) and
popped only by the dispatcher.

``_cond`` guards the heap, the count of free workers (and of runs that gave
theirs back and go on elsewhere: `release_worker`), the completions handed
in and the stop flags, and nothing else: no database call, no user code, no
logging and no join happens while it is held. The dispatcher decides under it
(pop every due entry it has free workers for, reserving one worker each,
so a claimed run never waits for a thread; take the completions
handed in), releases it, and then acts: the `cycle` callback writes the
completions in one transaction and claims the due entries in another, and
hands each won run to a reserved worker. Lock order: ``_cond`` before a
`FakeClock`'s lock, never the reverse.

Why stale entries are harmless
------------------------------
The heap is a hint; the store decides. An entry left behind by deschedule(),
by a replacement (new generation) or by another instance's run fails its
claim, because the claim is conditional on generation, state and slot. The
entry is then dropped, or pushed again at the row's real next slot
(the claim's result tells which). Nothing is ever removed from the heap by search.

Sharing the work
----------------
Several instances on one database share a namespace's jobs by default: each
job has one owner among the live instances (`persched._engine.membership`), and an
instance queues only the jobs it owns. `offer()` is the push of everything
that makes a job due (schedule(), a completion, a change picked up, a
recovery, the sweep) and keeps only an owned job's entry; a refill keeps only
owned rows. When the view of the members changes, `repartition()` drops the
entries of jobs this instance no longer owns and makes the next refill start
again from the first row, so that the jobs it gained are loaded (a duplicate
entry of a job it kept costs at most one failed claim).

A lost claim whose slot another claim took (`ClaimMiss.taken`) is queued again
at the row's next slot only by the job's owner, in case the claimer dies; any
other instance drops it. What nobody queues (views differ for a heartbeat, an
owner is saturated, or it died and the others have not seen it yet) the
database hands out: while other members share the work, every
`search_every`, when workers are free and nothing in the heap is due, the
dispatcher reserves its free workers and calls `search` (the claim by query,
`Store.claim_overdue`), which claims the oldest rows due more than
`search_every` ago, whoever owns them, SKIP LOCKED so that two instances
searching at once take disjoint rows. So an owner that falls behind is helped
by the instances with free workers. A job that a search ran is *adopted*: the
instance queues its next slots too (`persched._engine.runs.RunBook`), racing its
owner, until a claim of it loses to another claim (its owner is back, or
another instance adopted it); so the job of an owner that died or was cut off
runs late once, at the search, and on time after that, while the others
have not yet dropped the owner from their views (a lease). The search's bound
is not shortened below `search_every`: `next_run_at` is the grid slot, without
the job's jitter, so a short bound would take a jittered row before it is due.
A single instance, or one that does not share (``share_work=False``: every
instance tries every slot), never searches.

Waiting
-------
The dispatcher sleeps on ``_cond`` with a timeout until the head entry is due
(measured on the monotonic clock through the `Timebase`), or until it is
notified: a new head, a freed worker, a completion handed in, or stop. An idle scheduler with many
jobs sleeps until the earliest one (no busy polling).

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

The bounded heap
----------------
With a refill (`start(refill=...)`, `persched._engine.horizon`), the heap holds only
what is due soon, never every job. `_cursor` is the key ``(next_run_at,
job_id)`` of the last row the refills have read: every scheduled row at or
before it is *covered* (loaded, or pushed by whoever changed it since); rows
after it are loaded by a later refill. The dispatcher refills, with ``_cond``
released, from the cursor up to ``now + horizon`` when less than
half the horizon is left before the cursor and the heap holds fewer than a
refill's rows, and always once the cursor is reached. A pushed entry is
dropped when it is certainly not covered (its due time less the largest
jitter in use lies after the cursor: jitter only delays, so its next_run_at
does too) and not due within the horizon; a refill loads it when the cursor
gets there. While a refill reads, nothing is dropped: the refill may have
read the row before the change that pushed the entry committed.

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

Idle
----
`wait_idle()` (the testing kit behind `JobScheduler.wait_idle`) waits under
``_cond`` until no entry is due, no completion waits to be written, no cycle
is running, every worker is free and no run goes on elsewhere.
"""

from __future__ import annotations

import heapq
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from .. import _realtime
from .._model.instant import US_PER_SECOND, Instant, Micros
from .._model.triggers import jitter_reach
from .tracebacks import describe

if TYPE_CHECKING:
    from .._store.records import ClaimEntry
    from .timebase import Timebase

__all__ = ["Cursor", "Dispatcher", "Entry", "RefillCallback", "SearchCallback"]

logger = logging.getLogger(__name__)

Entry = tuple[Instant, str, int]  # (due_at, job_id, generation)

# The key (next_run_at, job_id) of the last row the refills read: every row at or before it is covered.
Cursor = tuple[Instant, str]
# Called on the dispatcher thread, on no lock: ``refill(cursor, before)`` returns the entries of
# the rows after `cursor` whose next_run_at lies before `before` (or the first of them) and the
# cursor after them (see `persched._engine.horizon.Horizon.refill`).
RefillCallback = Callable[[Cursor | None, Instant], tuple[list[Entry], Cursor]]
NO_HORIZON: Final = Micros(0)
REFILL_RETRY: Final = Micros(US_PER_SECOND)  # after a refill that failed (the database is away)

TAKE_UP_SLACK: Final = 1_000_000  # µs: a wake-up later than this after its due time is a stall

# Called on the dispatcher thread, on no lock, once per wake-up with every
# completion handed in since the last cycle and every due entry popped (a
# worker reserved for each), as ``(job_id, generation, due_at, taken_at)``.
# Writes both (one transaction each) and returns how many entries went to a
# worker; the other reservations are given back.
CycleCallback = Callable[[list[Any], list["ClaimEntry"]], int]
# Called on the dispatcher thread, on no lock, as ``search(limit, before)``: claims up to `limit`
# rows due before `before` that no claim took, whoever owns them (a worker reserved for each);
# returns how many went to a worker (`persched._engine.runs.RunBook.claim_overdue`).
SearchCallback = Callable[[int, Instant], int]
# How long a cycle behind a backlog waits for busy workers to report back (module docstring).
GATHER: Final = 0.002  # real seconds
# How often an instance with free workers searches, and how late a row must be.
SEARCH_EVERY: Final = Micros(500_000)


class Search(NamedTuple):
    """A claim by query the dispatcher is to make: `limit` workers reserved, rows due before `before`."""

    limit: int
    before: Instant


class Dispatcher:
    """Owns the heap, the pending completions and the dispatcher thread.

    Args:
        timebase: The scheduler's time frame.
        workers: How many runs may be in flight at once (reservations).
        cycle: Writes completions and claims due entries (see `CycleCallback`).
        max_batch: At most this many claims per cycle.
        search: Claims the rows that no claim took (see `SearchCallback`); None: never searched for.
            It runs only while other instances share the work (`repartition`).
        owns: Whether this instance owns a job (`persched._engine.membership`); None: every job
            (the work is not shared). `offer` and the refills keep only owned jobs.
        search_every: How often to search for rows no claim took (module docstring), when
            workers are free and nothing in the heap is due; only rows this late are taken.
        gather: Real seconds a cycle behind a backlog waits for busy workers (module docstring).
    """

    def __init__(
        self,
        timebase: Timebase,
        workers: int,
        cycle: CycleCallback,
        max_batch: int = 256,
        search: SearchCallback | None = None,
        search_every: Micros = SEARCH_EVERY,
        gather: float = GATHER,
        owns: Callable[[str], bool] | None = None,
    ) -> None:
        self._timebase = timebase
        self._owns = owns
        self._shared = False  # other instances share the work: search for what nobody queued
        self._cycle = cycle
        self._max_batch = max_batch
        self._search = search
        self._search_every = search_every
        self._searched_at = Instant(0)  # when it last searched (start(): as if then)
        self._cond = threading.Condition()
        self._heap: list[Entry] = []
        self._workers = workers
        self._free_workers = workers
        self._elsewhere = 0  # runs that gave their worker back and go on (async jobs on the application's loop)
        self._in_cycle = False
        self._gather = gather
        self._backlog = False  # the last claim left due entries for want of workers
        self._gather_until: float | None = None  # _realtime.monotonic() when this gathering ends
        self._asleep_since: Instant | None = None  # when it began waiting for the head with a worker free
        self._completions: list[Any] = []
        self._claiming = True  # False once shutdown began: completions only
        self._stopping = False
        self._exited = False
        # The bounded heap (module docstring); no refill: every entry is kept.
        self._refill: RefillCallback | None = None
        self._cursor: Cursor | None = None
        self._horizon = Micros(0)
        self._refill_rows = 0
        self._refilling: Instant | None = None  # the `before` of the refill reading now
        self._refill_retry_at: Instant | None = None
        self._just_refilled = False
        self._reload = False  # the next refill starts from the first row (repartition)
        self._thread = threading.Thread(target=self._loop, name="persched-dispatcher", daemon=True)

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
        """Fill the heap with ``(due_at, job_id, generation)`` and start the thread.

        With `refill`, the heap is bounded (module docstring): `entries` are the
        rows up to `cursor`, and refills load up to `horizon` ahead, `refill_rows`
        being what one refill reads at most. `shared`: other instances share the work
        (see `repartition`).
        """
        with self._cond:
            self._shared = shared
            self._searched_at = self._timebase.now()
            self._heap.extend(entries)
            heapq.heapify(self._heap)
            self._refill = refill
            self._cursor = cursor
            self._horizon = horizon
            self._refill_rows = refill_rows
        self._thread.start()

    def pickup_bound(self) -> Instant | None:
        """The latest next_run_at a changed job can have and still need a push
        (None: every one): later ones are loaded by a refill that has not begun."""
        with self._cond:
            if self._refill is None or self._cursor is None:
                return None
            at = self._cursor[0]
            return at if self._refilling is None else max(at, self._refilling)

    def _droppable(self, due_at: Instant) -> bool:
        """Under ``_cond``: an entry certainly not covered and not due within the horizon (module docstring)."""
        if self._refill is None or self._cursor is None or self._refilling is not None:
            return False
        return due_at - jitter_reach() > self._cursor[0] and due_at > self._timebase.now() + self._horizon

    def _refill_due(self, now: Instant) -> bool:
        """Under ``_cond``: whether to refill now (module docstring)."""
        if self._refill is None or not self._claiming or self._refilling is not None:
            return False
        if self._refill_retry_at is not None and now < self._refill_retry_at:
            return False
        if self._cursor is None or self._reload:
            return True
        return now >= self._refill_wake()

    def _refill_wake(self) -> Instant:
        """Under ``_cond``: when the next refill is due (given a cursor)."""
        assert self._cursor is not None
        at = self._cursor[0]
        if self._refill_retry_at is not None:
            return max(self._refill_retry_at, Instant(at - self._horizon // 2))
        if len(self._heap) < self._refill_rows:
            return Instant(at - self._horizon // 2)
        return at

    def _do_refill(self, before: Instant) -> None:
        """On no lock: read the rows after the cursor up to `before` and queue them."""
        assert self._refill is not None
        with self._cond:
            cursor = None if self._reload else self._cursor
            self._reload = False
        try:
            entries, new_cursor = self._refill(cursor, before)
        except BaseException as exc:  # noqa: BLE001 - the dispatcher must outlive any failure; retried
            logger.warning("loading the jobs due before %s failed, will retry: %s", before, describe(exc))
            with self._cond:
                self._refilling = None
                self._refill_retry_at = Instant(self._timebase.now() + REFILL_RETRY)
                self._cond.notify_all()
            return
        if self._owns is not None:
            # Hashed before taking the lock (thousands of rows); an entry kept by a view that
            # changes meanwhile costs at most one claim, and the change reloads anyway.
            entries = [entry for entry in entries if self._owns(entry[1])]
        with self._cond:
            for entry in entries:
                heapq.heappush(self._heap, entry)
            self._cursor = new_cursor
            self._refilling = None
            self._refill_retry_at = None
            self._just_refilled = True
            self._cond.notify_all()

    def push(self, due_at: Instant, job_id: str, generation: int) -> None:
        """Queue a run of `job_id`'s `generation` for `due_at`; wake the thread if it is the new head."""
        with self._cond:
            if self._asleep_since is not None and due_at < self._asleep_since:
                # Late already: the sleep did not wait for it (module docstring).
                self._asleep_since = max(self._asleep_since, self._timebase.now())
            if self._droppable(due_at):
                return  # a refill loads it when the cursor gets there (module docstring)
            entry = (due_at, job_id, generation)
            heapq.heappush(self._heap, entry)
            if self._heap[0] is entry:
                self._cond.notify_all()

    def offer(self, due_at: Instant, job_id: str, generation: int) -> None:
        """`push` if this instance owns the job (module docstring "Sharing the work")."""
        if self._owns is None or self._owns(job_id):
            self.push(due_at, job_id, generation)

    def repartition(self, shared: bool) -> None:
        """The members' view changed: keep the owned entries only, reload the owned rows with the
        next refill, and search for overdue rows only while `shared` (module docstring)."""
        owns = self._owns
        assert owns is not None, "repartition() of a dispatcher that owns every job"
        with self._cond:
            self._heap = [entry for entry in self._heap if owns(entry[1])]
            heapq.heapify(self._heap)
            self._reload = self._refill is not None
            self._shared = shared
            self._cond.notify_all()

    def retime(self) -> None:
        """The time frame moved (`persched._engine.skew`): look at the head again, and reload the
        rows due within the horizon of the new time with the next refill."""
        with self._cond:
            self._reload = self._refill is not None
            self._cond.notify_all()

    def release_worker(self) -> None:
        """A run gave its worker back before it ended (it goes on elsewhere: `persched._engine.workers`);
        its completion, handed in with ``frees_worker=False``, frees no other."""
        with self._cond:
            self._free_workers += 1
            self._elsewhere += 1
            self._cond.notify_all()

    def complete(self, completion: object, *, frees_worker: bool = True) -> bool:
        """Hand in a finished run (its worker is free again, unless it was released) for the next cycle to write.

        Returns False, taking nothing, once the thread has exited: the caller
        then writes the completion itself.
        """
        with self._cond:
            if self._exited:
                return False
            self._completions.append(completion)
            if frees_worker:
                self._free_workers += 1
            else:
                self._elsewhere -= 1
            self._cond.notify_all()
            return True

    def stop_claiming(self) -> None:
        """Claim nothing more; keep writing completions (shutdown has begun)."""
        with self._cond:
            self._claiming = False
            self._cond.notify_all()

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

    def wait_idle(self, timeout: float | None) -> bool:
        """Block until nothing is due or being written and every worker is free; False on timeout (real seconds)."""
        deadline = None if timeout is None else _realtime.monotonic() + timeout
        with self._cond:
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

    def _idle(self) -> bool:
        now = self._timebase.now()
        due = self._claiming and bool(self._heap) and self._heap[0][0] <= now
        due = due or self._refilling is not None or self._refill_due(now) or self._search_due(now)
        return (
            not (due or self._completions or self._in_cycle or self._elsewhere) and self._free_workers == self._workers
        )

    def _next_cycle(self) -> tuple[list[Any], list[ClaimEntry]] | Search | Instant | None:
        """Under ``_cond``: wait for completions, or due entries and free workers, and take them;
        or for a refill to be due, and return the instant to refill up to; or for a search."""
        clock = self._timebase.clock
        self._asleep_since = None
        while True:
            now = self._timebase.now()
            # A refill first, unless it was the last thing done and entries are due: the
            # entries loaded by a long catch-up of refills start while it goes on.
            head_due = bool(self._heap) and self._heap[0][0] <= now and self._free_workers > 0
            if self._refill_due(now) and not (self._just_refilled and head_due):
                self._refilling = Instant(now + self._horizon)
                self._just_refilled = False
                return self._refilling
            self._just_refilled = False
            if (left := self._gather_left()) > 0:
                self._cond.wait(left)
                continue
            due: list[ClaimEntry] = []
            if self._claiming and self._heap and self._free_workers:
                limit = min(self._free_workers, self._max_batch)
                taken: set[tuple[str, int]] = set()  # (job_id, generation) of the entries taken
                while self._heap and self._heap[0][0] <= now and len(due) < limit:
                    due_at, job_id, generation = heapq.heappop(self._heap)
                    if (job_id, generation) in taken:
                        continue  # a duplicate entry: one worker is reserved for the job already
                    taken.add((job_id, generation))
                    due.append((job_id, generation, due_at, self._taken_at(due_at, now)))
                self._free_workers -= len(due)  # reserve before the claim
                self._backlog = len(due) == limit and bool(self._heap) and self._heap[0][0] <= now
                self._gather_until = None
            if due or self._completions:
                completions, self._completions = self._completions, []
                self._in_cycle = True
                return completions, due
            if self._search_due(now):
                # Nothing of the heap's is due and workers are free: claim what nobody took.
                limit = min(self._free_workers, self._max_batch)
                self._free_workers -= limit  # reserve before the claim
                self._searched_at = now
                self._in_cycle = True
                return Search(limit, Instant(now - self._search_every))
            if self._stopping:
                self._exited = True
                return None
            timeout = None
            now = self._timebase.now()
            if self._claiming and self._heap and self._free_workers:
                self._asleep_since = now if self._asleep_since is None else self._asleep_since
                timeout = (self._heap[0][0] - now) / US_PER_SECOND
            else:
                self._asleep_since = None
            if (search_at := self._next_search()) is not None:
                until_search = max(0, search_at - now) / US_PER_SECOND
                timeout = until_search if timeout is None else min(timeout, until_search)
            if self._claiming and self._refill is not None and self._refilling is None and self._cursor is not None:
                # Wake for the next refill too (the head may lie beyond the cursor, or nothing is queued).
                until_refill = max(0, self._refill_wake() - now) / US_PER_SECOND
                timeout = until_refill if timeout is None else min(timeout, until_refill)
            clock.wait(self._cond, timeout)

    def _gather_left(self) -> float:
        """Under ``_cond``: real seconds left to wait for busy workers before the next claim,
        0 to claim now (module docstring)."""
        if not (self._backlog and self._claiming and 0 < self._free_workers < self._workers):
            return 0.0
        if not (self._heap and self._heap[0][0] <= self._timebase.now()):
            return 0.0
        now = _realtime.monotonic()
        if self._gather_until is None:
            self._gather_until = now + self._gather
        return max(0.0, self._gather_until - now)

    def _next_search(self) -> Instant | None:
        """Under ``_cond``: when to search for rows no claim took (module docstring); None while
        no search may run (none configured, not claiming, no free worker)."""
        if self._search is None or not self._shared or not self._claiming or self._free_workers <= 0:
            return None
        return Instant(self._searched_at + self._search_every)

    def _search_due(self, now: Instant) -> bool:
        """Under ``_cond``: whether to search for rows no claim took now."""
        search_at = self._next_search()
        return search_at is not None and now >= search_at

    def _taken_at(self, due_at: Instant, now: Instant) -> Instant:
        """Under ``_cond``: when an entry popped at `now` was taken up (module docstring)."""
        asleep_since = self._asleep_since
        if asleep_since is None or now - due_at > TAKE_UP_SLACK:
            return now
        return Instant(min(now, max(due_at, asleep_since)))

    def _loop(self) -> None:
        while True:
            with self._cond:
                batch = self._next_cycle()
            if batch is None:
                return
            if isinstance(batch, int):
                self._do_refill(batch)
                continue
            handed_over = 0
            if isinstance(batch, Search):
                reserved = batch.limit
                assert self._search is not None
                try:
                    handed_over = self._search(batch.limit, batch.before)
                except BaseException as exc:  # noqa: BLE001 - the dispatcher must outlive any failure
                    logger.error("a search for overdue runs failed\n%s", describe(exc))
            else:
                completions, due = batch
                reserved = len(due)
                try:
                    handed_over = self._cycle(completions, due)
                except BaseException as exc:  # noqa: BLE001 - the dispatcher must outlive any failure
                    logger.error("a dispatch cycle failed\n%s", describe(exc))
            with self._cond:
                self._free_workers += reserved - handed_over
                self._in_cycle = False
                self._cond.notify_all()
