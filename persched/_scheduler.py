"""`JobScheduler`: the public facade that wires store, dispatcher, workers and heartbeat.

Threads and locks
-----------------
Public methods run on the caller's thread and go straight to the store; a
schedule() that changed the job pushes a heap entry afterwards. Three locks,
never nested except as noted:

- ``_state_lock`` guards the lifecycle state ("new", "running", "stopped").
- ``_claim_gate`` is held by the dispatcher around each claim transaction and
  the hand-over to a worker, and by shutdown() while it sets ``_stopping``.
  That makes shutdown's linearization point exact: a claim either committed
  (and its run was queued) before ``_stopping`` was set, or it never commits
  (SPEC §2 "no claim commits after shutdown() begins").
- ``_inflight_cond`` guards the count of runs in flight per job (for
  deschedule(wait=True)) and the set of run ids in flight (for the
  heartbeat). A claim registers its job *before* its transaction, so a
  deschedule(wait=True) racing the claim waits for it either way.

No user code runs under any of them; user code runs only in `_workers`.
"""

from __future__ import annotations

import atexit
import itertools
import logging
import os
import threading
import time
import weakref
from collections import Counter
from typing import TYPE_CHECKING, Any, Final

from . import _db, _migrate
from ._declare import JobSpec, check_specs
from ._dispatcher import Dispatcher
from ._events import Event, EventBus
from ._heartbeat import Heartbeat
from ._horizon import DEFAULT_HORIZON_SECONDS, MIN_HORIZON_SECONDS, Horizon
from ._instant import Instant, Micros, micros, seconds, to_datetime
from ._liveness import default_instance_id
from ._models import (
    DEFAULT_MAX_ARGS_BYTES,
    DEFAULT_NAMESPACE,
    MAX_INTERVAL_SECONDS,
    MAX_STORED_INT,
    Job,
    JobState,
    Run,
    check_encodable,
    shown,
    validate_definition,
    validate_job_id,
    validate_namespace,
    validate_policies,
)
from ._observe import Observer, notify
from ._overrun import OverrunWatch
from ._store import Claim, ClaimMiss, Completion, RunNowVerdict, Store, bound_error_text
from ._targets import normalize_allowed, reference_of
from ._timebase import Timebase
from ._tracebacks import describe
from ._workers import WorkerPool, current_run_claim
from .clock import Clock, SecondsClock, SystemClock, exact_clock
from .errors import InvalidJobError, SchedulerStateError, StoreError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence
    from datetime import datetime
    from types import TracebackType

    from ._events import EventKind, Listener
    from ._models import JobDefinition, Misfire, Overlap, Recurrence
    from ._store import ClaimEntry, OpenRun

__all__ = ["JobScheduler", "current_run"]

logger = logging.getLogger("persched")

DEFAULT_URL: Final = "sqlite:///persched.db"
_SCHEDULED: Final = JobState.SCHEDULED.value
_RUNNING: Final = JobState.RUNNING.value
MAX_WORKERS: Final = 4096  # threads are made up front; beyond this, a typo would exhaust memory
CLAIM_RETRY: Final = Micros(1_000_000)  # back-off before a claim that hit a store error is tried again
ATEXIT_TIMEOUT_SECONDS: Final = 10.0  # how long interpreter exit waits for in-flight runs
# Upper bounds of the options (README, "Input limits"): beyond them a value is a
# typo, and it would overflow a datetime, a SQL integer or a C timeout later.
MAX_DURATION_SECONDS: Final = MAX_INTERVAL_SECONDS  # lease, heartbeat, pickup, retention: 10 years
MAX_BUSY_TIMEOUT_SECONDS: Final = 86_400.0  # SQLite takes milliseconds as a C int: one day is plenty
MAX_TIMEOUT_SECONDS: Final = float(threading.TIMEOUT_MAX)  # shutdown / deschedule waits
MAX_COUNT: Final = MAX_STORED_INT  # keep_runs, runs(limit): SQL LIMIT / OFFSET values
MAX_ARGS_BYTES_LIMIT: Final = 64 * 1024 * 1024  # max_args_bytes itself: the store is not a blob store
MAX_INSTANCE_ID_LENGTH: Final = 255  # characters: owner and instance_id are String(255)

_live: weakref.WeakSet[JobScheduler] = weakref.WeakSet()
_made: weakref.WeakSet[JobScheduler] = weakref.WeakSet()  # every scheduler of this process, for the fork hook
_inherited_pools: list[object] = []  # a forked child's copies of its parent's pools: kept, never closed


@atexit.register
def _shutdown_live_schedulers() -> None:
    # Daemon threads still run during atexit (bpo-39812), so in-flight runs
    # can finish and record their outcome.
    for scheduler in list(_live):
        if scheduler._owned():  # a forked child leaves its parent's schedulers alone
            scheduler.shutdown(wait=True, timeout=ATEXIT_TIMEOUT_SECONDS)


def _after_fork_in_child() -> None:
    """SPEC §2 "Forks": the parent's schedulers are not this process's to run or shut down.

    Their pooled connections are the parent's: a child must neither use nor
    close them (SQLite's "do not carry a connection across fork()"; a
    PostgreSQL connection closed here ends the parent's session). So each
    engine gets a fresh, empty pool and the old one is kept, untouched
    (SQLAlchemy's pooling docs: ``engine.dispose(close=False)`` in the child).
    """
    _live.clear()
    running: list[str] = []
    for scheduler in list(_made):
        engine = scheduler._store.engine
        _inherited_pools.append(engine.pool)
        engine.dispose(close=False)
        if scheduler._state == "running":
            running.append(scheduler.instance_id)
    if running and current_run_claim() is None:  # a job's own fork is no surprise: no warning there
        # A pre-fork server (gunicorn --preload) would otherwise run every job in its master, silently.
        logger.warning(
            "process %d was forked from process %d, whose scheduler %s keeps running there, not here: "
            "create the scheduler after the fork (e.g. in gunicorn's post_fork hook, or without --preload)",
            os.getpid(),
            os.getppid(),
            ", ".join(running),
        )


os.register_at_fork(after_in_child=_after_fork_in_child)


def current_run() -> Run | None:
    """Return the `Run` executing on this thread, or None outside a run.

    A callable can key its own side effects on ``(job_id, scheduled_for)``.
    """
    claim = current_run_claim()
    return None if claim is None else claim.run()


def _positive(argument: str, value: object, *, integer: bool = False, maximum: float) -> float:
    """Check a number > 0 and at most `maximum` (also ints beyond any float: no OverflowError)."""
    kinds: tuple[type, ...] = (int,) if integer else (int, float)
    kind = "a whole number" if integer else "a finite number of seconds"
    if isinstance(value, bool) or not isinstance(value, kinds):
        raise InvalidJobError(argument, f"must be {kind} > 0, got {shown(value)}")
    number: int | float = value  # type: ignore[assignment]  # checked int or float above
    # Compared before float(): an int and a float compare exactly, at any size.
    if not number > 0:
        raise InvalidJobError(argument, f"must be {kind} > 0, got {shown(value)}")
    if not number <= maximum:
        if not number < float("inf"):
            raise InvalidJobError(argument, f"must be finite, got {shown(value)}")
        raise InvalidJobError(argument, f"must be at most {maximum:g}, got {shown(value)}")
    return float(number)


def _wait_arguments(wait: object, timeout: object) -> float | None:
    """Check the `wait` / `timeout` pair of deschedule() and shutdown()."""
    if not isinstance(wait, bool):
        raise InvalidJobError("wait", f"must be True or False, got {wait!r}")
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 <= timeout <= MAX_TIMEOUT_SECONDS:
        raise InvalidJobError(
            "timeout", f"must be None or a number of seconds from 0 to {MAX_TIMEOUT_SECONDS:g}, got {shown(timeout)}"
        )
    return float(timeout)


def _validate_instance_id(instance_id: object) -> str:
    """Check a given `instance_id`: what the owner / instance_id columns can store (String(255))."""
    if not isinstance(instance_id, str) or not instance_id.strip():
        raise InvalidJobError("instance_id", f"must be a non-empty str, got {shown(instance_id)}")
    if len(instance_id) > MAX_INSTANCE_ID_LENGTH:
        raise InvalidJobError(
            "instance_id", f"must be at most {MAX_INSTANCE_ID_LENGTH} characters, got {len(instance_id)}"
        )
    check_encodable("instance_id", instance_id)
    if any(ord(c) < 32 or 127 <= ord(c) < 160 for c in instance_id):
        raise InvalidJobError("instance_id", f"must not contain control characters: {shown(instance_id)}")
    return instance_id


class JobScheduler:
    """Runs callables at fixed intervals; every schedule lives in SQL.

    Args:
        url: A SQLAlchemy URL or a plain SQLite file path (a `str` or a `pathlib.Path`).
        workers: How many runs may execute at once (worker threads), at most 4096.
        clock: Where time comes from; `persched.testing.FakeClock` in tests.
        instance_id: Names this scheduler on the runs it claims; default
            ``host:pid:random~proof``, where the proof (Linux: boot id, pid
            namespace, uid, process start time) lets a later process on the
            same host recover this one's runs at once when it is gone.
        lease_seconds: How long a claimed run stays owned without a heartbeat;
            after that any instance records it as lost.
        heartbeat_seconds: How often leases are renewed and expired ones
            looked for; default a third of `lease_seconds`.
        busy_timeout_seconds: How long SQLite waits for a lock before a write
            is retried (and finally fails with `StoreError`).
        synchronous: SQLite's ``synchronous`` setting; "FULL" makes a
            committed claim survive power loss, "NORMAL" is faster and may lose
            the last commits on power loss (never corrupts).
        keep_runs: Run history kept per job: the newest this many runs
            (None: no limit by count). A job's history is pruned once it
            recorded a tenth of this more, so it may briefly hold up to 10%
            more.
        keep_runs_for_seconds: Delete runs that finished longer ago than
            this (None: no limit by age). Pruning runs on the heartbeat
            thread in short transactions, never on the dispatch path.
        allowed_modules: If given, module names (or package prefixes) whose
            callables may be scheduled and run; a stored target outside them
            is never imported: its runs are refused and recorded as errors.
            Whoever can write the database can change a row's target, so set
            this wherever the database is shared with less trusted writers.
        pickup_seconds: How often to look for jobs scheduled, replaced or
            descheduled by other instances or the CLI (one cheap read).
        horizon_seconds: How far ahead the dispatcher keeps jobs in memory
            (at least 2 s): it loads the jobs due within this time, and loads
            more as time moves on, so memory and start-up do not grow with the
            number of jobs (docs/design.md "The bounded heap").
        max_args_bytes: The largest `args`, and the largest `kwargs`, that
            schedule() accepts, in bytes of their stored JSON (default
            64 KiB): every claim reads them, so large ones slow every job.
        namespace: The application this scheduler belongs to: it sees, runs
            and changes only the jobs of its namespace, so several
            applications can share one database. Default "default" (every
            job made before namespaces existed is there).

    Raises:
        InvalidJobError: An argument is out of range.
        StoreError: The database cannot be opened.
    """

    def __init__(
        self,
        url: str | os.PathLike[str] = DEFAULT_URL,
        workers: int = 8,
        clock: Clock | SecondsClock | None = None,
        *,
        instance_id: str | None = None,
        lease_seconds: float = 30.0,
        heartbeat_seconds: float | None = None,
        busy_timeout_seconds: float = 5.0,
        synchronous: str = "FULL",
        keep_runs: int | None = 1000,
        keep_runs_for_seconds: float | None = None,
        allowed_modules: Iterable[str] | None = None,
        pickup_seconds: float = 1.0,
        horizon_seconds: float = DEFAULT_HORIZON_SECONDS,
        max_args_bytes: int = DEFAULT_MAX_ARGS_BYTES,
        namespace: str = DEFAULT_NAMESPACE,
    ) -> None:
        self.namespace: Final = validate_namespace(namespace)
        # One thread each, made up front.
        self._workers = int(_positive("workers", workers, integer=True, maximum=MAX_WORKERS))
        self._allowed_modules = normalize_allowed(allowed_modules)
        self._max_args_bytes = int(
            _positive("max_args_bytes", max_args_bytes, integer=True, maximum=MAX_ARGS_BYTES_LIMIT)
        )
        self._keep_runs = (
            None if keep_runs is None else int(_positive("keep_runs", keep_runs, integer=True, maximum=MAX_COUNT))
        )
        self._keep_for = (
            None
            if keep_runs_for_seconds is None
            else Micros(micros(_positive("keep_runs_for_seconds", keep_runs_for_seconds, maximum=MAX_DURATION_SECONDS)))
        )
        # Runs recorded per job since its history was last pruned; None: a full pass first.
        self._prune_lock = threading.Lock()
        self._runs_since_prune: Counter[str] | None = None
        self._events = EventBus()
        lease = _positive("lease_seconds", lease_seconds, maximum=MAX_DURATION_SECONDS)
        self._lease = Micros(micros(lease))
        heartbeat = lease / 3 if heartbeat_seconds is None else heartbeat_seconds
        if _positive("heartbeat_seconds", heartbeat, maximum=MAX_DURATION_SECONDS) >= lease:
            raise InvalidJobError(
                "heartbeat_seconds",
                f"must be shorter than lease_seconds ({lease_seconds})",
            )
        _positive("busy_timeout_seconds", busy_timeout_seconds, maximum=MAX_BUSY_TIMEOUT_SECONDS)
        _positive("pickup_seconds", pickup_seconds, maximum=MAX_DURATION_SECONDS)
        if _positive("horizon_seconds", horizon_seconds, maximum=MAX_DURATION_SECONDS) < MIN_HORIZON_SECONDS:
            raise InvalidJobError("horizon_seconds", f"must be at least {MIN_HORIZON_SECONDS:g} s")
        self._horizon_length = Micros(micros(horizon_seconds))
        self._pid = os.getpid()  # SPEC §2 "Forks": the process this scheduler belongs to
        # host:pid:random~proof: a restart on this host can tell that it is gone (see _liveness).
        self.instance_id: Final = default_instance_id() if instance_id is None else _validate_instance_id(instance_id)
        try:  # callers may pass anything: refuse it cleanly
            self._timebase = Timebase(exact_clock(clock if clock is not None else SystemClock()))
        except TypeError as exc:
            raise InvalidJobError("clock", str(exc).removeprefix("clock: ")) from None
        if isinstance(url, os.PathLike):
            url = os.fspath(url)  # a plain file path, as a pathlib.Path
        engine = _db.make_engine(url, busy_timeout_seconds=busy_timeout_seconds, synchronous=synchronous)
        self._store = Store(engine, _db.mask(engine.url), namespace=self.namespace)
        self._schema_lock = threading.Lock()
        self._schema_ready = False
        self._state_lock = threading.Lock()
        self._state = "new"
        self._claim_gate = threading.Lock()
        self._stopping = False
        self._inflight_cond = threading.Condition()
        self._inflight_jobs: Counter[str] = Counter()
        self._inflight_runs: set[int] = set()
        self._dispatcher = Dispatcher(self._timebase, self._workers, self._cycle)
        self._unwritten: list[Completion] = []  # completions a failed write left behind
        self._pool = WorkerPool(self._workers, self._complete, self._allowed_modules)
        self._overrun = OverrunWatch(self._timebase, self._on_overrun)
        self._overran_runs: dict[int, bool] = {}  # run_id -> True once it overran (dict ops are atomic)
        self._heartbeat = Heartbeat(
            self._store,
            self._timebase,
            self.instance_id,
            self._lease,
            Micros(micros(heartbeat)),
            self._runs_in_flight,
            self._dispatcher.push,
            pickup=Micros(micros(pickup_seconds)),
            lost=self._on_lost,
            maintenance=self._maintenance,
        )
        _made.add(self)

    # -- lifecycle ------------------------------------------------------------

    def start(self) -> None:
        """Migrate the schema to head, load the jobs and start dispatching.

        Raises:
            SchedulerStateError: Already started, or shut down.
            SchemaVersionError: The database's schema is newer than this code.
            StoreError: The database cannot be used.
        """
        self._check_process()
        with self._state_lock:
            if self._state != "new":
                raise SchedulerStateError(f"start() on a scheduler that is {self._state}; make a new JobScheduler")
            self._ensure_schema()
            # "running" before loading: a schedule() committed after the load
            # sees it and pushes its own entry.
            self._state = "running"
        horizon = Horizon(self._store, self._timebase)
        swept: list[tuple[Instant, str, int]] = []
        try:
            # Read the change counter first: a change committed while loading
            # is then picked up again rather than missed.
            change_seq = self._store.change_seq()
            # The bounded heap (persched._horizon): the first sweep batch (rows ahead of the
            # clock, pending run-now requests), then the jobs due within the horizon.
            more = horizon.sweep(lambda *entry: swept.append(entry))
            entries, cursor = horizon.refill(None, Instant(self._timebase.now() + self._horizon_length))
        except BaseException:
            self.shutdown(wait=False)
            raise
        _live.add(self)
        self._pool.start()
        self._dispatcher.start(
            entries + swept,
            refill=horizon.refill,
            cursor=cursor,
            horizon=self._horizon_length,
            refill_rows=horizon.rows,
        )
        self._heartbeat.start(
            change_seq,
            bound=self._dispatcher.pickup_bound,
            sweep=(lambda: horizon.sweep(self._dispatcher.push)) if more else None,
        )
        logger.info(
            "scheduler %s started with %d job%s due within %g s on %s",
            self.instance_id,
            len(entries),
            "" if len(entries) == 1 else "s",
            seconds(self._horizon_length),
            self._store.url,
        )

    def shutdown(self, wait: bool = True, timeout: float | None = None) -> None:
        """Stop dispatching; let in-flight runs finish; release the database.

        No claim commits after this call begins. Idempotent, and callable from
        any thread, a running job included (then it does not wait for itself:
        the rest of the shutdown goes on in the background).

        Args:
            wait: Block until in-flight runs finished (up to `timeout`).
            timeout: Seconds to wait for in-flight runs; None waits for ever.
        """
        self._check_process()
        timeout = _wait_arguments(wait, timeout)
        with self._state_lock:
            previous, self._state = self._state, "stopped"
        if previous == "stopped":
            return
        with self._claim_gate:
            self._stopping = True
        if previous == "new":
            self._events.stop(timeout)
            self._store.engine.dispose()
            return
        self._dispatcher.stop_claiming()
        if wait and not self._pool.owns_current_thread():
            self._finish_shutdown(timeout)
        else:
            threading.Thread(
                target=self._finish_shutdown,
                args=(None,),
                name="persched-shutdown",
                daemon=True,
            ).start()

    def _finish_shutdown(self, timeout: float | None) -> None:
        # Real time: this waits for threads, not for schedule slots.
        deadline = None if timeout is None else time.monotonic() + timeout

        def left() -> float | None:
            return None if deadline is None else max(0.0, deadline - time.monotonic())

        with self._inflight_cond:
            busy = sorted(job_id for job_id, count in self._inflight_jobs.items() for _ in range(count))
        if busy:
            # Name what the operator is waiting for (issue 15).
            logger.info(
                "scheduler %s waits for %d run%s in flight to finish: %s%s",
                self.instance_id,
                len(busy),
                "" if len(busy) == 1 else "s",
                ", ".join(busy),
                "" if timeout is None else f" (at most {timeout:g} s)",
            )
        self._pool.stop()
        drained = self._pool.join(left)
        self._dispatcher.stop()  # after the workers: it writes their last completions
        self._dispatcher.join(left())
        self._retry_unwritten()
        self._heartbeat.stop()
        self._heartbeat.join(left())
        self._overrun.stop()
        self._events.stop(left())
        _live.discard(self)
        if drained:
            self._store.engine.dispose()
            logger.info("scheduler %s shut down", self.instance_id)
        else:
            logger.warning(
                "scheduler %s shut down with runs still in flight after %s s; their leases will lapse "
                "and they will be recorded as lost",
                self.instance_id,
                timeout,
            )

    def __enter__(self) -> JobScheduler:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.shutdown(wait=True)

    # -- public operations --------------------------------------------------------

    def schedule(
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
        run_at: datetime | None = None,
    ) -> Job:
        """Run `fn` every `interval_seconds` (or on a `cron` expression, or once at `run_at`) under `job_id`, durably.

        Scheduling an existing id with an identical definition changes
        nothing (same generation, same next run); with a different one it
        replaces the job atomically (new generation, fresh grid from now).
        Every argument but `start_in` is part of the definition.

        Args:
            job_id: Up to 200 characters, no control characters.
            fn: A module-level function (or static/class method), a
                coroutine function, or ``"package.module:function"``.
            interval_seconds: Seconds between slots; > 0, at most 10 years.
            args: JSON-serialisable positional arguments.
            kwargs: JSON-serialisable keyword arguments.
            start_in: Seconds until the first run; default one interval.
            cron: A 5-field cron expression (or 6 with seconds), instead of
                `interval_seconds`.
            timezone: The IANA zone `cron` is read in; default UTC.
            recurrence: "fixed_rate" (a grid) or "fixed_delay" (one interval
                after the previous run ended).
            misfire: What late slots become: "coalesce" (one run stands for
                them), "skip" (dropped, recorded as missed) or "catch_up"
                (the `max_catch_up` most recent run, oldest first).
            max_catch_up: How many missed slots "catch_up" runs.
            grace_seconds: How late a run may start and still be on time.
            overlap: Slots passing during a run: "forbid" (they wait for it
                and follow `misfire`) or "skip" (dropped, recorded as missed).
            jitter_seconds: Each run starts up to this much after its slot.
            start_at: No slot before this (aware datetime); an interval
                grid is anchored here.
            end_at: No slot after this; then the job is finished.
            max_runtime_seconds: Report a run still going after this long.
            run_at: Run once at this instant (aware datetime), instead of
                `interval_seconds` or `cron`; the job is finished after it.
                An instant that passed runs at once (misfire "coalesce").

        Returns:
            The job as stored.

        Raises:
            InvalidJobError: An argument is not acceptable (nothing written).
            SchedulerStateError: The scheduler was shut down.
            StoreError: The database cannot be written.
        """
        self._check_open()
        definition = self._definition(
            job_id,
            fn,
            interval_seconds,
            args=args,
            kwargs=kwargs,
            start_in=start_in,
            cron=cron,
            timezone=timezone,
            recurrence=recurrence,
            misfire=misfire,
            max_catch_up=max_catch_up,
            grace_seconds=grace_seconds,
            overlap=overlap,
            jitter_seconds=jitter_seconds,
            start_at=start_at,
            end_at=end_at,
            max_runtime_seconds=max_runtime_seconds,
            run_at=run_at,
        )
        self._ensure_schema()
        return self._upserted(*self._store.upsert_job(definition, self._timebase.now()))

    def _definition(
        self,
        job_id: object,
        fn: Callable[..., Any] | str,
        interval_seconds: object,
        *,
        args: object = (),
        kwargs: object = None,
        start_in: object = None,
        cron: object = None,
        timezone: object = "UTC",
        recurrence: object = "fixed_rate",
        misfire: object = "coalesce",
        max_catch_up: object = None,
        grace_seconds: object = 1.0,
        overlap: object = "forbid",
        jitter_seconds: object = 0.0,
        start_at: object = None,
        end_at: object = None,
        max_runtime_seconds: object = None,
        run_at: object = None,
    ) -> JobDefinition:
        """Check schedule()'s arguments (raises InvalidJobError; writes nothing)."""
        validate_job_id(job_id)
        target = reference_of(fn, self._allowed_modules)
        policies = validate_policies(
            interval_seconds,
            cron=cron,
            timezone=timezone,
            recurrence=recurrence,
            misfire=misfire,
            max_catch_up=max_catch_up,
            grace_seconds=grace_seconds,
            overlap=overlap,
            jitter_seconds=jitter_seconds,
            start_at=start_at,
            end_at=end_at,
            max_runtime_seconds=max_runtime_seconds,
            run_at=run_at,
        )
        return validate_definition(
            job_id, target, policies, args, kwargs, start_in, max_args_bytes=self._max_args_bytes
        )

    def _upserted(self, job: Job, change: str, due: Instant | None) -> Job:
        """After an upsert: log, queue the job's next slot, emit the event."""
        if change != "unchanged":
            logger.info("job %s generation %d %s: %s %s", job.job_id, job.generation, change, job.target, job.schedule)
            if job.state == JobState.FINISHED:
                # Accepted (an application re-declaring a campaign that ended must still start),
                # but never silently: no slot of its window is left (README "Operator messages").
                logger.warning(
                    "job %s generation %d has no slot left in its window (end_at %s is past): it is finished "
                    "at once and never runs; give it a later end_at, or remove it",
                    job.job_id,
                    job.generation,
                    job.end_at.isoformat() if job.end_at is not None else "-",
                )
            if due is not None and self._state == "running":
                self._dispatcher.push(due, job.job_id, job.generation)
            kind: EventKind = "job_replaced" if change == "replaced" else "job_scheduled"
            self._emit(kind, job.job_id, job.generation, job=job)
        return job

    def declare(self, specs: Iterable[JobSpec], *, prune: bool = False) -> list[Job]:
        """Reconcile this namespace's declared jobs with `specs` (an application's whole set of jobs).

        Every spec is checked first: one bad spec raises and nothing is
        written. Then each job is scheduled as by `schedule()`: new ones are
        created, changed ones replaced, identical ones left untouched (same
        generation, same grid). With `prune`, jobs that an earlier
        ``declare()`` of this namespace wrote and that `specs` no longer
        names are descheduled; jobs made by ``schedule()`` and other
        namespaces' jobs are never touched.

        Args:
            specs: `JobSpec` values, one per job id.
            prune: Deschedule the declared jobs that `specs` leaves out.

        Returns:
            The declared jobs as stored, in the order of `specs`.

        Raises:
            InvalidJobError: A spec is not acceptable, or two name one job id (nothing written).
            SchedulerStateError: The scheduler was shut down.
            StoreError: The database cannot be written.
        """
        self._check_open()
        if not isinstance(prune, bool):
            raise InvalidJobError("prune", f"must be True or False, got {prune!r}")
        definitions = [self._spec_definition(spec) for spec in check_specs(specs)]
        self._ensure_schema()
        declared = [
            self._upserted(*self._store.upsert_job(definition, self._timebase.now(), declared=True))
            for definition in definitions
        ]
        if prune:
            for job_id, generation in self._store.prune_declared({d.job_id for d in definitions}, self._timebase.now()):
                logger.info("job %s generation %d descheduled: no longer declared", job_id, generation)
                self._emit("job_descheduled", job_id, generation)
        return declared

    def _spec_definition(self, spec: JobSpec) -> JobDefinition:
        try:
            return self._definition(spec.job_id, spec.fn, spec.interval_seconds, **spec.options)
        except InvalidJobError as exc:  # name the spec as well as its argument
            raise InvalidJobError(f"specs[{spec.job_id!r}].{exc.argument}", exc.reason) from None

    def deschedule(self, job_id: str, wait: bool = False, timeout: float | None = None) -> bool:
        """Remove a job: its current generation never starts again, in any process.

        A run that was claimed before may still finish. With `wait`, also
        block until this process's in-flight run of the job (if any) ended.

        Returns:
            True if an active job was removed.

        Raises:
            InvalidJobError: `job_id` is not a valid id.
            SchedulerStateError: The scheduler was shut down.
            StoreError: The database cannot be written.
        """
        self._check_open()
        validate_job_id(job_id)
        timeout = _wait_arguments(wait, timeout)
        self._ensure_schema()
        generation = self._store.deschedule_job(job_id, self._timebase.now())
        removed = generation is not None
        if generation is not None:
            logger.info("job %s generation %d descheduled", job_id, generation)
            self._emit("job_descheduled", job_id, generation)
        if wait:
            self._wait_idle(job_id, timeout)
        return removed

    def pause(self, job_id: str) -> bool:
        """Pause a job: it keeps its definition and history and starts no run until resumed.

        Linearized like deschedule(): once this returns, the paused
        generation starts no run, in any process (a run claimed before may
        finish). Paused jobs stay paused across restarts and replacements.

        Returns:
            True if the job was paused by this call (False: unknown,
            descheduled, finished, or paused already).
        """
        self._check_open()
        validate_job_id(job_id)
        self._ensure_schema()
        generation = self._store.pause_job(job_id, self._timebase.now())
        if generation is not None:
            logger.info("job %s generation %d paused", job_id, generation)
            self._emit("job_paused", job_id, generation)
        return generation is not None

    def resume(self, job_id: str) -> bool:
        """Resume a paused job on its grid from now: slots that passed while it was paused do not run.

        Returns:
            True if the job was paused and is resumed now.
        """
        self._check_open()
        validate_job_id(job_id)
        self._ensure_schema()
        resumed = self._store.resume_job(job_id, self._timebase.now())
        if resumed is None:
            return False
        generation, due = resumed
        logger.info("job %s generation %d resumed", job_id, generation)
        if due is not None and self._state == "running":
            self._dispatcher.push(due, job_id, generation)
        self._emit("job_resumed", job_id, generation)
        return True

    def run_now(self, job_id: str) -> bool:
        """Ask for one extra run of the job as soon as a worker is free, without moving its grid.

        The run obeys the job's overlap rule: while a run is in flight it
        waits for it ("forbid"), or is dropped ("skip"). Asking again before
        the extra run started adds nothing.

        Returns:
            True if an extra run is pending; False if the job is unknown or
            descheduled, or the request was dropped by overlap "skip".

        Raises:
            SchedulerStateError: The job is paused or finished.
        """
        self._check_open()
        validate_job_id(job_id)
        self._ensure_schema()
        now = self._timebase.now()
        verdict, generation = self._store.request_run_now(job_id, now)
        if verdict in (RunNowVerdict.PAUSED, RunNowVerdict.FINISHED):
            raise SchedulerStateError(f"run_now({job_id!r}): the job is {verdict.value}; resume or schedule it first")
        if verdict is RunNowVerdict.REQUESTED:
            assert generation is not None
            logger.info("job %s generation %d: run now requested", job_id, generation)
            if self._state == "running":
                self._dispatcher.push(now, job_id, generation)  # a run in flight: its completion queues it too
        return verdict.will_run

    def get_job(self, job_id: str) -> Job | None:
        """Return the job `job_id` (scheduled, running, paused or finished), or None (also once descheduled)."""
        self._check_open()
        validate_job_id(job_id)
        self._ensure_schema()
        return self._store.get_job(job_id)

    def jobs(self) -> list[Job]:
        """Return every job not descheduled (scheduled, running, paused, finished), soonest first."""
        self._check_open()
        self._ensure_schema()
        return self._store.list_jobs()

    def runs(self, job_id: str | None = None, limit: int = 100) -> list[Run]:
        """Return the latest runs of `job_id` (or of all jobs), newest first."""
        self._check_open()
        if job_id is not None:
            validate_job_id(job_id)
        limit = int(_positive("limit", limit, integer=True, maximum=MAX_COUNT))
        self._ensure_schema()
        return self._store.list_runs(job_id, limit)

    def wait_idle(self, timeout: float | None = 10.0) -> bool:
        """Block until every run that is due has started, finished and been recorded, and its events delivered.

        The testing kit for schedules on a `persched.testing.FakeClock`: after
        ``clock.advance(seconds)``, ``wait_idle()`` returns once the runs that
        became due have run, so a test needs no sleep and no polling loop. On
        the real clock it returns at the first moment nothing is due or running.
        A claim that met a store error is tried again a second later: on a
        FakeClock, advance the clock to let it run.

        Args:
            timeout: Real seconds to wait at most; None waits for ever.

        Returns:
            True when idle; False if `timeout` passed first.
        """
        self._check_process()
        timeout = _wait_arguments(True, timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._dispatcher.wait_idle(timeout):
            return False
        return self._events.wait_delivered(None if deadline is None else max(0.0, deadline - time.monotonic()))

    # -- internals ------------------------------------------------------------------

    def _owned(self) -> bool:
        return os.getpid() == self._pid

    def _check_process(self) -> None:
        if not self._owned():
            raise SchedulerStateError(
                f"this JobScheduler belongs to process {self._pid}, and this is a forked child "
                f"(process {os.getpid()}): a scheduler cannot be used or shut down after fork(). "
                "Create the scheduler after the fork, in the process that uses it: for example in "
                "gunicorn's post_fork hook, or run gunicorn without --preload"
            )

    def _check_open(self) -> None:
        self._check_process()
        if self._state == "stopped":
            raise SchedulerStateError("the scheduler was shut down; make a new JobScheduler")

    def _ensure_schema(self) -> None:
        with self._schema_lock:
            if not self._schema_ready:
                _migrate.upgrade(self._store.engine)
                self._schema_ready = True

    def _wait_idle(self, job_id: str, timeout: float | None) -> None:
        own = current_run_claim()
        allowed = 1 if own is not None and own.job_id == job_id else 0  # never wait for ourselves
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._inflight_cond:
            while self._inflight_jobs[job_id] > allowed:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return
                self._inflight_cond.wait(left)

    def _runs_in_flight(self) -> set[int]:
        with self._inflight_cond:
            return set(self._inflight_runs)

    def _cycle(self, completions: list[Completion], due: list[ClaimEntry]) -> int:
        """Dispatcher callback: write finished runs and claim due entries; return how many were handed over."""
        if due:
            return self._claim_due(due, completions)
        self._write_completions(completions)
        return 0

    def _claim_due(self, due: list[ClaimEntry], completions: Sequence[Completion] = ()) -> int:
        """Write `completions` and claim `due` in one transaction; hand each won run to a reserved worker."""
        with self._inflight_cond:
            for job_id, _, _, _ in due:
                self._inflight_jobs[job_id] += 1  # before the claim: see _wait_idle
        results: list[Claim | ClaimMiss] = []
        next_due: list[Instant | None] | None = None
        with self._claim_gate:
            try:
                if self._stopping:  # no claim commits after shutdown() began
                    next_due = self._store.finish_runs(completions, self.instance_id)
                else:
                    next_due, results = self._store.dispatch(
                        completions,
                        due,
                        self._timebase.now,  # read under the write lock
                        self.instance_id,
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
                    self._dispatcher.push(retry_at, job_id, generation)
            for result in results:
                if isinstance(result, Claim):
                    with self._inflight_cond:
                        self._inflight_runs.add(result.run_id)
                    if result.max_runtime is not None:
                        self._overrun.watch(result)
                    self._pool.submit(result)  # under the gate: see the module docstring
        if next_due is not None:
            self._completions_written(completions, next_due)
        else:
            self._keep_unwritten(completions)
        handed_over = 0
        for (job_id, generation, _, _), result in itertools.zip_longest(due, results):
            if isinstance(result, Claim):
                handed_over += 1
                self._emit("run_started", job_id, generation, run=result.run())
            else:
                if result is not None:
                    self._requeue_missed(job_id, generation, result)
                self._job_done(job_id, None)
        return handed_over

    def _requeue_missed(self, job_id: str, generation: int, miss: ClaimMiss) -> None:
        """A lost claim: queue the job again where the store says it stands (see _dispatcher)."""
        if miss.generation != generation or miss.due_at is None:
            return  # descheduled, replaced, paused or finished: the entry was stale
        if miss.state == _RUNNING and miss.owner == self.instance_id:
            return  # our own run: its completion queues the next slot
        observer = self._store.observer
        notify(lambda: observer.claim_conflict(job_id), "claim conflict")
        self._dispatcher.push(miss.due_at, job_id, generation)
        logger.debug("claim of %s generation %d lost (state %s)", job_id, generation, miss.state)

    def _complete(self, claim: Claim, outcome: str, error: str | None) -> None:
        """Worker callback: hand the outcome to the dispatcher, which writes it with the next cycle."""
        if claim.max_runtime is not None:
            self._overrun.done(claim.run_id)
        if error is not None:
            error = bound_error_text(error)  # keep the last line: the exception's type and message
        completion = Completion(claim, outcome, error, self._timebase.now())
        if not self._dispatcher.complete(completion):
            self._write_completions([completion])  # the dispatcher is gone (shutdown timed out)

    def _write_completions(self, completions: Sequence[Completion]) -> None:
        """Record outcomes in one transaction; queue each job's next slot."""
        if not completions:
            return
        try:
            due = self._store.finish_runs(completions, self.instance_id)
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
                self._dispatcher.push(due_at, claim.job_id, claim.generation)
            with self._prune_lock:
                if self._runs_since_prune is not None:
                    self._runs_since_prune[claim.job_id] += 1
            run = claim.run().model_copy(
                update={
                    "finished_at": to_datetime(completion.finished_at),
                    "outcome": completion.outcome,
                    "error": completion.error,
                    "instance_id": self.instance_id,
                    "overran": self._overran_runs.pop(claim.run_id, False),
                }
            )
            kind: EventKind = "run_finished" if completion.outcome == "ok" else "run_failed"
            self._emit(kind, claim.job_id, claim.generation, run=run)
            self._job_done(claim.job_id, claim.run_id)

    def _maintenance(self) -> None:
        """Heartbeat callback: retry unwritten completions, then prune run history."""
        self._retry_unwritten()
        self._prune_runs()

    def _retry_unwritten(self) -> None:
        """Heartbeat callback (and last step of shutdown): write completions a failed write left behind."""
        with self._inflight_cond:
            unwritten, self._unwritten = self._unwritten, []
        if unwritten:
            self._write_completions(unwritten)

    def _job_done(self, job_id: str, run_id: int | None) -> None:
        with self._inflight_cond:
            self._inflight_jobs[job_id] -= 1
            if self._inflight_jobs[job_id] <= 0:
                del self._inflight_jobs[job_id]
            if run_id is not None:
                self._inflight_runs.discard(run_id)
            self._inflight_cond.notify_all()

    # -- events and run-history retention (issue 3) ---------------------------------

    def add_listener(self, callback: Listener, kinds: Iterable[EventKind] | None = None) -> None:
        """Call `callback(event)` for each event of `kinds` (default: every kind).

        Kinds: ``job_scheduled``, ``job_replaced``, ``job_descheduled``,
        ``run_started``, ``run_finished`` (outcome "ok"), ``run_failed``
        (outcome "error"), ``run_lost``. Listeners are called in order on one
        daemon thread, ``persched-events``, never on the dispatcher or a
        worker: a listener that raises is logged and ignored, one that blocks
        delays only the listeners and events behind it. Undelivered events
        beyond 10,000 are dropped with a WARNING. Runs of other instances
        sharing the database produce no events here, except ``run_lost``
        when this instance's heartbeat recovers them.

        Args:
            callback: Takes one `persched._events.Event`.
            kinds: The event kinds wanted.

        Raises:
            InvalidJobError: `callback` is not callable or a kind is unknown.
            SchedulerStateError: Called in a forked child of the scheduler's process.
        """
        self._check_process()
        self._events.add(callback, kinds)

    def remove_listener(self, callback: Listener) -> bool:
        """Stop calling `callback`; True if it was registered."""
        self._check_process()
        return self._events.remove(callback)

    def set_observer(self, observer: Observer | None) -> None:
        """Count what the events do not carry (claim conflicts, store retries and errors, missed slots).

        `persched.metrics.SchedulerMetrics` sets one; None restores the default,
        which does nothing. Its methods are called on persched's threads and
        must be quick; one that raises is logged and ignored.
        """
        self._store.observer = Observer() if observer is None else observer

    def runs_in_flight(self) -> int:
        """How many runs this scheduler has claimed and not yet recorded (for a gauge)."""
        with self._inflight_cond:
            return len(self._inflight_runs)

    @property
    def events_dropped(self) -> int:
        """How many events were dropped because listeners did not keep up (see `add_listener`)."""
        return self._events.dropped

    def _emit(
        self, kind: EventKind, job_id: str, generation: int, *, job: Job | None = None, run: Run | None = None
    ) -> None:
        self._events.emit(Event(kind, job_id, generation, to_datetime(self._timebase.now()), job=job, run=run))

    def _on_lost(self, lost: OpenRun) -> None:
        """Heartbeat callback: a run was recorded as lost."""
        if self._events.wants("run_lost"):
            run = self._store.get_run(lost.run_id)
            self._emit("run_lost", lost.job_id, lost.generation, run=run)

    def _on_overrun(self, claim: Claim) -> None:
        """Overrun-watch callback: a run is still going after its job's max_runtime_seconds."""
        self._overran_runs[claim.run_id] = True  # before the record: see _completions_written
        if not self._store.mark_overran(claim.run_id):
            self._overran_runs.pop(claim.run_id, None)  # it finished in the meantime: no overrun
            return
        logger.warning(
            "job %s generation %d: the run for %s is still going after %s s (max_runtime_seconds); "
            "it cannot be stopped and goes on",
            claim.job_id,
            claim.generation,
            to_datetime(claim.scheduled_for).isoformat(),
            seconds(claim.max_runtime or 0),
        )
        run = claim.run().model_copy(update={"overran": True, "instance_id": self.instance_id})
        self._emit("run_overran", claim.job_id, claim.generation, run=run)

    def _prune_runs(self) -> None:
        """Heartbeat callback: delete run history beyond the retention."""
        if self._keep_runs is None and self._keep_for is None:
            return
        # A job is pruned by count once it recorded a tenth of keep_runs more
        # runs: one DELETE per job per many runs, not per heartbeat.
        due = max(1, (self._keep_runs or 0) // 10)
        with self._prune_lock:
            if self._runs_since_prune is None:
                self._runs_since_prune, dirty = Counter(), None
            else:
                dirty = {job_id for job_id, n in self._runs_since_prune.items() if n >= due}
                for job_id in dirty:
                    del self._runs_since_prune[job_id]
        if dirty is None and self._keep_runs is not None:
            dirty = self._store.jobs_over_run_limit(self._keep_runs)  # first pass: every job over the limit
        try:
            deleted = self._store.prune_runs(
                self._timebase.now(), keep_runs=self._keep_runs, keep_seconds=self._keep_for, job_ids=dirty or set()
            )
        except BaseException:
            with self._prune_lock:  # try these jobs again next time
                assert self._runs_since_prune is not None
                self._runs_since_prune.update(dict.fromkeys(dirty or (), due))
            raise
        if deleted:
            logger.debug("pruned %d runs beyond the retention", deleted)
