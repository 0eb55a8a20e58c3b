"""`django_job`: what a request gets, for a job that uses the ORM (stale connections closed around each run)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, TypeVar

from django.db import close_old_connections

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["django_job"]

F = TypeVar("F", bound="Callable[..., Any]")


def django_job(fn: F) -> F:
    """Close stale database connections before and after each run of `fn`, as Django does around a request.

    persched's worker threads live as long as the scheduler, and Django keeps a connection per
    thread, which only its request signals close. ``functools.wraps`` keeps the reference persched
    finds the job by.
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:  # noqa: ANN401 - the job's own arguments and result
        close_old_connections()
        try:
            return fn(*args, **kwargs)
        finally:
            close_old_connections()

    return wrapper  # type: ignore[return-value]  # same signature as fn (functools.wraps)
