"""Run bookkeeping: a run's way through this process, from its claim to its recorded outcome.

`RunBook` owns the three parts a run passes through, the `Dispatcher` (whose
cycle callback claims), the `WorkerPool` (whose completion callback hands the
outcome back) and the `OverrunWatch`, and keeps the account of what is in
flight between them. `JobScheduler` starts and stops those parts; everything
they call back lands here.

Threads
-------
- ``persched-dispatcher`` calls `cycle()`: it writes the outcomes handed back
  and claims the due entries, in one transaction (`claim_due`), and hands each
  won run to a worker that it reserved before the claim; and
  `claim_overdue()`, the claim by query of rows that no heap's claim took.
- ``persched-worker-{i}`` calls `complete()` after a run: the outcome goes
  back to the dispatcher, which writes it with its next cycle; if the
  dispatcher is gone (a shutdown that timed out), the worker writes it. A
  worker that hands an async job's run to the application's loop calls
  `release()` first (its worker is free; the run stays in flight), and
  ``persched-async-watch`` (`persched._interfaces.async_front`) calls `complete()` once the
  coroutine ended.
- ``persched-heartbeat`` calls `in_flight()` (whose leases to renew, and
  never recover) and `retry_unwritten()` (outcomes a failed write left).
- ``persched-overrun`` calls `on_overrun()` for a run past its max runtime.
- Callers' threads: `wait_for_job()` (deschedule(wait=True)), `count()`,
  `busy_jobs()` and `stop_claiming()` (shutdown).

Locks
-----
- ``_claim_gate`` is held by the dispatcher around each claim transaction and
  the hand-over of its runs to the workers, and by `stop_claiming()` while it
  sets ``_stopping``. It is held across the database transaction on purpose:
  that makes shutdown's linearization point exact, since a claim either
  committed (and its run was queued for a worker) before ``_stopping`` was
  set, or it never commits (docs/reference/behaviour.md, "Shutdown": no
  claim commits after shutdown() begins).
- ``_inflight_cond`` guards the count of runs in flight per job (for
  deschedule(wait=True)), the set of run ids in flight (for the heartbeat),
  the run ids whose worker was released, and the outcomes whose write
  failed; it is never held across a database
  call. A claim counts its job *before* its transaction, so a
  deschedule(wait=True) racing the claim waits for it either way (a claim by
  query, `claim_overdue`, learns its jobs only from the database: it counts
  itself in ``_searches`` instead, and deschedule(wait=True) waits for every
  search under way); a job is
  counted down when its claim was lost or its outcome written, so an outcome
  that waits to be written again keeps its run in flight and its lease
  renewed.

Lock order: ``_claim_gate`` → ``_inflight_cond``, and ``_claim_gate`` → the
dispatcher's ``_cond`` (a claim that failed queues its entries again) and the
overrun watch's (a run with a max runtime is watched before its hand-over).
``_inflight_cond`` is innermost: nothing is taken under it. ``_overran_runs``
needs no lock (single dict operations are atomic): the overrun thread sets a
run's flag before it marks the row, the completion pops it. No user code
runs under any of these locks; events are emitted after them.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections import Counter
from typing import TYPE_CHECKING, Final, Protocol

from .. import _loggers, _realtime
from .._model.instant import Instant, Micros, seconds, to_datetime
from .._model.models import JobState
from .._store.observer import notify
from .._store.records import Claim, ClaimMiss, Completion, Overdue, bound_error_text
from ..errors import StoreError
from .dispatcher import Dispatcher
from .overrun import OverrunWatch
from .tracebacks import describe
from .workers import WorkerPool, current_run_claim

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from .._model.models import Run
    from .._store import Store
    from .._store.records import ClaimEntry
    from .events import EventKind
    from .timebase import Timebase

__all__ = ["RunBook"]

logger = logging.getLogger(_loggers.LIBRARY)

_RUNNING: Final = JobState.RUNNING.value
CLAIM_RETRY: Final = Micros(1_000_000)  # back-off before a claim that hit a store error is tried again


class EmitCallback(Protocol):
    """Emits an event about a run (`JobScheduler._emit`); `run` builds its payload, called only if someone listens."""

    def __call__(self, kind: EventKind, job_id: str, generation: int, *, run: Callable[[], Run]) -> None: ...


# The event of a recorded outcome (anything else a worker records is a failure).
_EVENT_OF: Final[dict[str, EventKind]] = {"ok": "run_finished", "stopped": "run_stopped"}


class RunBook:
    """Claims due runs, hands them to workers, records their outcomes; counts what is in flight.

    Args:
        store: The store.
        timebase: The scheduler's time frame.
        instance_id: This scheduler's instance id (the owner of its claims).
        lease: How long a claim is owned without a heartbeat.
        workers: The size of the worker pool.
        allowed_modules: As for `WorkerPool`.
        emit: Emits run_started, run_finished, run_failed, run_stopped and run_overran.
        recorded: Called with the job of each outcome written (retention counts them).
        owns: Whether this instance owns a job (`persched._engine.membership`); None: the work is not
            shared, and every instance tries every slot.
    """

    def __init__(
        self,
        store: Store,
        timebase: Timebase,
        instance_id: str,
        lease: Micros,
        workers: int,
        allowed_modules: tuple[str, ...] | None,
        emit: EmitCallback,
        recorded: Callable[[str], None],
        *,
        owns: Callable[[str], bool] | None = None,
    ) -> None:
        self._store = store
        self._owns = owns
        self._timebase = timebase
        self._instance_id = instance_id
        self._lease = lease
        self._emit = emit
        self._recorded = recorded
        self._claim_gate = threading.Lock()
        self._stopping = False
        self._inflight_cond = threading.Condition()
        self._inflight_jobs: Counter[str] = Counter()
        self._inflight_runs: set[int] = set()
        self._unwritten: list[Completion] = []  # completions a failed write left behind
        self._overran_runs: dict[int, bool] = {}  # run_id -> True once it overran (dict ops are atomic)
        self._searches = 0  # claims by query (claim_overdue) under way: their jobs are not counted yet
        # (job_id, generation) of rows claim_overdue could not read: passed by (a fix is a new generation)
        self._unreadable: set[tuple[str, int]] = set()
        # Jobs of other owners that a search ran here: queued here until a claim loses to another's
        # (persched._engine.dispatcher "Sharing the work"). Set operations are atomic: no lock.
        self._adopted: set[str] = set()
        self.dispatcher = Dispatcher(
            timebase, workers, self.cycle, search=None if owns is None else self.claim_overdue, owns=owns
        )
        self._released: set[int] = set()  # run ids whose worker was given back before the run ended
        self.pool = WorkerPool(workers, self.complete, allowed_modules, release=self.release, namespace=store.namespace)
        self.overrun = OverrunWatch(timebase, self.on_overrun)

    # -- claims: the dispatcher's side ----------------------------------------------

    def stop_claiming(self) -> None:
        """Shutdown's linearization point: no claim commits after this returns (see the module docstring)."""
        with self._claim_gate:
            self._stopping = True

    def cycle(self, completions: list[Completion], due: list[ClaimEntry]) -> int:
        """Dispatcher callback: write finished runs and claim due entries; return how many were handed over."""
        if due:
            return self.claim_due(due, completions)
        self.write_completions(completions)
        return 0

    def claim_due(self, due: list[ClaimEntry], completions: Sequence[Completion] = ()) -> int:
        """Write `completions` and claim `due` in one transaction; hand each won run to a reserved worker."""
        with self._inflight_cond:
            for job_id, _, _, _ in due:
                self._inflight_jobs[job_id] += 1  # before the claim: see the module docstring
        results: list[Claim | ClaimMiss] = []
        next_due: list[Instant | None] | None = None
        with self._claim_gate:
            try:
                if self._stopping:  # no claim commits after shutdown() began
                    next_due = self._store.finish_runs(completions, self._instance_id)
                else:
                    next_due, results = self._store.dispatch(
                        completions,
                        due,
                        self._timebase.now,  # read under the write lock
                        self._instance_id,
                        self._lease,
                    )
            except Exception as exc:  # noqa: BLE001 - whatever failed, the entries and outcomes must not be dropped
                logger.warning(
                    "claiming %d runs (and recording %d outcomes) failed, retrying in %s s: %s",
                    len(due),
                    len(completions),
                    seconds(CLAIM_RETRY),
                    exc if isinstance(exc, StoreError) else describe(exc),  # a bug: show where
                )
                retry_at = Instant(self._timebase.now() + CLAIM_RETRY)
                for job_id, generation, _, _ in due:
                    self._queue(retry_at, job_id, generation)
            self._hand_over(results)
        if next_due is not None:
            self._completions_written(completions, next_due)
        else:
            self._keep_unwritten(completions)
        return self._settle(due, results)

    def claim_overdue(self, limit: int, before: Instant) -> int:
        """Dispatcher callback: claim up to `limit` rows due before `before` that no claim took,
        whoever owns them (`Store.claim_overdue`); return how many were handed over."""
        with self._inflight_cond:
            self._searches += 1  # the jobs it claims are not known yet: see the module docstring
        found = Overdue([], [], [], [])
        try:
            with self._claim_gate:
                if self._stopping:  # no claim commits after shutdown() began
                    return 0
                try:
                    found = self._store.claim_overdue(
                        limit, before, self._timebase.now, self._instance_id, self._lease, self._unreadable
                    )
                except Exception as exc:  # noqa: BLE001 - nothing is lost: the next search finds the rows
                    logger.warning(
                        "claiming overdue runs failed, will retry: %s",
                        exc if isinstance(exc, StoreError) else describe(exc),
                    )
                with self._inflight_cond:
                    for job_id, _, _, _ in found.entries:
                        self._inflight_jobs[job_id] += 1
                self._hand_over(found.results)
                self._adopted.update(r.job_id for r in found.results if isinstance(r, Claim))
        finally:
            with self._inflight_cond:
                self._searches -= 1
                self._inflight_cond.notify_all()
        self._unreadable.update(found.unreadable)
        for due_at, job_id, generation in found.later:
            self.dispatcher.offer(due_at, job_id, generation)
        return self._settle(found.entries, found.results)

    def _hand_over(self, results: Sequence[Claim | ClaimMiss]) -> None:
        """Under the claim gate: give each won run to a reserved worker (see the module docstring)."""
        for result in results:
            if isinstance(result, Claim):
                with self._inflight_cond:
                    self._inflight_runs.add(result.run_id)
                if result.max_runtime is not None:
                    self.overrun.watch(result)
                self.pool.submit(result)

    def _settle(self, due: Sequence[ClaimEntry], results: Sequence[Claim | ClaimMiss]) -> int:
        """After a claim: announce the runs started, requeue or drop the entries that lost; how many started."""
        handed_over = 0
        for (job_id, generation, _, _), result in itertools.zip_longest(due, results):
            if isinstance(result, Claim):
                handed_over += 1
                self._emit("run_started", job_id, generation, run=result.run)
            else:
                if result is not None:
                    self._requeue_missed(job_id, generation, result)
                self.job_done(job_id, None)
        return handed_over

    def _requeue_missed(self, job_id: str, generation: int, miss: ClaimMiss) -> None:
        """A lost claim: queue the job again where the store says it stands (see `persched._engine.dispatcher`),
        if this instance owns the job."""
        if miss.generation != generation or miss.due_at is None:
            return  # descheduled, replaced, paused or finished: the entry was stale
        if miss.state == _RUNNING and miss.owner == self._instance_id:
            return  # our own run: its completion queues the next slot
        observer = self._store.observer
        notify(lambda: observer.claim_conflict(job_id), "claim conflict")
        logger.debug("claim of %s generation %d lost (state %s)", job_id, generation, miss.state)
        # Only the job's owner queues it again (persched._engine.dispatcher "Sharing the work"); should
        # nobody, the search for overdue rows finds it. An adopted job lost to another claim: its
        # owner is back, or another instance adopted it.
        if miss.taken:
            self._adopted.discard(job_id)
        self._queue(miss.due_at, job_id, generation)

    def _queue(self, due_at: Instant, job_id: str, generation: int) -> None:
        """Queue a job's next slot if it is this instance's: owned, or adopted."""
        if job_id in self._adopted:
            self.dispatcher.push(due_at, job_id, generation)
        else:
            self.dispatcher.offer(due_at, job_id, generation)

    # -- completions: the workers' side ---------------------------------------------

    def release(self, claim: Claim) -> None:
        """Worker callback: the run goes on elsewhere (an async job on the application's loop), and
        its worker is free for other runs now; the run stays in flight until its outcome is written."""
        with self._inflight_cond:
            self._released.add(claim.run_id)
        self.dispatcher.release_worker()

    def complete(self, claim: Claim, outcome: str, error: str | None) -> None:
        """Worker (or awaitable runner) callback: hand the outcome to the dispatcher, which writes it
        with the next cycle."""
        if claim.max_runtime is not None:
            self.overrun.done(claim.run_id)
        if error is not None:
            error = bound_error_text(error)  # keep the last line: the exception's type and message
        with self._inflight_cond:
            held_worker = claim.run_id not in self._released
            self._released.discard(claim.run_id)
        completion = Completion(claim, outcome, error, self._timebase.now())
        if not self.dispatcher.complete(completion, frees_worker=held_worker):
            self.write_completions([completion])  # the dispatcher is gone (shutdown timed out)

    def write_completions(self, completions: Sequence[Completion]) -> None:
        """Record outcomes in one transaction; queue each job's next slot."""
        if not completions:
            return
        try:
            due = self._store.finish_runs(completions, self._instance_id)
        except Exception as exc:  # noqa: BLE001 - an outcome is never dropped: the heartbeat retries it
            logger.warning(
                "recording %d outcomes failed, will retry: %s",
                len(completions),
                exc if isinstance(exc, StoreError) else describe(exc),
            )
            self._keep_unwritten(completions)
            return
        self._completions_written(completions, due)

    def _keep_unwritten(self, completions: Sequence[Completion]) -> None:
        # The runs stay in flight (their leases renewed) and the heartbeat
        # tries again, so a passing outage costs no run its outcome.
        with self._inflight_cond:
            self._unwritten.extend(completions)

    def _completions_written(self, completions: Sequence[Completion], due: Sequence[Instant | None]) -> None:
        for completion, due_at in zip(completions, due, strict=True):
            claim = completion.claim
            if due_at is not None:
                self._queue(due_at, claim.job_id, claim.generation)
            else:
                self._adopted.discard(claim.job_id)
            self._recorded(claim.job_id)
            overran = self._overran_runs.pop(claim.run_id, False)

            def finished(completion: Completion = completion, overran: bool = overran) -> Run:
                return completion.claim.run().model_copy(
                    update={
                        "finished_at": to_datetime(completion.finished_at),
                        "outcome": completion.outcome,
                        "error": completion.error,
                        "instance_id": self._instance_id,
                        "overran": overran,
                    }
                )

            kind: EventKind = _EVENT_OF.get(completion.outcome, "run_failed")
            self._emit(kind, claim.job_id, claim.generation, run=finished)
            self.job_done(claim.job_id, claim.run_id)

    def retry_unwritten(self) -> None:
        """Heartbeat callback (and last step of shutdown): write completions a failed write left behind."""
        with self._inflight_cond:
            unwritten, self._unwritten = self._unwritten, []
        if unwritten:
            self.write_completions(unwritten)

    def on_overrun(self, claim: Claim) -> None:
        """Overrun-watch callback: a run is still going after its job's max_runtime_seconds."""
        self._overran_runs[claim.run_id] = True  # before the record: see _completions_written
        if not self._store.mark_overran(claim.run_id):
            self._overran_runs.pop(claim.run_id, None)  # it finished in the meantime: no overrun
            return
        stop = claim.run_policy.on_overrun == "stop"
        logger.warning(
            "job %s generation %d: the run for %s is still going after %s s (max_runtime_seconds); %s",
            claim.job_id,
            claim.generation,
            to_datetime(claim.scheduled_for).isoformat(),
            seconds(claim.max_runtime or 0),
            "it is asked to stop (on_overrun='stop')" if stop else "it goes on (on_overrun='warn')",
        )
        if stop and (signal := self.pool.stops.signal_of(claim)) is not None:
            signal.request("max_runtime")
        self._emit(
            "run_overran",
            claim.job_id,
            claim.generation,
            run=lambda: claim.run().model_copy(update={"overran": True, "instance_id": self._instance_id}),
        )

    # -- the account of what is in flight -------------------------------------------

    def job_done(self, job_id: str, run_id: int | None) -> None:
        """A claim of `job_id` was lost (`run_id` None) or its run's outcome was written."""
        with self._inflight_cond:
            self._inflight_jobs[job_id] -= 1
            if self._inflight_jobs[job_id] <= 0:
                del self._inflight_jobs[job_id]
            if run_id is not None:
                self._inflight_runs.discard(run_id)
            self._inflight_cond.notify_all()

    def wait_for_job(self, job_id: str, timeout: float | None) -> None:
        """Block until this process has no run of `job_id` in flight (a run's own job excepted), or `timeout`."""
        own = current_run_claim()
        allowed = 1 if own is not None and own.job_id == job_id else 0  # never wait for ourselves
        deadline = None if timeout is None else _realtime.monotonic() + timeout
        with self._inflight_cond:
            while self._inflight_jobs[job_id] > allowed or self._searches:
                left = None if deadline is None else deadline - _realtime.monotonic()
                if left is not None and left <= 0:
                    return
                self._inflight_cond.wait(left)

    def in_flight(self) -> set[int]:
        """Heartbeat callback: the run ids claimed here whose outcome is not written yet."""
        with self._inflight_cond:
            return set(self._inflight_runs)

    def count(self) -> int:
        """How many runs are claimed here and not yet recorded."""
        with self._inflight_cond:
            return len(self._inflight_runs)

    def busy_jobs(self) -> list[str]:
        """The job of each claim in flight, sorted (a job twice if it has two)."""
        with self._inflight_cond:
            return sorted(job_id for job_id, count in self._inflight_jobs.items() for _ in range(count))
