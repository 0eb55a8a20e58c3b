"""A scheduler's store and time frame, reached as persched's own front ends reach them.

Tests that read a scheduler's database through its store, hold or fail one
of its store calls (`patch_store`), or need its "now" go through
`persched._engine.scheduler.internals_of`, the seam that the async front end
and the metrics use, never through the scheduler's private attributes: the
engine may rewire itself behind the seam without these tests noticing.

What they patch are the store's own statements (``claim_runs``,
``finish_runs``, ...), held at a barrier to force an interleaving: internal
tools, so they live here and not in `persched.testing`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from unittest.mock import patch

from persched._engine.scheduler import JobScheduler, internals_of

if TYPE_CHECKING:
    from contextlib import AbstractContextManager
    from unittest.mock import MagicMock

    from persched import AsyncJobScheduler
    from persched._model.instant import Instant
    from persched._store import Store

__all__ = ["now_of", "patch_store", "store_of"]


def store_of(sched: JobScheduler | AsyncJobScheduler) -> Store:
    """The store of `sched` (the threaded scheduler's, under an `AsyncJobScheduler`)."""
    return internals_of(sched if isinstance(sched, JobScheduler) else sched.scheduler).store


def now_of(sched: JobScheduler) -> Instant:
    """The current instant in the time frame of `sched`."""
    return internals_of(sched).now()


def patch_store(
    sched: JobScheduler | AsyncJobScheduler,
    method: str,
    **kwargs: Any,  # noqa: ANN401 - patch.object's keywords
) -> AbstractContextManager[MagicMock]:
    """``patch.object`` of one method of the store of `sched` (``side_effect=``, ``return_value=``, ...)."""
    patcher: AbstractContextManager[MagicMock] = patch.object(store_of(sched), method, **kwargs)
    return patcher
