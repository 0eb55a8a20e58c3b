"""The change pick-up: queueing the jobs that other instances, or the command line, changed.

Every `pickup_seconds` the heartbeat thread reads the change counter
(``persched_changes``) and queues the jobs scheduled or replaced elsewhere
since it last looked: one indexed read per second by default. It reads it
sooner when the engine says that another connection committed
(`persched._engine.pickup`): on SQLite a ``PRAGMA data_version`` every
`pickup_check_seconds` that reads no file, on PostgreSQL a listener thread
woken by NOTIFY, which asks the heartbeat for a pick-up (`ChangePickup.request`);
either way at most once per `pickup_check_seconds`, so that a stream of
changes is read in batches. Those signals only hurry the pick-up; the poll
stays its backstop. While no connection commits, the SQLite check backs off,
each quiet check doubling the wait up to `QUIET_CHECK` (1 s, or
`pickup_seconds` if that is shorter, and then in the poll's wake-up), and the
first commit it sees brings it back to `pickup_check_seconds`: an idle
scheduler wakes about once a second, not ten times, and a change after a
quiet spell is picked up within a second.

A pick-up that finds only this scheduler's own changes since its last look
(`Store.only_own_changes`) reads no changed rows: each call that made one
queued and announced it when it committed. It still reads the cancel requests
of the runs in flight here, for a `cancel()` made here before a worker took
its run.

A member's join or leave moves the change counter too, so a pick-up that sees
the counter move also asks the membership whether a member came or went
(`persched._engine.membership.Membership.notice`). With the bounded heap
(`persched._engine.horizon`), it asks only for the changed jobs the heap's
refills have passed (later ones are loaded by a refill).

Correctness never depends on this: a stale heap entry's claim simply fails.
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
    """Reads the change counter and queues what changed elsewhere (module docstring).

    Args:
        queue: Called with each job that another instance (or the CLI) scheduled or replaced.
        membership: Asked whether a member came or went when the counter moved.
        repartition: Called with `Membership.shared` when the view changed.
        changed: Called when the counter moved (a change made elsewhere may be a pause with an end).
        pickup: How often to read the change counter, whatever the signals say; on
            PostgreSQL also how long the listener waits after a failed connect.
        pickup_check: How often to ask SQLite whether another connection committed
            while commits come, backing off to `QUIET_CHECK` while none do; also the
            least time between two pick-ups that a signal asked for.
        cancels: Called when the counter moved: stops the runs here that a cancel asked for; True while
            a request found no run here to stop yet, which has it called at every pick-up until then.
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
        self._cancels = cancels  # stops the runs here that cancel() asked for (`persched._store.cancels`)
        self._cancels_owed = False  # a cancel request found no run here to stop yet: read them again
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
        """Look for changes after `change_seq` from now on; `request` is how a listener asks for a pick-up.

        `bound` (the bounded heap's `Dispatcher.pickup_bound`) limits the changed
        jobs queued to those due by then.
        """
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
        """Check for commits if that is due, then pick up if the poll or a signal says so (the next
        round is scheduled before the pick-up, which may fail; the check never raises)."""
        checked = self._watch is not None and now >= self._next_check
        if self._watch is not None and checked:
            if self._watch.changed():
                self.owed, self._check_every = True, self._pickup_check
            else:  # quiet: wait twice as long each time, up to QUIET_CHECK
                self._check_every = max(self._pickup_check, min(2 * self._check_every, self.period, QUIET_CHECK))
        picks = now >= self._next_pickup or (self.owed and now >= self._earliest)
        if picks:
            self.owed = False
            # At most one pick-up per pickup_check: under a stream of changes each reads many.
            self._earliest, self._next_pickup = now + self._pickup_check, now + self.period
        if checked:  # no later than the poll, so that a quiet scheduler wakes once for both
            self._next_check = min(now + self._check_every, max(self._next_pickup, now + self._pickup_check))
        self._schedule()
        if picks:
            self.round()

    def _schedule(self) -> None:
        self.due = min(self._next_pickup, self._next_check, self._earliest if self.owed else NEVER)

    def round(self) -> None:
        """Queue the jobs that were scheduled or replaced elsewhere since the last look.

        One cheap read of the change counter when nothing changed.
        """
        seen = self._store.change_seq()
        if seen == self._change_seq:
            if self._cancels_owed:
                self._stop_cancelled()
            return
        if self._store.only_own_changes(self._change_seq, seen):
            # Every change since the last look was made here (schedule(), deschedule(), pause()... of this
            # scheduler, its own beats): the call that made each queued and announced it. But a cancel()
            # made here may have found its run claimed and not yet taken by a worker: its request waits
            # on the row for this read (none is made while nothing is claimed or running here).
            self._change_seq = seen
            self._stop_cancelled()
            return
        self._changed()
        self._notice()
        before = self._change_seq
        # Read before the changes: a row due later is loaded by a refill not begun yet (persched._engine.horizon).
        upto = None if self._bound is None else self._bound()
        # With now: a row written elsewhere by a clock that was ahead is put back on its grid (persched._store.ahead).
        # The clock, not a time read now: this thread may be held before the rows are read (a suspended process).
        self._change_seq, changed = self._store.changes_since(self._change_seq, upto, self._timebase.now)
        if self._change_seq != seen:
            # The counter moved after the membership looked: a join or leave in between would
            # otherwise wait for the next beat, since the next round sees no move.
            self._notice()
        if logger.isEnabledFor(logging.INFO):
            self._log_changes(before, self._change_seq)  # before queueing: a claim would change the rows
        for due_at, job_id, generation in changed:
            self._queue(due_at, job_id, generation)
        logger.debug("picked up %d changed jobs (change %d)", len(changed), self._change_seq)
        self._stop_cancelled()  # a cancel moves the counter too

    def _stop_cancelled(self) -> None:
        """Stop the runs here that a cancel asked for; keep asking while a request found none to stop
        (its run claimed here, not yet taken by a worker: the counter will not move again for it)."""
        if self._cancels is not None:
            self._cancels_owed = self._cancels()

    def _notice(self) -> None:
        if self._membership.notice():
            self._repartition(self._membership.shared)  # a member joined or left (persched._engine.membership)

    def _log_changes(self, after: int, upto: int) -> None:
        """Tell the operator what another process or the CLI changed; a bulk change is cut short."""
        notes = self._store.changes_made_elsewhere(after, upto)
        for note in notes[:_CHANGES_LOGGED]:
            logger.info(
                "picked up a change made elsewhere: %s generation %d %s", note.job_id, note.generation, note.words
            )
        if len(notes) > _CHANGES_LOGGED:
            logger.info("picked up %d more changes made elsewhere", len(notes) - _CHANGES_LOGGED)
