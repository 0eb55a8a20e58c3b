"""Run-history retention: which jobs' runs to prune, and when.

Whoever records an outcome calls `Retention.recorded` (any thread); the heartbeat
calls `Retention.prune`, off the dispatch path, in short transactions of its own.
``_lock`` guards the jobs waiting for a prune, is held across no database call
and nests with no other lock. A job is pruned each time its run count (the row's,
read by the claim) reaches a multiple of a tenth of `keep_runs`, so a DELETE
serves many runs and nothing is kept per job between prunes; a prune that fails
puts its jobs back (docs/reference/behaviour.md#run-history).
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from .. import _loggers

if TYPE_CHECKING:
    from .._model.instant import Micros
    from .._store import Store
    from .timebase import Timebase

__all__ = ["Retention"]

logger = logging.getLogger(_loggers.LIBRARY)


class Retention:
    """Keeps each job's run history within `keep_runs`, `keep_error_runs` and `keep_for` (None: no bound)."""

    def __init__(
        self,
        store: Store,
        timebase: Timebase,
        keep_runs: int | None,
        keep_for: Micros | None,
        keep_error_runs: int | None = None,
    ) -> None:
        self._store = store
        self._timebase = timebase
        self._keep_runs = keep_runs
        self._keep_for = keep_for
        self._keep_error_runs = keep_error_runs
        self._every = max(1, (keep_runs or 0) // 10)  # runs between two prunes of a job
        self._lock = threading.Lock()
        self._due: set[str] | None = None  # the jobs to prune next; None: a full pass first

    def recorded(self, job_id: str, runs_before: int | None) -> None:
        """A run of `job_id` was recorded, the job's `runs_before`-th + 1 (None: not known; any thread)."""
        if runs_before is not None and (runs_before + 1) % self._every:
            return
        with self._lock:
            if self._due is not None:
                self._due.add(job_id)

    def prune(self) -> None:
        """Heartbeat callback: delete run history beyond the retention."""
        if self._keep_runs is None and self._keep_for is None:
            return
        with self._lock:
            dirty, self._due = self._due, set()
        if dirty is None and self._keep_runs is not None:
            dirty = self._store.jobs_over_run_limit(self._keep_runs)  # first pass: every job over the limit
        try:
            deleted = self._store.prune_runs(
                self._timebase.now(),
                keep_runs=self._keep_runs,
                keep_seconds=self._keep_for,
                keep_error_runs=self._keep_error_runs,
                job_ids=dirty or set(),
            )
        except BaseException:
            with self._lock:  # try these jobs again next time
                assert self._due is not None
                self._due.update(dirty or ())
            raise
        if deleted:
            logger.debug("pruned %d runs beyond the retention", deleted)
