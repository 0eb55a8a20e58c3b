"""`Internals`: what persched's own front ends may use of a `JobScheduler` beyond its public methods.

`persched._interfaces.async_front` needs the worker pool, the time frame and the
number of workers; `persched.metrics` the store and the time frame. Both get them
from `persched._engine.scheduler.internals_of`, never from the scheduler's private
attributes, so the engine may rewire itself behind this seam. Not public API.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .._model.instant import Instant
    from .._store import Store
    from .timebase import Timebase
    from .workers import AwaitableRunner, WorkerPool

__all__ = ["Internals"]


class Internals:
    """The named seam into one scheduler.

    Attributes:
        store: The scheduler's store: its database, engine and namespace. For
            reads; every write goes through the scheduler's methods.
        workers: How many worker threads the scheduler has.
    """

    __slots__ = ("_pool", "_timebase", "store", "workers")

    def __init__(self, store: Store, timebase: Timebase, pool: WorkerPool, workers: int) -> None:
        self.store = store
        self.workers = workers
        self._timebase = timebase
        self._pool = pool

    def now(self) -> Instant:
        """The current instant in the scheduler's time frame (`persched._engine.timebase`)."""
        return self._timebase.now()

    def run_awaitables_with(self, runner: AwaitableRunner) -> None:
        """Hand async jobs' awaitables to `runner` instead of each worker's own loop; before `start()`."""
        self._pool.awaitable_runner = runner
