"""One scheduler per serving process: what the Flask and Django integrations share.

The application's start decides once where the jobs run (`Placement`: here, in forked workers, or
nowhere; docs/explanation/interfaces.md, "One scheduler per serving process"). persched's exit hook
shuts each scheduler down.

Threads: `ProcessScheduler` is called from the application's start-up and from the fork hook in a
new child, one thread each (the others did not survive the fork). Its lock guards the started
scheduler and its pid; the child replaces the lock, which a parent's thread may have held at the fork.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import sys
import threading
import weakref
from typing import TYPE_CHECKING, Literal

from ..errors import SchedulerStateError

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from types import FrameType

    from .._engine.scheduler import JobScheduler
    from .._model.declare import JobSpec

__all__ = ["Placement", "ProcessScheduler", "caller", "gunicorn_preloading", "job_set"]

logger = logging.getLogger(__name__)

Where = Literal["here", "forked workers", "nowhere"]


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where this process's jobs run, and why (logged at the application's start)."""

    where: Where
    why: str


def job_set(jobs: Sequence[JobSpec] | Callable[[], Sequence[JobSpec]]) -> list[JobSpec]:
    """Return the application's jobs: `jobs`, or what it returns if callable (read at each start)."""
    return list(jobs() if callable(jobs) else jobs)


def caller(module: str, function: str) -> FrameType | None:
    """Return the frame of a call of `module`'s `function` on this thread's stack, if any."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == function and frame.f_globals.get("__name__") == module:
            return frame
        frame = frame.f_back
    return None


def gunicorn_preloading() -> bool:
    """Return whether gunicorn's master is loading the application before forking (``--preload``)."""
    return caller("gunicorn.arbiter", "setup") is not None


class ProcessScheduler:
    """This process's started scheduler, made by `make` and running `jobs` (declared with prune).

    Args:
        make: Returns a new, unstarted `JobScheduler` (called in the process that will own it).
        jobs: Returns the application's whole set of jobs; an empty set declares nothing.
        started: Called with each scheduler once it has started (the framework keeps it where views find it).
    """

    def __init__(
        self,
        make: Callable[[], JobScheduler],
        jobs: Callable[[], Sequence[JobSpec]],
        started: Callable[[JobScheduler], None] | None = None,
    ) -> None:
        self._make = make
        self._jobs = jobs
        self._started = started
        self._lock = threading.Lock()
        self._scheduler: JobScheduler | None = None
        self._pid: int | None = None
        self._placement: Placement | None = None
        self._forks_from: int | None = None  # the pid whose forked children start their own

    @property
    def scheduler(self) -> JobScheduler:
        """Return this process's started scheduler.

        Raises:
            SchedulerStateError: This process runs no jobs (it says why: the placement of its start).
        """
        with self._lock:
            if self._scheduler is not None and self._pid == os.getpid():
                return self._scheduler
            placement = self._placement
        why = "the application has not started" if placement is None else f"{placement.where}: {placement.why}"
        raise SchedulerStateError(f"no persched scheduler runs in process {os.getpid()} ({why})")

    def place(self, placement: Placement) -> None:
        """Act on where this process's jobs run: start them here, in forked children, or nowhere."""
        self._placement = placement
        logger.info("persched: jobs of process %d: %s (%s)", os.getpid(), placement.where, placement.why)
        if placement.where == "here":
            self.start()
        elif placement.where == "forked workers":
            self._start_in_forked_children()

    def start(self) -> JobScheduler:
        """Make, start and declare this process's scheduler, once per process; return it."""
        with self._lock:
            if self._scheduler is not None and self._pid == os.getpid():
                return self._scheduler
            sched = self._make()
            try:
                sched.start()
                specs = list(self._jobs())
                if specs:
                    sched.declare(specs, prune=True)
            except BaseException:
                with contextlib.suppress(SchedulerStateError):
                    sched.shutdown(wait=False)
                raise
            self._scheduler, self._pid = sched, os.getpid()
        if self._started is not None:
            self._started(sched)
        return sched

    def shutdown(self, timeout: float | None = None) -> None:
        """Shut this process's scheduler down and forget it (tests, and applications that stop early)."""
        with self._lock:
            sched, pid = self._scheduler, self._pid
            self._scheduler = self._pid = None
        if sched is not None and pid == os.getpid():  # a parent's scheduler is the parent's to shut down
            with contextlib.suppress(SchedulerStateError):  # shut down already
                sched.shutdown(wait=True, timeout=timeout)

    def _start_in_forked_children(self) -> None:
        with self._lock:
            first = self._forks_from is None
            self._forks_from = os.getpid()
        if first:
            # A weak reference: the hook, never unregistered, must not keep an application alive.
            os.register_at_fork(after_in_child=_in_child_of(weakref.ref(self)))

    def _after_fork(self) -> None:
        """In a new child: start its scheduler if it was forked from the process that placed its jobs there."""
        self._lock = threading.Lock()  # a lock another thread of the parent held at the fork stays held here
        parent, self._forks_from = self._forks_from, None  # this child's own forks start nothing
        if parent is None or parent != os.getppid():
            return
        try:
            self.place(Placement("here", f"a worker forked from process {parent}"))
        except Exception:  # an exception in a fork hook would only be printed, without context
            logger.exception("persched: the scheduler of worker process %d did not start", os.getpid())


def _in_child_of(ref: weakref.ref[ProcessScheduler]) -> Callable[[], None]:
    def after_in_child() -> None:
        holder = ref()
        if holder is not None:
            holder._after_fork()

    return after_in_child
