"""The project's jobs: plain functions (persched runs them on its worker threads) and the declared set."""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING, Any, TypeVar

from django.conf import settings
from django.db import close_old_connections

from persched import JobSpec, current_run

if TYPE_CHECKING:
    from collections.abc import Callable

F = TypeVar("F", bound="Callable[..., Any]")


def django_job(fn: F) -> F:
    """Give a job what a request gets: stale database connections closed before and after it.

    persched's worker threads live as long as the scheduler, and Django opens
    one connection per thread; its request signals close them for requests,
    nothing does for other threads. ``functools.wraps`` keeps the module and
    qualified name, so persched finds the decorated job by reference.
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:  # noqa: ANN401 - the job's own arguments and result
        close_old_connections()
        try:
            return fn(*args, **kwargs)
        finally:
            close_old_connections()

    return wrapper  # type: ignore[return-value]  # same signature as fn (functools.wraps)


@django_job
def cleanup() -> None:
    """The periodic job: here it only records which process ran which slot (``EXAMPLE_LOG``)."""
    run = current_run()
    log = settings.EXAMPLE_LOG
    if log and run is not None:
        line = f"{run.job_id}\t{run.scheduled_for.isoformat()}\t{os.getpid()}\n"
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode())  # one write on O_APPEND: lines of processes never interleave
        finally:
            os.close(fd)


def declared_jobs() -> list[JobSpec]:
    """The project's whole set of jobs, declared with prune by whichever process runs them."""
    return [JobSpec("django.cleanup", cleanup, settings.EXAMPLE_INTERVAL)]
