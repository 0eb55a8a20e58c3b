"""`AsyncJobScheduler`: the asyncio front end (FastAPI, Starlette, aiohttp), over `JobScheduler`.

Every method that touches the database awaits ``asyncio.to_thread``, so SQL,
migrations and joins never run on the event loop, and the threaded scheduler
underneath keeps every guarantee. With ``jobs_on_loop=True`` a worker claims an
async run, hands its coroutine to the application's loop and gives its worker
back at once (`persched._engine.workers`), so a blocked loop holds back the async
jobs and the application, never the sync jobs. ``persched-async-watch`` records
the outcomes off the loop, and fails the runs of a loop that stopped under them.
What users must know (a blocking job, cancelling a call, ``started_at``):
docs/how-to/applications.md, "asyncio: `AsyncJobScheduler`".
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import functools
import inspect
import logging
import threading
from typing import TYPE_CHECKING, Any, Final

from .._engine.config import (
    DEFAULT_KEEP_ERROR_RUNS,
    DEFAULT_MAX_CLOCK_SKEW_SECONDS,
    DEFAULT_MIGRATION_TIMEOUT_SECONDS,
    DEFAULT_WORKERS,
    check_share_work,
    scheduler_options,
)
from .._engine.context import ACTIVE_RUN
from .._engine.horizon import DEFAULT_HORIZON_SECONDS
from .._engine.scheduler import DEFAULT_URL, JobScheduler, internals_of
from .._engine.tracebacks import describe
from .._engine.workers import awaited, current_run_claim, set_current_run_claim
from .._model.models import DEFAULT_MAX_ARGS_BYTES, DEFAULT_NAMESPACE, given_options
from ..errors import InvalidJobError

if TYPE_CHECKING:
    import os
    from collections.abc import Callable, Collection, Iterable
    from datetime import date, datetime
    from types import TracebackType

    from .._engine.events import EventKind, Listener
    from .._engine.workers import Finished
    from .._model.declare import DeclareResult, JobSpec
    from .._model.instant import Instant
    from .._model.models import Executor, Job, Misfire, OnOverrun, Overlap, Recurrence, Run
    from .._store.observer import Observer
    from .._store.records import Claim
    from ..clock import Clock, SecondsClock

__all__ = ["AsyncJobScheduler"]

logger = logging.getLogger(__name__)

LOOP_CHECK_SECONDS: Final = 1.0  # how often the watch looks whether the loop still runs while runs are on it


class _LoopRunner:
    """Runs async jobs' awaitables on the application's loop (`persched._engine.workers.AwaitableRunner`).

    `start` runs on a worker; ``persched-async-watch`` (made at the first run, ended by
    `stop` once no run is left) calls each run's `finished`, never on the loop. ``_cond``
    guards the pending runs, the watch's wake-up and the stop flag; it is innermost and
    held for no I/O and no user code.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, now: Callable[[], Instant], limit: int) -> None:
        self._loop = loop
        self._now = now
        self._slots = asyncio.Semaphore(limit)  # at most `workers` async runs go at once
        self._cond = threading.Condition()
        # Each run's future -> its claim as it runs (with started_at once begun), and its callback.
        self._pending: dict[concurrent.futures.Future[None], tuple[list[Claim], Finished]] = {}
        self._wake: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._stopping = False
        self._thread: threading.Thread | None = None

    def start(self, claim: Claim, awaitable: Any, finished: Finished) -> None:  # noqa: ANN401 - a job's result
        """On a worker: schedule `awaitable` on the loop and return; the watch calls `finished` when it ends."""
        ran = [claim]
        coroutine = self._run(ran, awaitable)
        try:
            if self._loop.is_closed() or not self._loop.is_running():
                raise RuntimeError("the application's event loop is not running; the async job was not started")
            # The task copies this thread's context, so current_run() works inside the coroutine.
            future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        except RuntimeError:
            coroutine.close()  # never started: no "never awaited" warning, for it nor for the job's
            _close(awaitable)
            raise
        active = ACTIVE_RUN.get()  # the worker's run, whose stop cancels the task (from any thread)
        if active is not None:
            active.stop.on_request(functools.partial(_cancel, future))
        with self._cond:
            self._pending[future] = (ran, finished)
            self._wake_watch()
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="persched-async-watch", daemon=True)
                self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._wake_watch()

    def join(self, timeout: float | None) -> bool:
        with self._cond:
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        with self._cond:
            return not self._pending

    async def _run(self, ran: list[Claim], awaitable: Any) -> None:  # noqa: ANN401 - a job's result
        """The task of one run: wait for a slot, note when the coroutine began, await it."""
        began = False
        try:
            async with self._slots:
                # The run starts now, not at its claim: the loop may have been busy.
                ran[0] = dataclasses.replace(ran[0], started_at=self._now())
                set_current_run_claim(ran[0])
                began = True
                await awaited(awaitable)
        finally:
            if not began:
                _close(awaitable)  # cancelled while it waited for a slot

    def _wake_watch(self) -> None:
        """Under ``_cond``: wake the watch (a new run, or stop)."""
        if not self._wake.done():
            self._wake.set_result(None)

    def _watch(self) -> None:
        while True:
            with self._cond:
                if self._stopping and not self._pending:
                    self._thread = None
                    return
                if self._wake.done():
                    self._wake = concurrent.futures.Future()
                futures, wake = list(self._pending), self._wake
            done, _ = concurrent.futures.wait(
                [*futures, wake],
                timeout=LOOP_CHECK_SECONDS if futures else None,  # idle: no wake-ups
                return_when=concurrent.futures.FIRST_COMPLETED,
            )
            ended: list[tuple[list[Claim], Finished, BaseException | None]] = []
            loop_gone = not done and (self._loop.is_closed() or not self._loop.is_running())
            with self._cond:
                for future in futures:
                    if future in done:
                        ran, finished = self._pending.pop(future)
                        ended.append((ran, finished, _raised(future)))
                    elif loop_gone:
                        # The loop ended without shutdown() and without cancelling the task: fail, never hang.
                        ran, finished = self._pending.pop(future)
                        if not self._loop.is_closed():
                            future.cancel()
                        gone = RuntimeError("the application's event loop stopped before the async job finished")
                        ended.append((ran, finished, gone))
            for ran, finished, exc in ended:
                _report(ran[0], finished, exc)
            del ended


def _report(claim: Claim, finished: Finished, exc: BaseException | None) -> None:
    try:
        finished(claim, exc)
    except BaseException as failure:  # noqa: BLE001 - the watch must outlive any failure, or shutdown hangs
        logger.error("recording the end of run %d of %s failed\n%s", claim.run_id, claim.job_id, describe(failure))


def _raised(future: concurrent.futures.Future[None]) -> BaseException | None:
    """What a finished run's task raised (CancelledError if it was cancelled), or None."""
    if future.cancelled():
        return asyncio.CancelledError()
    return future.exception()


def _cancel(future: concurrent.futures.Future[None]) -> None:
    """A stop of an async job on the application's loop: cancel its task (thread-safe)."""
    future.cancel()


def _close(awaitable: object) -> None:
    """Close a coroutine that will never run (no "was never awaited" warning)."""
    if inspect.iscoroutine(awaitable):
        awaitable.close()


class AsyncJobScheduler:
    """`JobScheduler` for asyncio applications: awaitable methods, async jobs on the application's loop.

    ``async with AsyncJobScheduler(url) as sched:`` starts it (in the running
    loop) and shuts it down on exit. Every `JobScheduler` method is here with
    the same arguments and meaning; those that touch the database are
    coroutines (the blocking work runs on a thread, never on the loop).

    Args:
        url: As for `JobScheduler`.
        workers: How many sync runs may execute at once (worker threads), and
            how many async runs may go at once on the loop: an async run holds
            a worker only while it is handed to the loop.
        clock: As for `JobScheduler`.
        jobs_on_loop: Run coroutine-function jobs on the event loop that
            called `start()` (default). False: each worker runs them on an
            event loop of its own, as `JobScheduler` does.

    The other keyword arguments (`instance_id`, `lease_seconds`,
    `heartbeat_seconds`, `busy_timeout_seconds`, `synchronous`, `keep_runs`,
    `keep_runs_for_seconds`, `keep_error_runs`, `allowed_modules`, `pickup_seconds`,
    `pickup_check_seconds`, `horizon_seconds`, `max_args_bytes`, `namespace`,
    `share_work`, `max_clock_skew_seconds`, `migration_timeout_seconds`) are those of `JobScheduler`.

    Raises:
        InvalidJobError: An argument is out of range.
        StoreError: The database cannot be opened.
    """

    def __init__(
        self,
        url: str | os.PathLike[str] = DEFAULT_URL,
        workers: int = DEFAULT_WORKERS,
        clock: Clock | SecondsClock | None = None,
        *,
        jobs_on_loop: bool = True,
        instance_id: str | None = None,
        lease_seconds: float = 30.0,
        heartbeat_seconds: float | None = None,
        busy_timeout_seconds: float = 5.0,
        synchronous: str = "FULL",
        keep_runs: int | None = 1000,
        keep_runs_for_seconds: float | None = None,
        keep_error_runs: int | None = DEFAULT_KEEP_ERROR_RUNS,
        allowed_modules: Iterable[str] | None = None,
        pickup_seconds: float = 1.0,
        pickup_check_seconds: float = 0.1,
        horizon_seconds: float = DEFAULT_HORIZON_SECONDS,
        max_args_bytes: int = DEFAULT_MAX_ARGS_BYTES,
        namespace: str = DEFAULT_NAMESPACE,
        share_work: bool = True,
        max_clock_skew_seconds: float | None = DEFAULT_MAX_CLOCK_SKEW_SECONDS,
        migration_timeout_seconds: float = DEFAULT_MIGRATION_TIMEOUT_SECONDS,
    ) -> None:
        if not isinstance(jobs_on_loop, bool):
            raise InvalidJobError("jobs_on_loop", f"must be True or False, got {jobs_on_loop!r}")
        self._jobs_on_loop = jobs_on_loop
        check_share_work(share_work, stacklevel=2)  # here: the warning names the caller's line
        self._sched = JobScheduler(**scheduler_options(locals()))
        self.instance_id: Final = self._sched.instance_id
        self.namespace: Final = self._sched.namespace

    @property
    def scheduler(self) -> JobScheduler:
        """The threaded scheduler underneath (for code that is not async, e.g. a sync endpoint)."""
        return self._sched

    # -- lifecycle ------------------------------------------------------------

    async def start(self) -> None:
        """Migrate the schema, load the jobs and start dispatching; async jobs then run on this loop.

        Raises:
            SchedulerStateError: Already started, or shut down.
            SchemaVersionError: The database's schema is newer than this code.
            StoreError: The database cannot be used.
        """
        if self._jobs_on_loop:
            # Set before the workers start; a second start() is refused by the scheduler below.
            internals = internals_of(self._sched)
            internals.run_awaitables_with(_LoopRunner(asyncio.get_running_loop(), internals.now, internals.workers))
        await asyncio.to_thread(self._sched.start)

    async def shutdown(self, wait: bool = True, timeout: float | None = None) -> None:
        """Stop dispatching; let in-flight runs (async ones too, on this loop) finish; release the database.

        Called from inside a running job, it does not wait for that job (as `JobScheduler.shutdown`).

        Args:
            wait: Wait until in-flight runs finished (up to `timeout`); the loop keeps running them meanwhile.
            timeout: Seconds to wait for in-flight runs; None waits for ever.
        """
        if current_run_claim() is not None and wait is True:
            wait = False  # from inside a job: the thread below would wait for this very coroutine
        await asyncio.to_thread(self._sched.shutdown, wait, timeout)

    async def __aenter__(self) -> AsyncJobScheduler:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.shutdown(wait=True)

    # -- public operations (the same arguments as JobScheduler's; a parity test keeps them so) ----------

    async def schedule(
        self,
        job_id: str,
        fn: Callable[..., Any] | str,
        interval_seconds: float | None = None,
        *,
        args: tuple[Any, ...] | list[Any] = (),
        kwargs: dict[str, Any] | None = None,
        start_in: float | None = None,
        cron: str | None = None,
        timezone: str = "UTC",
        recurrence: Recurrence = "fixed_rate",
        misfire: Misfire = "coalesce",
        max_catch_up: int | None = None,
        grace_seconds: float = 1.0,
        overlap: Overlap = "forbid",
        jitter_seconds: float = 0.0,
        start_at: datetime | None = None,
        end_at: datetime | None = None,
        max_runtime_seconds: float | None = None,
        on_overrun: OnOverrun = "warn",
        executor: Executor = "thread",
        stop_grace_seconds: float = 5.0,
        exclude: Collection[str | date] | None = None,
        pause_after_failures: int | None = None,
        retries: int = 0,
        retry_delay_seconds: float = 10.0,
        retry_backoff: float = 2.0,
        retry_max_delay_seconds: float | None = None,
        retry_lost: bool = False,
        run_at: datetime | None = None,
    ) -> Job:
        """Schedule `fn` durably; see `JobScheduler.schedule` for every argument.

        Returns:
            The job as stored.

        Raises:
            InvalidJobError: An argument is not acceptable (nothing written).
            SchedulerStateError: The scheduler was shut down.
            StoreError: The database cannot be written.
        """
        schedule = functools.partial(
            self._sched.schedule,
            job_id,
            fn,
            interval_seconds,
            args=args,
            kwargs=kwargs,
            start_in=start_in,
            **given_options(locals()),  # every keyword option of persched._model.models.OPTIONS
        )
        return await asyncio.to_thread(schedule)

    async def declare(
        self, specs: Iterable[JobSpec], *, prune: bool = False, allow_empty: bool = False
    ) -> DeclareResult:
        """Reconcile this namespace's declared jobs with `specs`; return what it did (see `JobScheduler.declare`)."""
        specs = list(specs)  # a generator is read here, on the loop, not on a thread
        return await asyncio.to_thread(self._sched.declare, specs, prune=prune, allow_empty=allow_empty)

    async def deschedule(self, job_id: str, wait: bool = False, timeout: float | None = None) -> bool:
        """Remove a job (see `JobScheduler.deschedule`); `wait` awaits its in-flight run without blocking the loop."""
        return await asyncio.to_thread(self._sched.deschedule, job_id, wait, timeout)

    async def pause(self, job_id: str, *, until: datetime | None = None, note: str | None = None) -> bool:
        """Pause a job (see `JobScheduler.pause`; an unknown id raises `JobNotFoundError`)."""
        return await asyncio.to_thread(functools.partial(self._sched.pause, job_id, until=until, note=note))

    async def pause_all(self, *, until: datetime | None = None, note: str | None = None) -> int:
        """Pause every job of the namespace that is not paused (see `JobScheduler.pause_all`)."""
        return await asyncio.to_thread(functools.partial(self._sched.pause_all, until=until, note=note))

    async def resume(self, job_id: str) -> bool:
        """Resume a paused job from now (see `JobScheduler.resume`; an unknown id raises `JobNotFoundError`)."""
        return await asyncio.to_thread(self._sched.resume, job_id)

    async def resume_all(self) -> int:
        """Resume every paused job of the namespace (see `JobScheduler.resume_all`)."""
        return await asyncio.to_thread(self._sched.resume_all)

    async def run_now(self, job_id: str) -> bool:
        """Ask for one extra run soon (see `JobScheduler.run_now`; an unknown id raises `JobNotFoundError`)."""
        return await asyncio.to_thread(self._sched.run_now, job_id)

    async def cancel(self, job_id: str) -> bool:
        """Ask the job's run in flight to stop (see `JobScheduler.cancel`; an unknown id raises `JobNotFoundError`)."""
        return await asyncio.to_thread(self._sched.cancel, job_id)

    async def get_job(self, job_id: str) -> Job | None:
        """Return the job `job_id`, or None (see `JobScheduler.get_job`)."""
        return await asyncio.to_thread(self._sched.get_job, job_id)

    async def next_runs(self, job_id: str, count: int = 10) -> list[datetime]:
        """The coming slots of a job (see `JobScheduler.next_runs`)."""
        return await asyncio.to_thread(self._sched.next_runs, job_id, count)

    async def jobs(self) -> list[Job]:
        """Return every job not descheduled, soonest first."""
        return await asyncio.to_thread(self._sched.jobs)

    async def runs(self, job_id: str | None = None, limit: int = 100) -> list[Run]:
        """Return the latest runs of `job_id` (or of all jobs), newest first."""
        return await asyncio.to_thread(self._sched.runs, job_id, limit)

    async def wait_idle(self, timeout: float | None = 10.0) -> bool:
        """Wait until every due run has run and been recorded (see `JobScheduler.wait_idle`); the loop runs on."""
        return await asyncio.to_thread(self._sched.wait_idle, timeout)

    def add_listener(self, callback: Listener, kinds: Iterable[EventKind] | None = None) -> None:
        """Call `callback(event)` for each event (on persched's event thread; see `JobScheduler.add_listener`)."""
        self._sched.add_listener(callback, kinds)

    def remove_listener(self, callback: Listener) -> bool:
        """Stop calling `callback`; True if it was registered."""
        return self._sched.remove_listener(callback)

    def set_observer(self, observer: Observer | None) -> None:
        """Count what the events do not carry (see `JobScheduler.set_observer`; `persched.metrics`)."""
        self._sched.set_observer(observer)

    def runs_in_flight(self) -> int:
        """How many runs this scheduler has claimed and not yet recorded (for a gauge)."""
        return self._sched.runs_in_flight()
