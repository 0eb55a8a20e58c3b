"""The bounded heap's reads: the refills through the index, and the start-up sweep.

`Horizon.refill` reads the rows after the dispatcher's cursor due within the
horizon, at most `REFILL_ROWS`, through the ``(state, next_run_at, job_id,
owner_bucket)`` index; while other instances share the work, only the rows of
the owner buckets this instance owns and those with none
(`persched._engine.membership`). `Horizon.sweep` walks those rows in key order,
`SWEEP_ROWS` a transaction, for rows written ahead of the clock and run-now
requests beyond the horizon. Why nothing due is forgotten:
docs/explanation/engine.md, "The window and the bounded heap".
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from .._model.buckets import bucket_of
from .._store.ahead import log_correction

if TYPE_CHECKING:
    from .._model.instant import Instant
    from .._store import Store
    from .membership import Membership
    from .timebase import Timebase
    from .window import Cursor, Entry

__all__ = ["DEFAULT_HORIZON_SECONDS", "REFILL_ROWS", "SWEEP_ROWS", "Horizon"]

DEFAULT_HORIZON_SECONDS: Final = 60.0
MIN_HORIZON_SECONDS: Final = 2.0  # above the dispatcher's claim retry (1 s), which pushes "now + 1 s"
REFILL_ROWS = 10_000  # rows one refill reads at most (tests make it small)
SWEEP_ROWS = 5_000  # rows one sweep transaction reads


class Horizon:
    """The refills and the sweep of one scheduler."""

    def __init__(self, store: Store, timebase: Timebase, membership: Membership) -> None:
        self._store = store
        self._timebase = timebase
        self._membership = membership  # whose `buckets` are this instance's owner buckets now
        self._swept: str | None = None  # the last job_id swept
        self._sweep_done = False
        self.rows = REFILL_ROWS

    def refill(self, cursor: Cursor | None, before: Instant) -> tuple[list[Entry], Cursor]:
        """The owned rows after `cursor` due before `before`, and the cursor after the rows read."""
        buckets = self._membership.buckets  # one view for the read and the filter
        entries, last = self._store.load_due(cursor, before, self.rows, buckets)
        if buckets is not None:  # rows whose bucket is NULL come to every member: keep the owned ones
            entries = [entry for entry in entries if bucket_of(entry[1]) in buckets]
        return entries, (before, "") if last is None else last

    def sweep(self, queue: _Queue) -> bool:
        """One batch of the sweep: correct rows ahead, queue pending run-now requests; True while rows are left."""
        if self._sweep_done:
            return False
        buckets = self._membership.buckets
        run_now, corrections, last = self._store.sweep(self._swept, SWEEP_ROWS, self._timebase.now, buckets)
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
