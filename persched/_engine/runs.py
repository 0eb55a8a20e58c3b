"""Run bookkeeping: the claims, the writes of outcomes, and the account of what is in flight.

`RunBook` has no thread. ``persched-dispatcher`` calls `cycle` and `claim_overdue`
and gets back a `Dispatched` (never a call back). Workers call `ended`; the
heartbeat `in_flight` and `retry_unwritten`; ``persched-overrun`` `on_overrun`;
callers `wait_for_job`, `count`, `busy_jobs` and `stop_claiming`.

``_claim_gate`` is held across each claim transaction and the hand-over of its
runs, and by `stop_claiming` while it sets ``_stopping``: that makes shutdown's
linearization point exact, as a claim either committed before the flag was set
or never commits (docs/reference/behaviour.md, "Shutdown"). ``_inflight_cond``
guards the jobs and runs in flight, the searches under way and the unwritten
outcomes, and is held across no database call. A claim counts its job *before*
its transaction, and a search counts itself in ``_searches``, so a
deschedule(wait=True) racing either waits for it.

Lock order: ``_claim_gate`` → ``_inflight_cond``; ``_claim_gate`` → the overrun
watch's lock. ``_inflight_cond`` is innermost. ``_overran_runs`` and ``_adopted``
need no lock: one dict or set operation is atomic, and the overrun thread sets a
run's flag before it marks the row. Events are emitted after every lock.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Protocol

from .. import _loggers, _realtime
from .._model.instant import Instant, Micros, seconds, to_datetime
from .._model.models import JobState
from .._store.observer import notify
from .._store.records import Claim, ClaimMiss, Completion, Overdue, bound_error_text
from ..errors import StoreError
from .tracebacks import describe
from .workers import current_run_claim

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from .._model.models import Run
    from .._store import Store
    from .._store.records import ClaimEntry
    from .events import EventKind
    from .timebase import Timebase
    from .window import Entry

__all__ = ["Dispatched", "HandOver", "RunBook"]

logger = logging.getLogger(_loggers.LIBRARY)

_RUNNING: Final = JobState.RUNNING.value
CLAIM_RETRY: Final = Micros(1_000_000)  # back-off before a claim that hit a store error is tried again


class EmitCallback(Protocol):
    """Emits an event about a run (`JobScheduler._emit`); `run` builds its payload, called only if someone listens."""

    def __call__(self, kind: EventKind, job_id: str, generation: int, *, run: Callable[[], Run]) -> None: ...


# The event of a recorded outcome (anything else a worker records is a failure).
_EVENT_OF: Final[dict[str, EventKind]] = {"ok": "run_finished", "stopped": "run_stopped"}


@dataclass
class Dispatched:
    """What a claim or a write leaves for the dispatcher: how many runs went to a worker, and the
    entries to queue, `push` whoever owns the job (adopted here), `offer` if this instance owns it."""

    handed_over: int = 0
    push: list[Entry] = field(default_factory=list)
    offer: list[Entry] = field(default_factory=list)


class HandOver(Protocol):
    """Gives a won run to its reserved worker (`persched._engine.dispatcher`); called under the claim gate."""

    def __call__(self, claim: Claim, /) -> None: ...


class RunBook:
    """Claims due runs and hands them over, records their outcomes; counts what is in flight."""

    def __init__(
        self,
        store: Store,
        timebase: Timebase,
        instance_id: str,
        lease: Micros,
        emit: EmitCallback,
        recorded: Callable[[str, int | None], None],
    ) -> None:
        self._store = store
        self.namespace = store.namespace  # what a run's RunContext says
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
        self._overran_runs: dict[int, bool] = {}  # run_id -> True once it overran
        self._searches = 0  # claim_overdue calls under way: their jobs are not counted yet
        # Rows claim_overdue could not read, passed by until a fix (a new generation).
        self._unreadable: set[tuple[str, int]] = set()
        self._adopted: set[str] = set()  # jobs of other owners that a search ran here

    # -- claims: the dispatcher's side ----------------------------------------------

    def stop_claiming(self) -> None:
        """Shutdown's linearization point: no claim commits after this returns."""
        with self._claim_gate:
            self._stopping = True

    def cycle(self, completions: list[Completion], due: list[ClaimEntry], hand_over: HandOver) -> Dispatched:
        """Write finished runs and claim due entries, handing each won run over."""
        if due:
            return self.claim_due(due, completions, hand_over)
        return self.write_completions(completions)

    def claim_due(self, due: list[ClaimEntry], completions: Sequence[Completion], hand_over: HandOver) -> Dispatched:
        """Write `completions` and claim `due` in one transaction; hand each won run to a reserved worker."""
        with self._inflight_cond:
            for job_id, _, _, _ in due:
                self._inflight_jobs[job_id] += 1  # before the claim: deschedule(wait=True) sees it
        dispatched = Dispatched()
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
                    self._queue(dispatched, retry_at, job_id, generation)
            self._hand_over(results, hand_over)
        if next_due is not None:
            self._completions_written(dispatched, completions, next_due)
        else:
            self._keep_unwritten(completions)
        self._settle(dispatched, due, results)
        return dispatched

    def claim_overdue(self, limit: int, before: Instant, hand_over: HandOver) -> Dispatched:
        """Claim up to `limit` rows due before `before` that no claim took, whoever owns them
        (`Store.claim_overdue`), handing each won run over."""
        with self._inflight_cond:
            self._searches += 1  # its jobs are not known yet: deschedule(wait=True) waits for it
        found = Overdue([], [], [], [])
        dispatched = Dispatched()
        try:
            with self._claim_gate:
                if self._stopping:  # no claim commits after shutdown() began
                    return dispatched
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
                self._hand_over(found.results, hand_over)
                self._adopted.update(r.job_id for r in found.results if isinstance(r, Claim))
        finally:
            with self._inflight_cond:
                self._searches -= 1
                self._inflight_cond.notify_all()
        self._unreadable.update(found.unreadable)
        dispatched.offer.extend(found.later)
        self._settle(dispatched, found.entries, found.results)
        return dispatched

    def _hand_over(self, results: Sequence[Claim | ClaimMiss], hand_over: HandOver) -> None:
        """Under the claim gate: give each won run to a reserved worker."""
        for result in results:
            if isinstance(result, Claim):
                with self._inflight_cond:
                    self._inflight_runs.add(result.run_id)
                hand_over(result)

    def _settle(self, dispatched: Dispatched, due: Sequence[ClaimEntry], results: Sequence[Claim | ClaimMiss]) -> None:
        """After a claim: announce the runs started, requeue or drop the entries that lost; count those started."""
        for (job_id, generation, _, _), result in itertools.zip_longest(due, results):
            if isinstance(result, Claim):
                dispatched.handed_over += 1
                self._emit("run_started", job_id, generation, run=result.run)
            else:
                if result is not None:
                    self._requeue_missed(dispatched, job_id, generation, result)
                self.job_done(job_id, None)

    def _requeue_missed(self, dispatched: Dispatched, job_id: str, generation: int, miss: ClaimMiss) -> None:
        """A lost claim: queue the job again where the store says it stands, if it is this instance's."""
        if miss.generation != generation or miss.due_at is None:
            return  # descheduled, replaced, paused or finished: the entry was stale
        if miss.state == _RUNNING and miss.owner == self._instance_id:
            return  # our own run: its completion queues the next slot
        observer = self._store.observer
        notify(lambda: observer.claim_conflict(job_id), "claim conflict")
        logger.debug("claim of %s generation %d lost (state %s)", job_id, generation, miss.state)
        # Only the owner queues it again; should nobody, the search finds it. An adopted job
        # that lost to another claim goes back to its owner.
        if miss.taken:
            self._adopted.discard(job_id)
        self._queue(dispatched, miss.due_at, job_id, generation)

    def _queue(self, dispatched: Dispatched, due_at: Instant, job_id: str, generation: int) -> None:
        """Queue a job's next slot if it is this instance's: owned, or adopted."""
        (dispatched.push if job_id in self._adopted else dispatched.offer).append((due_at, job_id, generation))

    # -- completions ----------------------------------------------------------------

    def ended(self, claim: Claim, outcome: str, error: str | None) -> Completion:
        """A run ended: its outcome as it will be written."""
        if error is not None:
            error = bound_error_text(error)  # keep the last line: the exception's type and message
        return Completion(claim, outcome, error, self._timebase.now())

    def write_completions(self, completions: Sequence[Completion]) -> Dispatched:
        """Record outcomes in one transaction; return each job's next slot to queue."""
        dispatched = Dispatched()
        if not completions:
            return dispatched
        try:
            due = self._store.finish_runs(completions, self._instance_id)
        except Exception as exc:  # noqa: BLE001 - an outcome is never dropped: the heartbeat retries it
            logger.warning(
                "recording %d outcomes failed, will retry: %s",
                len(completions),
                exc if isinstance(exc, StoreError) else describe(exc),
            )
            self._keep_unwritten(completions)
            return dispatched
        self._completions_written(dispatched, completions, due)
        return dispatched

    def _keep_unwritten(self, completions: Sequence[Completion]) -> None:
        # The runs stay in flight, their leases renewed, until the heartbeat's retry writes them.
        with self._inflight_cond:
            self._unwritten.extend(completions)

    def _completions_written(
        self, dispatched: Dispatched, completions: Sequence[Completion], due: Sequence[Instant | None]
    ) -> None:
        for completion, due_at in zip(completions, due, strict=True):
            claim = completion.claim
            if due_at is not None:
                self._queue(dispatched, due_at, claim.job_id, claim.generation)
            else:
                self._adopted.discard(claim.job_id)
            self._recorded(claim.job_id, claim.runs_before)
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

    def retry_unwritten(self) -> Dispatched:
        """Write the completions a failed write left behind (the heartbeat's, and shutdown's last step)."""
        with self._inflight_cond:
            unwritten, self._unwritten = self._unwritten, []
        return self.write_completions(unwritten)

    def on_overrun(self, claim: Claim) -> bool:
        """Overrun-watch callback: record that a run passed its max runtime; False if it finished meanwhile."""
        self._overran_runs[claim.run_id] = True  # before the record: see _completions_written
        if not self._store.mark_overran(claim.run_id):
            self._overran_runs.pop(claim.run_id, None)  # it finished in the meantime: no overrun
            return False
        stop = claim.run_policy.on_overrun == "stop"
        logger.warning(
            "job %s generation %d: the run for %s is still going after %s s (max_runtime_seconds); %s",
            claim.job_id,
            claim.generation,
            to_datetime(claim.scheduled_for).isoformat(),
            seconds(claim.max_runtime or 0),
            "it is asked to stop (on_overrun='stop')" if stop else "it goes on (on_overrun='warn')",
        )
        self._emit(
            "run_overran",
            claim.job_id,
            claim.generation,
            run=lambda: claim.run().model_copy(update={"overran": True, "instance_id": self._instance_id}),
        )
        return True

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
