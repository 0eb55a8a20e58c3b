"""The heap of due times and the dispatcher thread that starts runs.

Threads and locks
-----------------
The heap holds one small entry per scheduled job: ``(due_at, job_id,
generation)``, where `due_at` is the slot the store had for the job when the
entry was pushed (epoch seconds in the scheduler's `Timebase` frame). Every
field is comparable, so ties never compare payloads (the hazard behind
CPython `sched`'s sequence numbers, bpo-19270, cannot arise); three fields
keep an entry under 200 bytes. Entries are pushed by any thread (schedule(),
a completion, the heartbeat after a recovery or a change picked up) and
popped only by the dispatcher.

``_cond`` guards the heap, the count of free workers, the completions handed
in and the stop flags, and nothing else: no database call, no user code, no
logging and no join happens while it is held. The dispatcher decides under it
(pop every due entry it has free workers for, reserving one worker each:
SPEC §2, so a claimed run never waits for a thread; take the completions
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

Waiting
-------
The dispatcher sleeps on ``_cond`` with a timeout until the head entry is due
(measured on the monotonic clock through the `Timebase`), or until it is
notified: a new head, a freed worker, a completion handed in, or stop. An idle scheduler with many
jobs sleeps until the earliest one (SPEC §2: no busy polling).
"""

from __future__ import annotations

import heapq
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._tracebacks import describe

if TYPE_CHECKING:
    from ._timebase import Timebase

__all__ = ["Dispatcher", "Entry"]

logger = logging.getLogger(__name__)

Entry = tuple[float, str, int]  # (due_at, job_id, generation)

# Called on the dispatcher thread, on no lock, once per wake-up with every
# completion handed in since the last cycle and every due entry popped (a
# worker reserved for each). Writes both (one transaction each) and returns
# how many entries went to a worker; the other reservations are given back.
CycleCallback = Callable[[list[Any], list[Entry]], int]


class Dispatcher:
    """Owns the heap, the pending completions and the dispatcher thread.

    Args:
        timebase: The scheduler's time frame.
        workers: How many runs may be in flight at once (reservations).
        cycle: Writes completions and claims due entries (see `CycleCallback`).
        max_batch: At most this many claims per cycle.
    """

    def __init__(self, timebase: Timebase, workers: int, cycle: CycleCallback, max_batch: int = 256) -> None:
        self._timebase = timebase
        self._cycle = cycle
        self._max_batch = max_batch
        self._cond = threading.Condition()
        self._heap: list[Entry] = []
        self._free_workers = workers
        self._completions: list[Any] = []
        self._claiming = True  # False once shutdown began: completions only
        self._stopping = False
        self._exited = False
        self._thread = threading.Thread(target=self._loop, name="persched-dispatcher", daemon=True)

    def start(self, entries: list[tuple[float, str, int]]) -> None:
        """Fill the heap with ``(due_at, job_id, generation)`` and start the thread."""
        with self._cond:
            self._heap.extend(entries)
            heapq.heapify(self._heap)
        self._thread.start()

    def push(self, due_at: float, job_id: str, generation: int) -> None:
        """Queue a run of `job_id`'s `generation` for `due_at`; wake the thread if it is the new head."""
        with self._cond:
            entry = (due_at, job_id, generation)
            heapq.heappush(self._heap, entry)
            if self._heap[0] is entry:
                self._cond.notify_all()

    def complete(self, completion: object) -> bool:
        """Hand in a finished run (its worker is free again) for the next cycle to write.

        Returns False, taking nothing, once the thread has exited: the caller
        then writes the completion itself.
        """
        with self._cond:
            if self._exited:
                return False
            self._completions.append(completion)
            self._free_workers += 1
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

    def _next_cycle(self) -> tuple[list[Any], list[Entry]] | None:
        """Under ``_cond``: wait for completions, or due entries and free workers; take them."""
        clock = self._timebase.clock
        while True:
            due: list[Entry] = []
            if self._claiming and self._heap and self._free_workers:
                now = self._timebase.now()
                limit = min(self._free_workers, self._max_batch)
                while self._heap and self._heap[0][0] <= now and len(due) < limit:
                    due.append(heapq.heappop(self._heap))
                self._free_workers -= len(due)  # SPEC §2: reserve before the claim
            if due or self._completions:
                completions, self._completions = self._completions, []
                return completions, due
            if self._stopping:
                self._exited = True
                return None
            timeout = None
            if self._claiming and self._heap and self._free_workers:
                timeout = self._heap[0][0] - self._timebase.now()
            clock.wait(self._cond, timeout)

    def _loop(self) -> None:
        while True:
            with self._cond:
                batch = self._next_cycle()
            if batch is None:
                return
            completions, due = batch
            handed_over = 0
            try:
                handed_over = self._cycle(completions, due)
            except BaseException as exc:  # noqa: BLE001 - the dispatcher must outlive any failure
                logger.error("a dispatch cycle failed\n%s", describe(exc))
            if handed_over < len(due):
                with self._cond:
                    self._free_workers += len(due) - handed_over
                    self._cond.notify_all()
