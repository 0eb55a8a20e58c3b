"""The ``persched-heartbeat`` thread: it runs the periodic tasks when they are due.

At each wake it runs, in this order, the tasks that are due: the change pick-up,
membership, leases, the timed pauses' ends, maintenance (unwritten outcomes and
retention), and the sweep while it has rows to read (at start-up, and again after
a view change that gained buckets: `Heartbeat.sweep_again`). A round that fails is
logged and the task runs again a period later (`run_round`); it never stops the others.

Between wakes the thread waits on the scheduler's clock for the earliest due
instant, a pick-up request (`request_pickup`, from the PostgreSQL listener), a
new pause end (`pause_ending`) or `stop`. ``_cond`` guards only the stop flag and
those requests; the tasks are touched by this thread alone.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from .. import _realtime
from .._model.instant import US_PER_SECOND
from ..errors import StoreError
from .periodic import AT_ONCE, NEVER, PeriodicTask
from .tracebacks import describe

if TYPE_CHECKING:
    from collections.abc import Callable

    from .._model.instant import Instant, Micros
    from ..clock import Clock
    from .change_pickup import ChangePickup
    from .leases import Leases
    from .pause_ends import PauseEnds

__all__ = ["Heartbeat", "run_round"]

logger = logging.getLogger(__name__)


class Heartbeat:
    """The heartbeat thread and its tasks, in the order they run."""

    def __init__(
        self,
        clock: Clock,
        *,
        pickup: ChangePickup,
        membership: PeriodicTask,
        leases: Leases,
        pause_ends: PauseEnds,
        maintenance: PeriodicTask,
    ) -> None:
        self._clock = clock
        self.pickup = pickup
        self.membership = membership
        self.leases = leases
        self.pause_ends = pause_ends
        self.maintenance = maintenance
        self.tasks: list[PeriodicTask] = [pickup, membership, leases, pause_ends, maintenance]
        self._sweep: StartupSweep | None = None  # added by `start`
        self._cond = threading.Condition()
        self._stopping = False
        self._requested = False  # a signal asked for a pick-up (guarded by _cond)
        self._ends_changed = False  # this process paused a job with an end (guarded by _cond)
        self._thread = threading.Thread(target=self._loop, name="persched-heartbeat", daemon=True)

    def start(
        self,
        change_seq: int,
        *,
        bound: Callable[[], Instant | None] | None = None,
        sweep: Callable[[], bool] | None = None,
    ) -> None:
        """Start the thread; changes after `change_seq` will be picked up, and `sweep` run until it returns False."""
        self.pickup.start(change_seq, bound, self.request_pickup)
        if sweep is not None:
            self._sweep = StartupSweep(sweep, self._clock, retry=self.leases.period)
            self.tasks.append(self._sweep)
        self._thread.start()

    def sweep_again(self) -> None:
        """On this thread (a view change): the sweep has rows to read again, its next batch at once."""
        if self._sweep is not None:
            self._sweep.due = AT_ONCE

    def request_pickup(self) -> None:
        """Read the change counter at once (another connection committed); from any thread."""
        with self._cond:
            self._requested = True
            self._cond.notify_all()

    def pause_ending(self) -> None:
        """Read the earliest end of the timed pauses again (a job was paused with one); from any thread."""
        with self._cond:
            self._ends_changed = True
            self._cond.notify_all()

    def wait_pause_ends(self, timeout: float | None) -> bool:
        """Block until every timed pause that has ended was resumed (for `JobScheduler.wait_idle`); False on timeout."""
        deadline = None if timeout is None else _realtime.monotonic() + timeout
        with self._cond:
            while (
                self._thread.is_alive()
                and not self._stopping
                and (self._ends_changed or self.pause_ends.due <= self._clock.monotonic_us())
            ):
                left = None if deadline is None else deadline - _realtime.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left)  # real time: notified after each round of the thread
        return True

    def stop(self) -> None:
        """Stop the thread at its next wake (idempotent)."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self.pickup.stop()

    def join(self, timeout: float | None) -> None:
        """Wait for the thread (and the listener's) to end."""
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)
        self.pickup.join(timeout)

    def _loop(self) -> None:
        try:
            self._run()
        finally:
            self.pickup.close()

    def _run(self) -> None:
        clock = self._clock
        while True:
            with self._cond:
                requested, self._requested = self._requested, False
                ends_changed, self._ends_changed = self._ends_changed, False
            if requested:
                self.pickup.request()
            if ends_changed:
                self.pause_ends.reread()
            now = clock.monotonic_us()
            for task in self.tasks:
                if task.due <= now:
                    run_round(task, now)
            wake_at = min(task.due for task in self.tasks)
            with self._cond:
                self._cond.notify_all()  # a round is done: `wait_pause_ends` looks again
                # A request wakes the thread unless a pick-up is already owed (its time is in wake_at);
                # a pause with an end made here wakes it to read that end.
                while (
                    not self._stopping
                    and not (self._requested and not self.pickup.owed)
                    and not self._ends_changed
                    and (left := wake_at - clock.monotonic_us()) > 0
                ):
                    clock.wait(self._cond, left / US_PER_SECOND)
                if self._stopping:
                    return


def run_round(task: PeriodicTask, now: int) -> None:
    """Run `task`'s round due at `now` (monotonic µs); a failure is logged, and the task runs again later."""
    try:
        task.run(now)
    except StoreError as exc:
        logger.warning("%s failed, will retry: %s", task.name, exc)
        task.failed(now)
    except BaseException as exc:  # noqa: BLE001 - a periodic task must never stop the others
        logger.error("%s failed, will retry\n%s", task.name, describe(exc))
        task.failed(now)
    task.rounds += 1


class StartupSweep(PeriodicTask):
    """The sweep, batch after batch until done (`Heartbeat.sweep_again` wakes it); a failed batch waits `retry`."""

    def __init__(self, sweep: Callable[[], bool], clock: Clock, *, retry: Micros) -> None:
        super().__init__("checking the stored jobs", retry)
        self._sweep = sweep
        self._clock = clock

    def round(self) -> None:
        self.due = self._clock.monotonic_us() if self._sweep() else NEVER
