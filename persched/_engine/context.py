"""What a running job sees of its run: `current_run()`, the `RunContext`, and the stop request behind it.

A run's `StopSignal` is set by whichever thread asks first: the overrun watch, the
pick-up of a cancel, or `shutdown()` at its timeout. The reason is written before
the event is set, under the signal's own lock, so a job that sees `stopping` set
reads the reason that set it. Callbacks registered with `StopSignal.on_request`
run once, on the requesting thread, outside that lock. The run travels in a
`contextvars.ContextVar` set by the worker around the call, so `current_run()`
answers in the job's own thread or task and nowhere else.
"""

from __future__ import annotations

import contextvars
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from pydantic import ConfigDict, Field, PrivateAttr

from .._model.instant import to_datetime
from .._model.public_models import Run
from ..errors import RunStopped

if TYPE_CHECKING:
    from collections.abc import Callable

    from .._store.records import Claim

__all__ = ["ACTIVE_RUN", "STOP_REASONS", "ActiveRun", "RunContext", "StopSignal", "current_run", "stop_text"]

# Why a run is asked to stop -> the words its record keeps (docs/reference/behaviour.md, "Stopping a run").
STOP_REASONS: Final = {
    "max_runtime": "it ran past its max_runtime_seconds (on_overrun='stop')",
    "cancel": "cancel() asked for it",
    "shutdown": "the scheduler shut down and its timeout was reached",
}


def stop_text(reason: str) -> str:
    """The error text of a run that ended because it was asked to stop for `reason`."""
    return f"stopped: {STOP_REASONS.get(reason, reason)}"


class StopSignal:
    """A run's stop request: the reason of the first request, and the event a job watches."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self._lock = threading.Lock()
        self._reason: str | None = None
        self._callbacks: list[Callable[[], None]] = []

    @property
    def reason(self) -> str | None:
        """Why the run was asked to stop (a key of `STOP_REASONS`), or None while it was not."""
        return self._reason

    def request(self, reason: str) -> bool:
        """Ask the run to stop; True for the first request (the later ones change nothing)."""
        with self._lock:
            if self._reason is not None:
                return False
            self._reason = reason
            self.event.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()
        return True

    def on_request(self, callback: Callable[[], None]) -> None:
        """Call `callback` (once, from the requesting thread) when a stop is asked; at once if it was already."""
        with self._lock:
            if self._reason is None:
                self._callbacks.append(callback)
                return
        callback()


@dataclass(frozen=True)
class ActiveRun:
    """The run executing in a context: its claim, its namespace and its stop request."""

    claim: Claim
    namespace: str
    stop: StopSignal = field(default_factory=StopSignal)

    def context(self) -> RunContext:
        claim = self.claim
        context = RunContext(
            job_id=claim.job_id,
            generation=claim.generation,
            scheduled_for=to_datetime(claim.scheduled_for),
            started_at=to_datetime(claim.started_at),
            run_id=claim.run_id,
            run_now=claim.run_now,
            namespace=self.namespace,
            attempt=claim.attempt,
            stopping=self.stop.event,
        )
        context._signal = self.stop
        return context


class RunContext(Run):
    """The run a job is executing, as `persched.current_run()` returns it.

    It is the run's `Run` record as it stands while running (every field of
    `Run` reads as before), with what a job needs to stop when asked.

    Attributes:
        namespace: The namespace of the scheduler that runs it.
        attempt: Which attempt of its slot this run is (1: the first).
        stopping: Set when the run is asked to stop (max runtime with
            ``on_overrun="stop"``, `cancel()`, or the shutdown's timeout);
            a thread job checks it or calls `raise_if_stopping()`.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    namespace: str
    stopping: threading.Event = Field(exclude=True, repr=False)
    _signal: StopSignal | None = PrivateAttr(default=None)  # the reason behind `stopping`

    def raise_if_stopping(self) -> None:
        """Raise `persched.errors.RunStopped` if the run was asked to stop; else return.

        Raises:
            RunStopped: A stop was asked; its ``reason`` says why. The run is
                recorded with outcome ``"stopped"`` if the job lets it out.
        """
        if self.stopping.is_set():
            reason = None if self._signal is None else self._signal.reason
            raise RunStopped(reason or "requested")


#: The run executing in this context: the worker sets it, `current_run` reads it.
ACTIVE_RUN: contextvars.ContextVar[ActiveRun | None] = contextvars.ContextVar("persched_current_run", default=None)


def current_run() -> RunContext | None:
    """Return the `RunContext` of the run executing in this thread or task, or None outside a run.

    A callable can key its own side effects on ``(job_id, scheduled_for)``,
    and watch ``stopping`` (or call ``raise_if_stopping()``) to end early when
    asked (docs/reference/behaviour.md, "Stopping a run").
    """
    active = ACTIVE_RUN.get()
    return None if active is None else active.context()
