"""Scheduler events and their delivery to listeners on one dedicated thread.

Whichever persched thread observes a change emits its event. `EventBus.emit`
never blocks and never calls a listener: it puts the event on a bounded queue
(full: the event is dropped and counted), and ``persched-events``, started with
the first event some listener wants, calls the listeners in order with no
persched lock held. So a listener that blocks delays only the listeners and
events behind it, never dispatch, workers or the heartbeat (docs/operations.md,
"Events"). ``_lock`` guards the listener list, the flags and the drop counter,
and is never held while a listener runs, while logging, or in a join.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal, get_args

from .. import _realtime
from ..errors import InvalidJobError
from .tracebacks import describe

if TYPE_CHECKING:
    from datetime import datetime

    from .._model.models import Job, Run

__all__ = ["EVENT_KINDS", "Event", "EventBus", "EventKind", "Listener"]

logger = logging.getLogger(__name__)

EventKind = Literal[
    "job_scheduled",
    "job_replaced",
    "job_descheduled",
    "run_started",
    "run_finished",
    "run_failed",
    "run_stopped",
    "run_lost",
    "job_paused",
    "job_resumed",
    "run_overran",
]
#: Every event kind, for `JobScheduler.add_listener(kinds=...)`.
EVENT_KINDS: Final[frozenset[str]] = frozenset(get_args(EventKind))

DEFAULT_MAX_PENDING: Final = 10_000  # events queued for listeners before new ones are dropped
DROP_LOG_EVERY: Final = 1_000  # after the first drop, log one WARNING per this many drops


@dataclass(frozen=True)
class Event:
    """Something that happened to a job, as a listener receives it.

    Attributes:
        kind: What happened: ``job_scheduled`` (a new job, or a new job under
            a descheduled id), ``job_replaced`` (a new definition, new
            generation), ``job_descheduled``, ``run_started`` (its claim
            committed), ``run_finished`` (outcome "ok"), ``run_failed``
            (outcome "error"), ``run_stopped`` (outcome "stopped": it ended
            when asked to stop), ``run_lost`` (its instance stopped renewing its
            lease; recorded by the heartbeat of any instance), ``job_paused``
            (by ``pause()``, or by the job's ``pause_after_failures``),
            ``job_resumed``, ``run_overran`` (still running after the job's
            max_runtime_seconds; with ``on_overrun="stop"`` it is asked to stop).
        job_id: The job.
        generation: The job's generation the event is about.
        at: When the scheduler observed it (aware UTC, on its clock).
        job: The job as stored, for ``job_scheduled`` and ``job_replaced``.
        run: The run, for the ``run_*`` kinds (``outcome`` None for
            ``run_started``).
    """

    kind: EventKind
    job_id: str
    generation: int
    at: datetime
    job: Job | None = None
    run: Run | None = None


Listener = Callable[[Event], object]

_STOP: Final = object()  # queue sentinel


class EventBus:
    """Listeners, a bounded queue of `max_pending` events and the ``persched-events`` delivery thread."""

    def __init__(self, max_pending: int = DEFAULT_MAX_PENDING) -> None:
        self._queue: queue.Queue[Event | object] = queue.Queue(maxsize=max_pending)
        self._lock = threading.Lock()
        self._listeners: list[tuple[Listener, frozenset[str]]] = []
        self._thread: threading.Thread | None = None
        self._stopped = False
        self._abandoned = False  # stop() could not queue its sentinel: end after the current event
        self.dropped = 0

    def add(self, listener: Listener, kinds: Iterable[str] | None = None) -> None:
        """Call `listener(event)` for every event of `kinds` (default: all); adding it again replaces its kinds."""
        if not callable(listener):
            raise InvalidJobError("callback", f"must be callable, got {listener!r}")
        if isinstance(kinds, str):
            kinds = (kinds,)
        wanted = EVENT_KINDS if kinds is None else frozenset(kinds)
        unknown = sorted(str(k) for k in wanted - EVENT_KINDS)
        if unknown or not wanted:
            raise InvalidJobError(
                "kinds", f"unknown event kinds {unknown}; choose from {sorted(EVENT_KINDS)}" if unknown else "is empty"
            )
        with self._lock:
            self._listeners = [(f, k) for f, k in self._listeners if f != listener]
            self._listeners.append((listener, wanted))

    def remove(self, listener: Listener) -> bool:
        """Stop calling `listener` (a call under way goes on); True if it was registered."""
        with self._lock:
            before = len(self._listeners)
            self._listeners = [(f, k) for f, k in self._listeners if f != listener]
            return len(self._listeners) != before

    def wants(self, kind: str) -> bool:
        """True if some listener wants events of `kind` (cheap; lets callers skip building one)."""
        with self._lock:
            return not self._stopped and any(kind in k for _, k in self._listeners)

    def emit(self, event: Event) -> None:
        """Queue `event` for the listeners that want it; never blocks."""
        with self._lock:
            if self._stopped or not any(event.kind in k for _, k in self._listeners):
                return
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="persched-events", daemon=True)
                self._thread.start()
        try:
            self._queue.put_nowait(event)
        except queue.Full:
            with self._lock:
                self.dropped += 1
                dropped = self.dropped
            if dropped == 1 or dropped % DROP_LOG_EVERY == 0:
                logger.warning(
                    "event queue full (%d pending): dropped %s of %s generation %d (%d dropped so far); "
                    "a listener is too slow",
                    self._queue.maxsize,
                    event.kind,
                    event.job_id,
                    event.generation,
                    dropped,
                )

    def wait_delivered(self, timeout: float | None) -> bool:
        """Block until every event queued so far has been delivered; False after `timeout` real seconds."""
        deadline = None if timeout is None else _realtime.monotonic() + timeout
        done = self._queue.all_tasks_done
        with done:
            while self._queue.unfinished_tasks and not self._abandoned:
                left = None if deadline is None else deadline - _realtime.monotonic()
                if left is not None and left <= 0:
                    return False
                done.wait(left)
        return True

    def stop(self, timeout: float | None) -> None:
        """Deliver what is queued (up to `timeout`), then end the thread; idempotent, callable from a listener."""
        with self._lock:
            already, self._stopped = self._stopped, True
            thread = self._thread
        if thread is None:
            return
        if not already:
            # Blocks only while the queue is full; bounded like the join.
            try:
                self._queue.put(_STOP, timeout=timeout)
            except queue.Full:
                self._abandoned = True
                logger.warning("event listeners did not keep up; undelivered events are dropped at shutdown")
                return
        if thread is not threading.current_thread():
            thread.join(timeout)

    def _loop(self) -> None:
        while not self._abandoned and (event := self._queue.get()) is not _STOP:
            assert isinstance(event, Event)
            with self._lock:
                listeners = [f for f, kinds in self._listeners if event.kind in kinds]
            for listener in listeners:
                _deliver(listener, event)
            del event, listeners
            self._queue.task_done()


def _deliver(listener: Listener, event: Event) -> None:
    try:
        listener(event)
    except BaseException as exc:  # noqa: BLE001 - a listener must not end delivery (not even SystemExit)
        logger.error(
            "event listener %r raised on %s of %s generation %d; ignored\n%s",
            listener,
            event.kind,
            event.job_id,
            event.generation,
            describe(exc),
        )
