"""The change pick-up: queueing the jobs that other instances, or the command line, changed.

Every `pickup_seconds` the heartbeat reads the change counter (``persched_changes``)
and queues the jobs changed since it last looked. `persched._engine.pickup`'s
signals make it read sooner, at most once per `pickup_check_seconds`; the poll
stays the backstop. A pick-up that sees the counter move also asks the membership
whether a member came or went, and re-reads the cancel requests. Correctness never
depends on it: a stale heap entry's claim fails (docs/explanation/engine.md,
"The change pick-up").
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Final

from .. import _loggers
from .._model.instant import US_PER_SECOND, Instant, Micros
from .._store.db import shares_one_connection
from .periodic import AT_ONCE, NEVER, PeriodicTask
from .pickup import ChangeListener, CommitWatch

if TYPE_CHECKING:
    from collections.abc import Callable

    from .._store import Store
    from .leases import QueueCallback
    from .membership import Membership
    from .timebase import Timebase

__all__ = ["QUIET_CHECK", "ChangePickup"]

logger = logging.getLogger(_loggers.LIBRARY)

_CHANGES_LOGGED: Final = 10  # picked-up changes named one by one per round; more are counted

QUIET_CHECK: Final = Micros(US_PER_SECOND)  # the longest wait between two checks while nothing commits


class ChangePickup(PeriodicTask):
    """Reads the change counter and queues what changed elsewhere.

    `cancels` stops the runs here that a cancel asked for; it returns True while a
    request found no run here to stop yet, and is then called at every pick-up.
    """

    def __init__(
        self,
        store: Store,
        timebase: Timebase,
        queue: QueueCallback,
        membership: Membership,
        repartition: Callable[[bool], None],
        changed: Callable[[], None],
        *,
        pickup: Micros,
        pickup_check: Micros,
        cancels: Callable[[], bool] | None = None,
    ) -> None:
        super().__init__("picking up changes", pickup)
        self._cancels = cancels
        self._cancels_owed = False
        self._store = store
        self._timebase = timebase
        self._queue = queue
        self._membership = membership
        self._repartition = repartition
        self._changed = changed
        self._pickup_check = pickup_check
        self._check_every: int = pickup_check  # microseconds; backs off while nothing commits
        self._next_pickup = self._earliest = AT_ONCE  # the poll; a requested pick-up, not before `_earliest`
        self._next_check = NEVER  # SQLite's commit check, once there is a watch
        self.owed = False  # a signal asked for a pick-up, which runs at `_earliest`
        self._watch: CommitWatch | None = None
        self._listener: ChangeListener | None = None
        self._change_seq = 0
        self._bound: Callable[[], Instant | None] | None = None

    def start(self, change_seq: int, bound: Callable[[], Instant | None] | None, request: Callable[[], None]) -> None:
        """Look for changes after `change_seq`, queueing those due by `bound()`; a listener calls `request`."""
        self._change_seq = change_seq
        self._bound = bound
        engine, signal = self._store.engine, self._store.dialect.change_signal
        if signal == "data_version" and not shares_one_connection(engine):  # one connection: nobody else commits
            self._watch = CommitWatch(engine, self._store.dialect)
            self._next_check = AT_ONCE
        elif signal == "notify":
            clock = self._timebase.clock
            self._listener = ChangeListener(engine, self._store.dialect, clock, self.period, request)
            self._listener.start()
        self._schedule()

    def stop(self) -> None:
        """Stop the listener thread, if any (idempotent; from any thread)."""
        if self._listener is not None:
            self._listener.stop()

    def join(self, timeout: float | None) -> None:
        """Wait for the listener thread, if any, to end."""
        if self._listener is not None:
            self._listener.join(timeout)

    def close(self) -> None:
        """Give the commit check's connection back (the heartbeat thread ends)."""
        if self._watch is not None:
            self._watch.close()

    def request(self) -> None:
        """A signal asked for a pick-up: run one as soon as `pickup_check` allows."""
        self.owed = True
        self._schedule()

    def run(self, now: int) -> None:
        """Check for commits if due, then pick up if the poll or a signal says so; the next round is set first."""
        checked = self._watch is not None and now >= self._next_check
        if self._watch is not None and checked:
            if self._watch.changed():
                self.owed, self._check_every = True, self._pickup_check
            else:  # quiet: wait twice as long each time, up to QUIET_CHECK
                self._check_every = max(self._pickup_check, min(2 * self._check_every, self.period, QUIET_CHECK))
        picks = now >= self._next_pickup or (self.owed and now >= self._earliest)
        if picks:
            self.owed = False
            self._earliest, self._next_pickup = now + self._pickup_check, now + self.period
        if checked:  # no later than the poll: a quiet scheduler wakes once for both
            self._next_check = min(now + self._check_every, max(self._next_pickup, now + self._pickup_check))
        self._schedule()
        if picks:
            self.round()

    def _schedule(self) -> None:
        self.due = min(self._next_pickup, self._next_check, self._earliest if self.owed else NEVER)

    def round(self) -> None:
        """Queue the jobs changed elsewhere since the last look; one read of the counter if none."""
        seen = self._store.change_seq()
        if seen == self._change_seq:
            if self._cancels_owed:
                self._stop_cancelled()
            return
        if self._store.only_own_changes(self._change_seq, seen):
            # Each call that made these changes queued them itself. A cancel() made here may
            # have found its run not yet taken by a worker: its request waits for this read.
            self._change_seq = seen
            self._stop_cancelled()
            return
        self._changed()
        self._notice()
        before = self._change_seq
        # Read before the changes: a row due later is loaded by a refill not begun yet.
        upto = None if self._bound is None else self._bound()
        # The clock, not an instant read now: rows written ahead are put back on their grid
        # (persched._store.ahead) at the time they are read, however long this thread was held.
        self._change_seq, changed = self._store.changes_since(self._change_seq, upto, self._timebase.now)
        if self._change_seq != seen:
            # Moved after the membership looked: the next round would not see a join in between.
            self._notice()
        if logger.isEnabledFor(logging.INFO):
            self._log_changes(before, self._change_seq)  # before queueing: a claim would change the rows
        for due_at, job_id, generation in changed:
            self._queue(due_at, job_id, generation)
        logger.debug("picked up %d changed jobs (change %d)", len(changed), self._change_seq)
        self._stop_cancelled()  # a cancel moves the counter too

    def _stop_cancelled(self) -> None:
        """Stop the runs here that a cancel asked for; keep asking while a request found none yet."""
        if self._cancels is not None:
            self._cancels_owed = self._cancels()

    def _notice(self) -> None:
        if self._membership.notice():
            self._repartition(self._membership.shared)  # a member joined or left

    def _log_changes(self, after: int, upto: int) -> None:
        """Tell the operator what another process or the CLI changed; a bulk change is cut short."""
        notes = self._store.changes_made_elsewhere(after, upto)
        for note in notes[:_CHANGES_LOGGED]:
            logger.info(
                "picked up a change made elsewhere: %s generation %d %s", note.job_id, note.generation, note.words
            )
        if len(notes) > _CHANGES_LOGGED:
            logger.info("picked up %d more changes made elsewhere", len(notes) - _CHANGES_LOGGED)
