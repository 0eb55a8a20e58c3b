"""The heap of due entries and its bounded window: passive, guarded by the dispatcher's lock.

An entry is ``(due_at, job_id, generation)``: every field compares, so ties never
compare payloads (the hazard behind CPython `sched`'s sequence numbers, bpo-19270).
`Window` has no lock and no thread: the `persched._engine.dispatcher.Dispatcher`
calls it under its condition, and only its thread pops, so a push, a pop and the
decision to sleep see one state.

`offer` keeps only an owned job's entry, `push` any (an adopted job). With refills
the heap holds only what is due within the horizon: every row at or before the
cursor is covered, and a push is dropped only when it is certainly not covered,
not due within the horizon, and no refill is reading (docs/explanation/engine.md,
"The window and the bounded heap").
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Final

from .._model.instant import US_PER_SECOND, Instant, Micros

if TYPE_CHECKING:
    from collections.abc import Callable

    from .timebase import Timebase

__all__ = ["Cursor", "Entry", "Window"]

Entry = tuple[Instant, str, int]  # (due_at, job_id, generation)
# The key (next_run_at, job_id) of the last row the refills read: every row at or before it is covered.
Cursor = tuple[Instant, str]

REFILL_RETRY: Final = Micros(US_PER_SECOND)  # after a refill that failed (the database is away)


class Window:
    """The heap of due entries and the refills' cursor; the caller holds the dispatcher's lock."""

    def __init__(self, timebase: Timebase, owns: Callable[[str], bool], reach: Callable[[], Micros]) -> None:
        self._timebase = timebase
        self.owns = owns
        self._reach = reach
        self._heap: list[Entry] = []
        self.bounded = False  # with refills
        self._cursor: Cursor | None = None
        self._horizon = Micros(0)
        self._rows = 0  # what one refill reads at most
        self.refilling: Instant | None = None  # the `before` of the refill under way
        self._retry_at: Instant | None = None
        self.just_refilled = False
        self._reload = False  # the next refill starts from the first row (repartition, retime)

    def load(self, entries: list[Entry], cursor: Cursor | None, horizon: Micros, rows: int, *, bounded: bool) -> None:
        """Fill the heap; with `bounded`, the refills go on from `cursor` up to `horizon` ahead."""
        self._heap.extend(entries)
        heapq.heapify(self._heap)
        self.bounded = bounded
        self._cursor = cursor
        self._horizon = horizon
        self._rows = rows

    def __len__(self) -> int:
        return len(self._heap)

    def head(self) -> Instant | None:
        return self._heap[0][0] if self._heap else None

    def head_due(self, now: Instant) -> bool:
        return bool(self._heap) and self._heap[0][0] <= now

    def nth_due(self, n: int) -> Instant | None:
        """The due time of the `n`-th earliest entry queued (None: fewer are), in O(n log n):
        a walk down the heap from its root, which never looks past the `n` earliest."""
        heap = self._heap
        if len(heap) < n or n < 1:
            return None
        frontier = [(heap[0][0], 0)]
        for _ in range(n - 1):
            _, i = heapq.heappop(frontier)
            for child in (2 * i + 1, 2 * i + 2):
                if child < len(heap):
                    heapq.heappush(frontier, (heap[child][0], child))
        return frontier[0][0]

    def push(self, due_at: Instant, job_id: str, generation: int) -> bool:
        """Queue an entry unless a refill will load it; True if it is the new head."""
        if self._droppable(due_at):
            return False
        entry = (due_at, job_id, generation)
        heapq.heappush(self._heap, entry)
        return self._heap[0] is entry

    def offer(self, due_at: Instant, job_id: str, generation: int) -> bool:
        """`push` if this instance owns the job; True if it is the new head."""
        return self.owns(job_id) and self.push(due_at, job_id, generation)

    def pop_due(self, now: Instant, limit: int) -> list[Entry]:
        """Pop up to `limit` entries due at `now`, one per (job_id, generation); duplicates are dropped."""
        due: list[Entry] = []
        taken: set[tuple[str, int]] = set()
        while self._heap and self._heap[0][0] <= now and len(due) < limit:
            entry = heapq.heappop(self._heap)
            if (entry[1], entry[2]) in taken:
                continue
            taken.add((entry[1], entry[2]))
            due.append(entry)
        return due

    def repartition(self) -> None:
        """The members' view changed: keep the owned entries, reload the owned rows with the next refill."""
        self._heap = [entry for entry in self._heap if self.owns(entry[1])]
        heapq.heapify(self._heap)
        self._reload = self.bounded

    def retime(self) -> None:
        """The time frame moved: reload the rows due within the horizon of the new time."""
        self._reload = self.bounded

    def pickup_bound(self) -> Instant | None:
        """The latest next_run_at a changed job can have and still need a push (None: every one)."""
        if not self.bounded or self._cursor is None:
            return None
        at = self._cursor[0]
        return at if self.refilling is None else max(at, self.refilling)

    def _droppable(self, due_at: Instant) -> bool:
        """An entry certainly not covered and not due within the horizon: a refill will load it."""
        if not self.bounded or self._cursor is None or self.refilling is not None:
            return False
        return due_at - self._reach() > self._cursor[0] and due_at > self._timebase.now() + self._horizon

    # -- refills ---------------------------------------------------------------------

    def refill_due(self, now: Instant) -> bool:
        if not self.bounded or self.refilling is not None:
            return False
        if self._retry_at is not None and now < self._retry_at:
            return False
        if self._cursor is None or self._reload:
            return True
        wake = self.refill_wake()
        return wake is not None and now >= wake

    def refill_wake(self) -> Instant | None:
        """When the next refill is due (None: no refill waits for a time)."""
        if not self.bounded or self.refilling is not None or self._cursor is None:
            return None
        at = self._cursor[0]
        if self._retry_at is not None:
            return max(self._retry_at, Instant(at - self._horizon // 2))
        if len(self._heap) < self._rows:
            return Instant(at - self._horizon // 2)
        return at

    def begin_refill(self, now: Instant) -> tuple[Cursor | None, Instant]:
        """A refill starts: the cursor to read after (None: from the first row) and the `before` to read up to."""
        self.refilling = Instant(now + self._horizon)
        self.just_refilled = False
        cursor = None if self._reload else self._cursor
        self._reload = False
        return cursor, self.refilling

    def refilled(self, entries: list[Entry], cursor: Cursor) -> None:
        """The refill read `entries` (owned ones) and moved the cursor to `cursor`."""
        for entry in entries:
            heapq.heappush(self._heap, entry)
        self._cursor = cursor
        self.refilling = None
        self._retry_at = None
        self.just_refilled = True

    def refill_failed(self) -> None:
        """The refill failed (the database is away): try again later."""
        self.refilling = None
        self._retry_at = Instant(self._timebase.now() + REFILL_RETRY)
