"""Lease renewal, and recovery of the runs (and job rows) that no live instance moves on.

One round, on the heartbeat thread: renew the leases of the runs in flight here;
recover each other open run whose lease value stood still for `lease_seconds`,
or whose owner is provably gone (`persched._engine.liveness`); free each stranded
job row that stood unchanged as long. Each recovery is conditional on the value
seen. Expiry is observed on the local monotonic clock, never computed from the
stored ``lease_until`` and the local wall clock, so a stepped or skewed clock
cannot fake a death (docs/multi.md, "When an instance dies"). One run or row that
fails is logged once and tried again each round.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from .. import _loggers
from .._model.instant import US_PER_SECOND, Instant
from ..errors import StoreError
from .liveness import provably_dead
from .periodic import PeriodicTask
from .tracebacks import describe

if TYPE_CHECKING:
    from .._model.instant import Micros
    from .._store import OpenRun, Store, Stranded
    from .timebase import Timebase

__all__ = ["Leases", "QueueCallback"]

logger = logging.getLogger(_loggers.LIBRARY)

# (next_run_at, job_id, generation): a recovered or changed job to queue.
QueueCallback = Callable[[Instant, str, int], None]

_NAME: Final = "heartbeat"


class Leases(PeriodicTask):
    """Renews this instance's leases and recovers expired ones of any instance."""

    def __init__(
        self,
        store: Store,
        timebase: Timebase,
        instance_id: str,
        lease: Micros,
        period: Micros,
        in_flight: Callable[[], set[int]],
        queue: QueueCallback,
        lost: Callable[[OpenRun], None],
    ) -> None:
        super().__init__(_NAME, period)
        self._store = store
        self._timebase = timebase
        self._instance_id = instance_id
        self._lease = lease
        self._in_flight = in_flight
        self._queue = queue
        self._lost = lost
        self._announced = False  # the first round says which runs of other instances wait for their lease
        self._seen: dict[int, tuple[object, int]] = {}  # run_id -> (lease value, monotonic µs first seen)
        self._unrecovered: set[int] = set()  # recovery failed, logged once
        self._stranded: dict[Stranded, int] = {}  # row as seen -> monotonic µs first seen so
        self._unfreed: set[Stranded] = set()  # freeing failed, logged once

    def round(self) -> None:
        """Renew leases, then recover what has expired (one round)."""
        running_here = self._in_flight()
        if running_here:
            self._store.renew_leases(self._instance_id, Instant(self._timebase.now() + self._lease), running_here)
        open_runs = [run for run in self._store.open_runs() if run.run_id not in running_here]
        self._unrecovered.intersection_update(run.run_id for run in open_runs)
        open_runs = self._recover_dead_owners(open_runs)
        mono = self._timebase.clock.monotonic_us()
        seen: dict[int, tuple[object, int]] = {}
        for run in open_runs:
            previous = self._seen.get(run.run_id)
            first_seen = previous[1] if previous is not None and previous[0] == run.lease_until else mono
            seen[run.run_id] = (run.lease_until, first_seen)
            if mono - first_seen >= self._lease:
                self.recover(run)
        self._seen = seen
        self._free_stranded(mono)

    def _free_stranded(self, mono: int) -> None:
        stranded = {row: self._stranded.get(row, mono) for row in self._store.stranded_jobs()}
        self._stranded = stranded
        self._unfreed.intersection_update(stranded)
        for row, first_seen in stranded.items():
            if mono - first_seen < self._lease:
                continue
            try:
                due = self._store.free_stranded_job(row, self._timebase.now(), self._instance_id)
            except StoreError as exc:  # one row must not hold back the others; it is tried again each round
                if row not in self._unfreed:
                    self._unfreed.add(row)
                    logger.warning("freeing the stranded job %s failed; tried again each round: %s", row.job_id, exc)
                continue
            if due is not None:
                self._queue(due, row.job_id, row.generation)

    def _recover_dead_owners(self, open_runs: list[OpenRun]) -> list[OpenRun]:
        """Recover at once the runs whose owner is provably gone; return the others, which wait out their lease."""
        waiting = []
        for run in open_runs:
            if run.instance_id != self._instance_id and provably_dead(run.instance_id):
                self.recover(run, "belongs to an instance whose process is gone (same host and boot)")
            else:
                waiting.append(run)
        if not self._announced:
            self._announced = True
            others = sorted({run.instance_id for run in waiting if run.instance_id != self._instance_id})
            if others:
                # Say it now, not only in lease_seconds: a restart after a crash is otherwise silent.
                logger.info(
                    "%d run%s in flight on other instances (%s): if those are gone, their runs are recorded "
                    "as lost after %g s without a lease renewal",
                    len(waiting),
                    "" if len(waiting) == 1 else "s",
                    ", ".join(others),
                    self._lease / US_PER_SECOND,
                )
        return waiting

    def recover(self, run: OpenRun, why: str = "lost its lease") -> None:
        """Record `run` as lost and put its job back on its grid (if the row is still as seen)."""
        try:
            result = self._store.recover_run(run, self._timebase.now)  # read under the write lock
        except Exception as exc:  # noqa: BLE001 - one run that cannot be recovered must not hold back the others
            if run.run_id not in self._unrecovered:
                self._unrecovered.add(run.run_id)
                logger.warning(
                    "recovering run %d of %s generation %d (instance %s) failed; tried again each round: %s",
                    run.run_id,
                    run.job_id,
                    run.generation,
                    run.instance_id,
                    exc if isinstance(exc, StoreError) else describe(exc),
                )
            return
        self._unrecovered.discard(run.run_id)
        if not result.lost:
            return
        logger.warning(
            "run %d of %s generation %d on instance %s %s; recorded as lost",
            run.run_id,
            run.job_id,
            run.generation,
            run.instance_id,
            why,
        )
        if result.due is not None:
            self._queue(result.due, run.job_id, run.generation)
        self._lost(run)
