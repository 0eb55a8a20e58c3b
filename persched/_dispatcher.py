"""The heap of due times and the dispatcher thread that starts runs.

Threads and locks
-----------------
The heap holds one small entry per scheduled job: ``(due_at, seq, job_id,
generation)``, where `due_at` is the slot the store had for the job when the
entry was pushed (epoch seconds in the scheduler's `Timebase` frame) and
`seq` breaks ties so that entries never compare payloads (CPython `sched`,
bpo-19270). Entries are pushed by any thread (schedule(), a worker after a
completion, the heartbeat after a recovery) and popped only by the dispatcher.

``_cond`` guards the heap, the count of free workers and the stop flag, and
nothing else: no database call, no user code, no logging and no join happens
while it is held. The dispatcher decides under it (pop a due entry, reserve a
worker: SPEC §2, so a claimed run never waits for a thread), releases it, and
then acts: it calls `claim`, which runs the conditional UPDATE and hands a won
run to the reserved worker. Lock order: ``_cond`` before a `FakeClock`'s
lock, never the reverse.

Why stale entries are harmless
------------------------------
The heap is a hint; the store decides. An entry left behind by deschedule(),
by a replacement (new generation) or by another instance's run fails its
claim, because the claim is conditional on generation, state and slot. The
entry is then dropped, or pushed again at the row's real next slot
(`claim` tells which). Nothing is ever removed from the heap by search.

Waiting
-------
The dispatcher sleeps on ``_cond`` with a timeout until the head entry is due
(measured on the monotonic clock through the `Timebase`), or until it is
notified: a new head, a freed worker, or stop. An idle scheduler with many
jobs sleeps until the earliest one (SPEC §2: no busy polling).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._timebase import Timebase

__all__ = ["Dispatcher", "Entry"]

logger = logging.getLogger(__name__)

Entry = tuple[float, int, str, int]  # (due_at, seq, job_id, generation)

# Called on the dispatcher thread, on no lock, with a popped due entry and a
# worker reserved for it. Returns True if the run went to that worker;
# False gives the reservation back.
ClaimCallback = Callable[[Entry], bool]


class Dispatcher:
    """Owns the heap and the dispatcher thread.

    Args:
        timebase: The scheduler's time frame.
        workers: How many runs may be in flight at once (reservations).
        claim: Claims an entry in the store and hands it to a worker.
    """

    def __init__(self, timebase: Timebase, workers: int, claim: ClaimCallback) -> None:
        self._timebase = timebase
        self._claim = claim
        self._cond = threading.Condition()
        self._heap: list[Entry] = []
        self._seq = itertools.count()
        self._free_workers = workers
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name="persched-dispatcher", daemon=True)

    def start(self, entries: list[tuple[float, str, int]]) -> None:
        """Fill the heap with ``(due_at, job_id, generation)`` and start the thread."""
        with self._cond:
            self._heap.extend((due_at, next(self._seq), job_id, gen) for due_at, job_id, gen in entries)
            heapq.heapify(self._heap)
        self._thread.start()

    def push(self, due_at: float, job_id: str, generation: int) -> None:
        """Queue a run of `job_id`'s `generation` for `due_at`; wake the thread if it is the new head."""
        with self._cond:
            entry = (due_at, next(self._seq), job_id, generation)
            heapq.heappush(self._heap, entry)
            if self._heap[0] is entry:
                self._cond.notify_all()

    def release_worker(self) -> None:
        """Give back a worker reservation (a run finished, or a claim failed)."""
        with self._cond:
            self._free_workers += 1
            self._cond.notify_all()

    def stop(self) -> None:
        """Stop dispatching (idempotent); the thread exits at its next wake."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()

    def join(self, timeout: float | None) -> None:
        """Wait for the dispatcher thread to end."""
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def __len__(self) -> int:
        with self._cond:
            return len(self._heap)

    def _next_due(self) -> Entry | None:
        """Under ``_cond``: wait until an entry is due and a worker is free; pop it."""
        clock = self._timebase.clock
        while not self._stopping:
            if not self._heap or self._free_workers == 0:
                clock.wait(self._cond, None)
                continue
            wait = self._heap[0][0] - self._timebase.now()
            if wait > 0:
                clock.wait(self._cond, wait)
                continue
            self._free_workers -= 1  # SPEC §2: reserve before the claim
            return heapq.heappop(self._heap)
        return None

    def _loop(self) -> None:
        while True:
            with self._cond:
                entry = self._next_due()
            if entry is None:
                return
            try:
                handed_over = self._claim(entry)
            except BaseException:
                logger.exception("dispatching %s generation %d failed", entry[2], entry[3])
                handed_over = False
            if not handed_over:
                self.release_worker()
