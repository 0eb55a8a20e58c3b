"""The hand-over between the dispatcher and its workers, and the account of reserved workers.

The dispatcher reserves a worker per entry before it claims (`Handover.reserve`),
hands each won run over under the claim gate (`Handover.hand_over`, which takes
only the overrun watch's lock) and gives back what took no run. A worker hands
its outcome in (`Handover.complete`) for the next cycle to write. ``free`` is the
only count of workers; a run handed to the application's loop gives its worker
back at once and is counted in ``elsewhere`` until its outcome. The counts and
the outcomes are guarded by the dispatcher's condition (``cond``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Final

from .. import _realtime
from .._model.instant import seconds
from .overrun import OverrunWatch
from .workers import WorkerPool

if TYPE_CHECKING:
    import threading
    from collections.abc import Callable

    from .._model.instant import Instant
    from .._store.records import Claim, Completion
    from .runs import Dispatched, RunBook
    from .timebase import Timebase

__all__ = ["Handover"]

logger = logging.getLogger(__name__)

KILLED_EXIT_SECONDS: Final = 1.0  # after a stop grace, how long a shutdown waits for killed children to exit


class Handover:
    """The worker pool, the overrun watch, and the account of reserved workers and outcomes handed in."""

    def __init__(
        self,
        cond: threading.Condition,
        timebase: Timebase,
        runs: RunBook,
        workers: int,
        allowed_modules: tuple[str, ...] | None,
        queue: Callable[[Dispatched], None],
    ) -> None:
        self._cond = cond
        self._timebase = timebase
        self._runs = runs
        self._queue = queue
        self.size = workers
        self.free = workers
        self.elsewhere = 0  # runs that gave their worker back and go on (async jobs on the application's loop)
        self.completions: list[Completion] = []
        self.completed_at: Instant | None = None  # when the first of `completions` was handed in
        self.collecting = True  # False once the dispatcher thread exited: a worker writes its own outcome
        self.pool = WorkerPool(
            workers, self._finished, allowed_modules, release=self._release, namespace=runs.namespace
        )
        self.overrun = OverrunWatch(timebase, self._overran)

    # -- the dispatcher's side (under ``cond``) ---------------------------------------

    def reserve(self, count: int) -> None:
        """Reserve `count` free workers before a claim."""
        self.free -= count

    def give_back(self, count: int) -> None:
        self.free += count

    def take_completions(self) -> list[Completion]:
        """The completions handed in since the last call, for a cycle to write."""
        completions, self.completions = self.completions, []
        self.completed_at = None
        return completions

    def settled(self) -> bool:
        """No completion waits to be written, no run goes on elsewhere and every worker is free."""
        return not (self.completions or self.elsewhere) and self.free == self.size

    def hand_over(self, claim: Claim) -> None:
        """Under the claim gate: give a won run to its reserved worker."""
        if claim.max_runtime is not None:
            self.overrun.watch(claim)
        self.pool.submit(claim)

    # -- the workers' side ------------------------------------------------------------

    def complete(self, completion: Completion, *, frees_worker: bool = True) -> bool:
        """Hand in a finished run for the next cycle to write; False once the dispatcher thread exited."""
        with self._cond:
            if not self.collecting:
                return False
            if not self.completions:
                self.completed_at = self._timebase.now()
            self.completions.append(completion)
            if frees_worker:
                self.free += 1
            else:
                self.elsewhere -= 1
            self._cond.notify_all()
            return True

    def _finished(self, claim: Claim, outcome: str, error: str | None, held_worker: bool) -> None:
        """Worker (or awaitable runner) callback: a run ended; the next cycle writes its outcome."""
        if claim.max_runtime is not None:
            self.overrun.done(claim.run_id)
        completion = self._runs.ended(claim, outcome, error)
        if not self.complete(completion, frees_worker=held_worker):
            dispatched = self._runs.write_completions([completion])  # the thread is gone (shutdown timed out)
            with self._cond:
                self._queue(dispatched)

    def _release(self, claim: Claim) -> None:
        """Worker callback: the run goes on on the application's loop; its worker is free now."""
        with self._cond:
            self.free += 1
            self.elsewhere += 1
            self._cond.notify_all()

    def _overran(self, claim: Claim) -> None:
        """Overrun-watch callback: record the overrun; with on_overrun="stop" also ask the run to stop."""
        if self._runs.on_overrun(claim) and claim.run_policy.on_overrun == "stop":
            signal = self.pool.stops.signal_of(claim)
            if signal is not None:
                signal.request("max_runtime")

    # -- shutdown ---------------------------------------------------------------------

    def drain(self, left: Callable[[], float | None]) -> bool:
        """Stop the workers once their runs ended; False if a run outlived `left()` and the stop asked of it."""
        self.pool.stop()
        return self.pool.join(left) or self._stop_runs_in_flight()

    def _stop_runs_in_flight(self) -> bool:
        """Ask the runs in flight to stop and give child processes their grace; True once every run ended."""
        # A killed child still has to exit and be recorded; a thread or async run cannot be made
        # to end, so nothing waits for it past the caller's timeout.
        longest = self.pool.stops.longest_grace()
        grace = seconds(longest) + KILLED_EXIT_SECONDS if longest else 0.0
        stopped = self.pool.stops.request_all("shutdown")
        if stopped:
            logger.warning(
                "%d run%s in flight asked to stop (the shutdown's timeout passed); waiting up to %g s for those "
                "in a child process (stop_grace_seconds, and a second for a killed process to exit)",
                stopped,
                "" if stopped == 1 else "s",
                grace,
            )
        deadline = _realtime.monotonic() + grace
        return self.pool.join(lambda: max(0.0, deadline - _realtime.monotonic()))
