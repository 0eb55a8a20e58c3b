"""`Internals`: what persched's own front ends may use of a `JobScheduler` beyond its public methods.

`persched._interfaces.async_front` runs async jobs on the application's
event loop: it hands the worker pool a runner for their awaitables, and
needs the scheduler's time frame and its number of workers to build it.
`persched.metrics` reads, at scrape time, the scheduler's database (its
store) and its time frame. Both reach these parts through this one object,
from `persched._engine.scheduler.internals_of`, never through the
scheduler's private attributes, so the engine may rewire itself behind it.

It is internal, not public API: an application uses `JobScheduler`'s
methods. Tests use it as the front ends do (`tests/support/seams.py`).
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
    """The named seam into one scheduler (module docstring).

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
