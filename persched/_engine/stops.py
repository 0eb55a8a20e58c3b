"""The runs in flight in one scheduler, each with its stop request, found by job.

The worker pool registers a run when a worker takes it and forgets it once its
outcome is reported. A stop is asked by the overrun watch, `cancel()`, the
pick-up of a cancel made elsewhere, or `shutdown()` at its timeout. ``_lock``
guards the map only; a `StopSignal`'s callbacks run after it is released.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from .._model.instant import Micros
from .context import StopSignal

if TYPE_CHECKING:
    from .._store.records import Claim

__all__ = ["RunStops"]


class RunStops:
    """The stop requests of the runs in flight, by job id and run id."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[str, dict[int, StopSignal]] = {}
        # run id -> its job's stop grace, for the runs in a child process: only those can be made to end
        self._graces: dict[int, Micros] = {}

    def started(self, claim: Claim) -> StopSignal:
        """Register `claim`'s run; return its (new) stop request."""
        signal = StopSignal()
        with self._lock:
            self._runs.setdefault(claim.job_id, {})[claim.run_id] = signal
            if claim.run_policy.executor == "process":
                self._graces[claim.run_id] = claim.run_policy.stop_grace
        return signal

    def ended(self, claim: Claim) -> StopSignal | None:
        """Forget `claim`'s run; return its stop request (None if it was not registered)."""
        with self._lock:
            runs = self._runs.get(claim.job_id)
            signal = None if runs is None else runs.pop(claim.run_id, None)
            self._graces.pop(claim.run_id, None)
            if runs is not None and not runs:
                del self._runs[claim.job_id]
        return signal

    def signal_of(self, claim: Claim) -> StopSignal | None:
        """The stop request of `claim`'s run while it is in flight, else None."""
        with self._lock:
            return self._runs.get(claim.job_id, {}).get(claim.run_id)

    def request(self, job_id: str, reason: str) -> bool:
        """Ask every run of `job_id` in flight here to stop; True if there was one."""
        with self._lock:
            signals = list(self._runs.get(job_id, {}).values())
        for signal in signals:
            signal.request(reason)
        return bool(signals)

    def request_all(self, reason: str) -> int:
        """Ask every run in flight here to stop; return how many there were."""
        with self._lock:
            signals = [signal for runs in self._runs.values() for signal in runs.values()]
        for signal in signals:
            signal.request(reason)
        return len(signals)

    def longest_grace(self) -> Micros:
        """The longest stop grace of the child-process runs in flight (0 without any)."""
        with self._lock:
            return max(self._graces.values(), default=Micros(0))

    def in_flight(self) -> set[str]:
        """The ids of the jobs with a run in flight here."""
        with self._lock:
            return set(self._runs)
