"""The bounded heap: what is loaded from the jobs table, and when.

The heap (`persched._engine.window`) holds only the jobs due within a horizon,
so that start-up time and memory do not grow with the number of jobs:

- **Refill.** `Horizon.refill` reads the scheduled, not paused rows whose
  ``(next_run_at, job_id)`` lies after the dispatcher's cursor and whose
  next_run_at lies before ``now + horizon_seconds``, in that order through the
  ``(state, next_run_at, job_id, owner_bucket)`` index, at most `REFILL_ROWS`
  of them. While other instances share the work, it reads only the rows of
  the owner buckets this instance owns (`persched._engine.membership`) and
  those whose bucket is NULL; alone, every row. When it read
  that many, the cursor stops at the last row read (nothing beyond it is
  skipped: the next refill goes on from there); otherwise it moves to the
  end of the window. Due times add the job's jitter (jitter only delays, so
  loading by next_run_at finds every row whose jittered time is due) and take
  a pending run-now. `start()` runs the first refill itself; the dispatcher
  runs the others on its thread, with its lock released.
- **Everything else that makes a job due** pushes it (schedule(),
  resume(), run_now(), completions, lost claims, recovery, changes made
  elsewhere) and the dispatcher drops the entries that a later refill will
  load. The change pick-up asks the store only for the changed rows the
  refills have passed (`Dispatcher.pickup_bound`), and those with a pending
  run-now request.
- **Sweep.** Two things cannot be found through the index: rows written while
  a wall clock was ahead (docs/reference/behaviour.md, "Clock corrections
  across a restart": whether a row is ahead depends on its own interval or
  cron expression) and run-now requests pending on jobs whose slot lies
  beyond the horizon (``run_now_at`` has no index). `Horizon.sweep` walks the
  namespace's scheduled rows (of its owner buckets, as the refill) in
  primary-key order, `SWEEP_ROWS` per
  transaction: `start()` runs the first batch (so a small table is swept
  before start() returns), the heartbeat thread the others, back to back,
  outside any lock (what a sweep costs: docs/explanation/performance.md,
  "Start-up and memory"). A row found ahead is corrected
  (`persched._store.due.DueStore.sweep`); a pending run-now is queued.

Why nothing due is forgotten: every row at or before the cursor was either
read by a refill (whose entry is in the heap, or was taken and is then
pushed again by its completion or its lost claim), or changed after that
read, and whoever changed it pushed it (the dispatcher keeps every push while
a refill reads, and otherwise drops only entries whose row lies after the
cursor). Rows after the cursor are read by a refill before the cursor is
reached. A stale entry costs one failed claim; the database decides.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from .._store.ahead import log_correction

if TYPE_CHECKING:
    from .._model.instant import Instant
    from .._store import Store
    from .timebase import Timebase
    from .window import Cursor, Entry

__all__ = ["DEFAULT_HORIZON_SECONDS", "REFILL_ROWS", "SWEEP_ROWS", "Horizon"]

DEFAULT_HORIZON_SECONDS: Final = 60.0
MIN_HORIZON_SECONDS: Final = 2.0  # above the dispatcher's claim retry (1 s), which pushes "now + 1 s"
REFILL_ROWS = 10_000  # rows one refill reads at most (module-level so that tests can make it small)
SWEEP_ROWS = 5_000  # rows one sweep transaction reads


class Horizon:
    """The refills and the sweep of one scheduler (module docstring)."""

    def __init__(self, store: Store, timebase: Timebase, buckets: Callable[[], frozenset[int] | None]) -> None:
        self._store = store
        self._timebase = timebase
        self._buckets = buckets  # the owner buckets of this instance now (`persched._engine.membership`)
        self._swept: str | None = None  # the last job_id swept
        self._sweep_done = False
        self.rows = REFILL_ROWS

    def refill(self, cursor: Cursor | None, before: Instant) -> tuple[list[Entry], Cursor]:
        """The rows after `cursor` due before `before`, and the cursor after them."""
        entries, last = self._store.load_due(cursor, before, self.rows, self._buckets())
        return entries, (before, "") if last is None else last

    def sweep(self, queue: _Queue) -> bool:
        """One batch of the sweep: correct rows ahead of the clock, queue pending run-now
        requests; return True while rows are left."""
        if self._sweep_done:
            return False
        run_now, corrections, last = self._store.sweep(self._swept, SWEEP_ROWS, self._timebase.now, self._buckets())
        for c in corrections:
            log_correction(c)
            if c.due is not None:
                queue(c.due, c.job_id, c.generation)
        for due, job_id, generation in run_now:
            queue(due, job_id, generation)
        self._swept = last
        self._sweep_done = last is None
        return not self._sweep_done


if TYPE_CHECKING:
    from collections.abc import Callable

    _Queue = Callable[[Instant, str, int], None]
