"""The overrun watch: reports runs still going after their job's max_runtime_seconds.

A Python thread cannot be killed, so an overrun is reported, not stopped
(docs/how-to/schedules.md, "Max runtime"). ``persched-overrun`` sleeps on its
condition, through the scheduler's clock, until the earliest deadline, and calls
the `overran` callback on no lock.
"""

from __future__ import annotations

import heapq
import logging
import threading
from typing import TYPE_CHECKING

from .._model.instant import US_PER_SECOND, Instant
from .tracebacks import describe

if TYPE_CHECKING:
    from collections.abc import Callable

    from .._store.records import Claim
    from .timebase import Timebase

__all__ = ["OverrunWatch"]

logger = logging.getLogger(__name__)


class OverrunWatch:
    """Calls `overran(claim)` once for each watched run not done by its deadline."""

    def __init__(self, timebase: Timebase, overran: Callable[[Claim], None]) -> None:
        self._timebase = timebase
        self._overran = overran
        self._cond = threading.Condition()
        self._deadlines: list[tuple[Instant, int, Claim]] = []  # (deadline, run_id, claim)
        self._running: set[int] = set()
        self._stopping = False
        self._thread: threading.Thread | None = None

    def watch(self, claim: Claim) -> None:
        """Start watching a run whose job has a max_runtime_seconds (started lazily: most jobs have none)."""
        assert claim.max_runtime is not None
        with self._cond:
            if self._stopping:
                return
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="persched-overrun", daemon=True)
                self._thread.start()
            self._running.add(claim.run_id)
            entry = (Instant(claim.started_at + claim.max_runtime), claim.run_id, claim)
            heapq.heappush(self._deadlines, entry)
            if self._deadlines[0] is entry:
                self._cond.notify_all()

    def done(self, run_id: int) -> None:
        """The run finished: it can no longer overrun (its heap entry is dropped when it comes up)."""
        with self._cond:
            self._running.discard(run_id)

    def stop(self) -> None:
        """End the thread (idempotent)."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _next_overrun(self) -> Claim | None:
        """Under ``_cond``: wait for the earliest deadline of a run still going; None on stop."""
        while not self._stopping:
            while self._deadlines and self._deadlines[0][1] not in self._running:
                heapq.heappop(self._deadlines)
            if self._deadlines and self._deadlines[0][0] <= self._timebase.now():
                _, run_id, claim = heapq.heappop(self._deadlines)
                self._running.discard(run_id)
                return claim
            timeout = (self._deadlines[0][0] - self._timebase.now()) / US_PER_SECOND if self._deadlines else None
            self._timebase.clock.wait(self._cond, timeout)
        return None

    def _loop(self) -> None:
        while True:
            with self._cond:
                claim = self._next_overrun()
            if claim is None:
                return
            try:
                self._overran(claim)
            except Exception as exc:  # noqa: BLE001 - the watch must outlive a failed report
                logger.error("reporting the overrun of run %d failed\n%s", claim.run_id, describe(exc))
