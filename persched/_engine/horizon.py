"""The bounded heap's reads: the refills through the index, and the sweep.

`Horizon.refill` reads the rows after the dispatcher's cursor due within the
horizon, at most `REFILL_ROWS`, through the ``(state, next_run_at, job_id,
owner_bucket)`` index; while other instances share the work, only the rows of
the owner buckets this instance owns and those with none
(`persched._engine.membership`). `Horizon.sweep` walks those rows in key order,
`SWEEP_ROWS` a transaction, for rows written ahead of the clock and run-now
requests beyond the horizon: at start-up every owned bucket, and after a view
change the buckets it gained (`Horizon.view_changed`), from their first row.
Only the heartbeat thread calls `sweep` and `view_changed` once `start()` has
run the first batch. Why nothing due is forgotten: docs/explanation/engine.md,
"The window and the bounded heap".
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from .._model.buckets import BUCKETS, bucket_of
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
_EVERY_BUCKET: Final = frozenset(range(BUCKETS))


class Horizon:
    """The refills and the sweep of one scheduler."""

    def __init__(self, store: Store, timebase: Timebase, membership: Membership) -> None:
        self._store = store
        self._timebase = timebase
        self._membership = membership  # whose `buckets` are this instance's owner buckets now
        self._had: frozenset[int] = frozenset()  # the buckets owned at the last look: none before the first
        self._walk: frozenset[int] = frozenset()  # the buckets the walk under way sweeps (none: no walk)
        self._after: str | None = None  # the last job_id that walk read
        self._gained: frozenset[int] = frozenset()  # buckets gained during that walk: the next walk's
        self.rows = REFILL_ROWS

    def refill(self, cursor: Cursor | None, before: Instant) -> tuple[list[Entry], Cursor]:
        """The owned rows after `cursor` due before `before`, and the cursor after the rows read."""
        buckets = self._membership.buckets  # one view for the read and the filter
        entries, last = self._store.load_due(cursor, before, self.rows, buckets)
        if buckets is not None:  # rows whose bucket is NULL come to every member: keep the owned ones
            entries = [entry for entry in entries if bucket_of(entry[1]) in buckets]
        return entries, (before, "") if last is None else last

    def view_changed(self) -> bool:
        """Note the buckets owned now that were not at the last look; True while the sweep has rows to read."""
        buckets = self._membership.buckets
        owned = _EVERY_BUCKET if buckets is None else buckets
        self._gained |= owned - self._had
        self._had = owned
        return bool(self._walk or self._gained)

    def sweep(self, queue: _Queue) -> bool:
        """One batch of the sweep: correct rows ahead, queue owned pending run-now requests; True while rows are left.

        A walk reads the rows of its buckets still owned, from the first job_id; the buckets gained
        meanwhile wait for the next walk, since the cursor has passed some of their rows.
        """
        self.view_changed()
        if not self._walk:
            if not self._gained:
                return False
            self._walk, self._gained, self._after = self._gained, frozenset(), None
        owned = self._had
        walk = self._walk & owned  # a bucket lost meanwhile is its new owner's to sweep
        last = None
        if walk:
            buckets = None if walk == _EVERY_BUCKET else walk
            run_now, corrections, last = self._store.sweep(self._after, SWEEP_ROWS, self._timebase.now, buckets)
            for c in corrections:
                log_correction(c)
                if c.due is not None and bucket_of(c.job_id) in owned:  # a NULL bucket's row may be another's
                    queue(c.due, c.job_id, c.generation)
            for due, job_id, generation in run_now:
                if bucket_of(job_id) in owned:
                    queue(due, job_id, generation)
        self._after = last
        if last is None:
            self._walk = frozenset()
        return bool(self._walk or self._gained)


if TYPE_CHECKING:
    from collections.abc import Callable

    _Queue = Callable[[Instant, str, int], None]
