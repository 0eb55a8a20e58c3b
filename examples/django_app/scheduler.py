"""The scheduler of a web process: made in that process, on first use, never inherited over a fork."""

from __future__ import annotations

import contextlib
import os
import threading

from django.conf import settings

from examples.django_app.jobs import declared_jobs
from persched import JobScheduler
from persched.errors import SchedulerStateError

__all__ = ["forget_process_scheduler", "make_scheduler", "process_scheduler"]

_lock = threading.Lock()
_scheduler: JobScheduler | None = None
_pid: int | None = None
_started = False


def make_scheduler() -> JobScheduler:
    """A new scheduler on the project's persched database and namespace (not started)."""
    return JobScheduler(settings.PERSCHED_DB, workers=settings.PERSCHED_WORKERS, namespace=settings.PERSCHED_NAMESPACE)


def process_scheduler() -> JobScheduler:
    """This process's scheduler: started (with the jobs declared) if web processes run jobs, else only read through.

    A scheduler left by a parent process (gunicorn ``--preload``) belongs to
    that parent: a forked child makes its own.
    """
    global _scheduler, _pid, _started
    with _lock:
        if _scheduler is None or _pid != os.getpid():
            _scheduler, _pid, _started = make_scheduler(), os.getpid(), False
        if settings.PERSCHED_IN_WEB_PROCESSES and not _started:
            _scheduler.start()  # persched shuts it down gracefully at interpreter exit
            _scheduler.declare(declared_jobs(), prune=True)
            _started = True
        return _scheduler


def forget_process_scheduler(timeout: float | None = None) -> None:
    """Shut this process's scheduler down (started or not) and forget it (tests, and code that reconfigures)."""
    global _scheduler, _pid, _started
    with _lock:
        sched, pid = _scheduler, _pid
        _scheduler, _pid, _started = None, None, False
    if sched is not None and pid == os.getpid():  # a parent's scheduler is the parent's to shut down
        with contextlib.suppress(SchedulerStateError):  # already shut down
            sched.shutdown(wait=True, timeout=timeout)
