"""A scheduler's life in its process: its state, start-up and shutdown in order, the fork and atexit hooks.

``_state_lock`` guards the state ("new", "running", "stopped"); ``_schema_lock``
makes the first use migrate once. `start()` takes ``_schema_lock`` under
``_state_lock`` and holds both across the migration; no other lock nests with
them, and neither is held while calling into the dispatcher. Shutdown's
linearization point is `RunBook.stop_claiming()` (`persched._engine.runs`): no
claim commits after it returns, and the outcomes of the runs in flight are still
written. A scheduler belongs to the process that made it
(docs/reference/behaviour.md, "Forks"): the fork hook leaves a child's copies
alone, and the atexit hook shuts down the running ones.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import weakref
from typing import TYPE_CHECKING, Final

from .. import _loggers, _realtime
from .._model.instant import Instant, Micros, seconds
from .._store import migrate as _migrate
from ..clock import SystemClock
from ..errors import SchedulerStateError, StoreError
from .config import check_wait
from .workers import current_run_claim

if TYPE_CHECKING:
    from .._store import Store
    from .dispatcher import Dispatcher
    from .events import EventBus
    from .heartbeat import Heartbeat
    from .horizon import Horizon
    from .membership import Membership
    from .runs import RunBook
    from .skew import ClockCheck
    from .timebase import Timebase

__all__ = ["Lifecycle"]

logger = logging.getLogger(_loggers.LIBRARY)

ATEXIT_TIMEOUT_SECONDS: Final = 10.0  # how long interpreter exit waits for in-flight runs

_live: weakref.WeakSet[Lifecycle] = weakref.WeakSet()
_made: weakref.WeakSet[Lifecycle] = weakref.WeakSet()  # every scheduler of this process, for the fork hook
_inherited_pools: list[object] = []  # a forked child's copies of its parent's pools: kept, never closed


@atexit.register
def _shutdown_live_schedulers() -> None:
    # Daemon threads still run during atexit (bpo-39812), so in-flight runs
    # can finish and record their outcome.
    for lifecycle in list(_live):
        if lifecycle.owned():  # a forked child leaves its parent's schedulers alone
            lifecycle.shutdown(wait=True, timeout=ATEXIT_TIMEOUT_SECONDS)


def _after_fork_in_child() -> None:
    """Leave the parent's schedulers and their pooled connections alone in a forked child.

    A child must neither use nor close the parent's connections (a PostgreSQL
    connection closed here ends the parent's session), so each engine gets a
    fresh pool and the old one is kept untouched (``dispose(close=False)``).
    """
    _live.clear()
    running: list[str] = []
    for lifecycle in list(_made):
        engine = lifecycle.store.engine
        _inherited_pools.append(engine.pool)
        engine.dispose(close=False)
        if lifecycle.state == "running":
            running.append(lifecycle.instance_id)
    if running and current_run_claim() is None:  # a job's own fork is no surprise: no warning there
        # A pre-fork server (gunicorn --preload) would otherwise run every job in its master, silently.
        logger.warning(
            "process %d was forked from process %d, whose scheduler %s keeps running there, not here: "
            "create the scheduler after the fork (e.g. in gunicorn's post_fork hook, or without --preload)",
            os.getpid(),
            os.getppid(),
            ", ".join(running),
        )


os.register_at_fork(after_in_child=_after_fork_in_child)


class Lifecycle:
    """A scheduler's state, and the order in which its parts start and stop."""

    def __init__(
        self,
        instance_id: str,
        horizon: Micros,
        *,
        store: Store,
        timebase: Timebase,
        clock_check: ClockCheck,
        membership: Membership,
        sweeps: Horizon,
        runs: RunBook,
        dispatcher: Dispatcher,
        heartbeat: Heartbeat,
        events: EventBus,
        migration_timeout: float,
    ) -> None:
        self.instance_id = instance_id
        self._horizon = horizon
        self.store = store
        self._timebase = timebase
        self._clock_check = clock_check
        self._membership = membership
        self._sweeps = sweeps
        self._runs = runs
        self._dispatcher = dispatcher
        self._heartbeat = heartbeat
        self._events = events
        self._migration_timeout = migration_timeout
        self._pid = os.getpid()  # the process this scheduler belongs to
        self._schema_lock = threading.Lock()
        self._schema_ready = False
        self._state_lock = threading.Lock()
        self.state = "new"
        _made.add(self)

    # -- checks -----------------------------------------------------------------------

    def owned(self) -> bool:
        """Whether this process made the scheduler (False in a forked child)."""
        return os.getpid() == self._pid

    def check_process(self) -> None:
        """Raise unless this process made the scheduler."""
        if not self.owned():
            raise SchedulerStateError(
                f"this JobScheduler belongs to process {self._pid}, and this is a forked child "
                f"(process {os.getpid()}): a scheduler cannot be used or shut down after fork(). "
                "Create the scheduler after the fork, in the process that uses it: for example in "
                "gunicorn's post_fork hook, or run gunicorn without --preload"
            )

    def check_open(self) -> None:
        """Raise unless this process made the scheduler and it is not shut down."""
        self.check_process()
        if self.state == "stopped":
            raise SchedulerStateError("the scheduler was shut down; make a new JobScheduler")

    def ensure_schema(self) -> None:
        """Migrate the schema to head at the first use."""
        with self._schema_lock:
            if not self._schema_ready:
                _migrate.upgrade(self.store.engine, migration_timeout_seconds=self._migration_timeout)
                # Before anything is claimed or written: a wrong clock keeps to the database's from the first slot.
                self._clock_check.check()
                self._schema_ready = True

    # -- start ------------------------------------------------------------------------

    def start(self) -> None:
        """`JobScheduler.start`: migrate, join the members, load the jobs, start the threads."""
        self.check_process()
        with self._state_lock:
            if self.state != "new":
                raise SchedulerStateError(f"start() on a scheduler that is {self.state}; make a new JobScheduler")
            self.ensure_schema()
            # "running" before loading: a schedule() committed after the load pushes its own entry.
            self.state = "running"
        if isinstance(self._timebase.clock, SystemClock) and (tool := _realtime.frozen_by()) is not None:
            logger.warning(
                "time is frozen by %s, and scheduler %s runs on the real clock: pass "
                "clock=persched.testing.FrozenTimeClock() to follow the frozen time",
                tool,
                self.instance_id,
            )
        horizon = self._sweeps
        swept: list[tuple[Instant, str, int]] = []
        try:
            # Join the members first: the jobs loaded are the ones this instance owns.
            self._membership.beat()
            # Before loading: a change committed while loading is picked up again, not missed.
            change_seq = self.store.change_seq()
            # The first sweep batch, then the jobs due within the horizon (persched._engine.horizon).
            horizon.sweep(lambda *entry: swept.append(entry))
            entries, cursor = horizon.refill(None, Instant(self._timebase.now() + self._horizon))
        except BaseException:
            self.shutdown(wait=False, timeout=None)
            raise
        _live.add(self)
        self._dispatcher.start(
            entries + swept,
            refill=horizon.refill,
            cursor=cursor,
            horizon=self._horizon,
            refill_rows=horizon.rows,
            shared=self._membership.shared,
        )
        self._heartbeat.start(
            change_seq,
            bound=self._dispatcher.pickup_bound,
            sweep=lambda: horizon.sweep(self._dispatcher.offer),
        )
        logger.info(
            "scheduler %s started with %d job%s due within %g s on %s",
            self.instance_id,
            len(entries),
            "" if len(entries) == 1 else "s",
            seconds(self._horizon),
            self.store.url,
        )

    # -- shutdown ---------------------------------------------------------------------

    def shutdown(self, wait: bool, timeout: float | None) -> None:
        """`JobScheduler.shutdown`: stop claiming, then let the runs finish and stop every thread."""
        self.check_process()
        timeout = check_wait(wait, timeout)
        with self._state_lock:
            previous, self.state = self.state, "stopped"
        if previous == "stopped":
            return
        self._dispatcher.stop_claiming()
        if previous == "new":
            self._events.stop(timeout)
            self.store.engine.dispose()
            return
        if wait and not self._dispatcher.pool.owns_current_thread():
            self._finish_shutdown(timeout)
        else:
            threading.Thread(
                target=self._finish_shutdown,
                args=(None,),
                name="persched-shutdown",
                daemon=True,
            ).start()

    def _finish_shutdown(self, timeout: float | None) -> None:
        # Real time: this waits for threads, not for schedule slots.
        deadline = None if timeout is None else _realtime.monotonic() + timeout

        def left() -> float | None:
            return None if deadline is None else max(0.0, deadline - _realtime.monotonic())

        busy = self._runs.busy_jobs()
        if busy:
            logger.info(
                "scheduler %s waits for %d run%s in flight to finish: %s%s",
                self.instance_id,
                len(busy),
                "" if len(busy) == 1 else "s",
                ", ".join(busy),
                "" if timeout is None else f" (at most {timeout:g} s)",
            )
        drained = self._dispatcher.shutdown(left)
        self._heartbeat.stop()
        self._heartbeat.join(left())
        self._leave()
        self._events.stop(left())
        _live.discard(self)
        if drained:
            self.store.engine.dispose()
            logger.info("scheduler %s shut down", self.instance_id)
        else:
            logger.warning(
                "scheduler %s shut down with runs still in flight after %s s; each is recorded when it ends, "
                "or as lost once its lease lapses if the process exits first",
                self.instance_id,
                timeout,
            )
            threading.Thread(target=self._close_after_late_runs, name="persched-late-close", daemon=True).start()

    def _leave(self) -> None:
        """Delete this instance's membership row, after the heartbeat stopped (its next round would write it again)."""
        try:
            self._membership.leave()
        except StoreError as exc:
            logger.warning("leaving the instances that share the work failed (the others wait a lease): %s", exc)

    def _close_after_late_runs(self) -> None:
        """After shutdown gave up: close the pool once no thread of this scheduler can check a connection out."""
        self._dispatcher.finish_late()
        self._heartbeat.join(None)
        self.store.engine.dispose()
