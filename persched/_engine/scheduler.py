"""`JobScheduler`: the public facade that wires store, dispatcher, workers and heartbeat.

This module wires the parts and keeps the observation (listeners, the observer,
wait_idle). The operations on jobs are `persched._engine.operations`'s, mixed in;
the state, start-up, shutdown and the fork and atexit hooks are
`persched._engine.lifecycle`'s; a run's way is `persched._engine.dispatcher`'s.
Public methods run on the caller's thread and go straight to the store. This
module holds no lock, and no user code runs under any persched lock
(docs/explanation/engine.md, "Threads").
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Final

from .. import _loggers, _realtime
from .._model.definitions import DefinitionChecks
from .._model.instant import to_datetime
from .._model.models import (
    DEFAULT_MAX_ARGS_BYTES,
    DEFAULT_NAMESPACE,
    Job,
    Run,
)
from .._store import Store
from .._store import db as _db
from .._store.observer import Observer
from .change_pickup import ChangePickup
from .config import (
    DEFAULT_KEEP_ERROR_RUNS,
    DEFAULT_MAX_CLOCK_SKEW_SECONDS,
    DEFAULT_MIGRATION_TIMEOUT_SECONDS,
    DEFAULT_WORKERS,
    SchedulerConfig,
    check_share_work,
    check_wait,
    scheduler_options,
)
from .context import current_run
from .dispatcher import BATCH_WAIT, Dispatcher
from .events import Event, EventBus
from .heartbeat import Heartbeat
from .horizon import DEFAULT_HORIZON_SECONDS, Horizon
from .internals import Internals
from .leases import Leases
from .lifecycle import Lifecycle
from .membership import Membership
from .operations import JobOperations
from .pause_ends import PauseEnds
from .periodic import Every
from .retention import Retention
from .runs import RunBook
from .skew import ClockCheck
from .timebase import Timebase

if TYPE_CHECKING:
    import os
    from collections.abc import Callable, Iterable
    from types import TracebackType

    from .._store import OpenRun
    from ..clock import Clock, SecondsClock
    from .events import EventKind, Listener

__all__ = ["JobScheduler", "current_run", "internals_of"]

logger = logging.getLogger(_loggers.LIBRARY)

DEFAULT_URL: Final = "sqlite:///persched.db"


def internals_of(scheduler: JobScheduler) -> Internals:
    """The parts of `scheduler` that persched's front ends use (`persched._engine.internals`): not public API."""
    return Internals(scheduler._store, scheduler._timebase, scheduler._dispatcher.pool, scheduler._config.workers)


class JobScheduler(JobOperations):
    """Runs callables at fixed intervals; every schedule lives in SQL.

    A scheduler runs jobs only once started (`start()`, or ``with
    JobScheduler(...)``), and then it runs every job that is due, an overdue
    one at once. One that is not started runs nothing: its methods
    (`schedule()`, `deschedule()`, `pause()`, `get_job()`, `runs()`, ...)
    read and write the tables, which is what a script that looks at or
    steers jobs wants; `shutdown()` then releases its connections.

    Args:
        url: A SQLAlchemy URL or a plain SQLite file path (a `str` or a `pathlib.Path`).
        workers: How many runs may execute at once (worker threads), at most
            4096; default 32. The threads are made at start() and cost no
            CPU while idle. Each dispatch cycle claims at most as many due
            runs as there are free workers, in one transaction, so more
            workers also mean fewer commits per run (the documentation,
            "Performance").
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
            this (None: no limit by age). Pruning never runs on the dispatch path.
        keep_error_runs: Failed runs (outcome error, lost or stopped) kept
            per job apart from `keep_runs`: the newest this many, so that a
            burst of successes never erases the last failures (None: every
            failed run; `keep_runs_for_seconds` still deletes by age).
        allowed_modules: If given, module names (or package prefixes) whose
            callables may be scheduled and run; a stored target outside them
            is never imported: its runs are refused and recorded as errors.
            Whoever can write the database can change a row's target, so set
            this wherever the database is shared with less trusted writers.
        pickup_seconds: How often to read the change counter for jobs
            scheduled, replaced or descheduled by other instances or the CLI
            (one cheap read). The bound of the pick-up delay; changes are
            usually picked up much sooner: on PostgreSQL within milliseconds
            (LISTEN/NOTIFY), on SQLite within `pickup_check_seconds` while
            the database is busy.
        pickup_check_seconds: The least time between two pick-ups that a
            signal asked for (a stream of changes is read in batches); on
            SQLite also how often to ask whether another connection
            committed (``PRAGMA data_version``, which reads no file). While
            no connection commits, the check backs off to once a second.
        horizon_seconds: How far ahead the dispatcher keeps jobs in memory
            (at least 2 s): it loads the jobs due within this time, and loads
            more as time moves on, so memory and start-up do not grow with the
            number of jobs (the documentation, "Design": the bounded heap).
        max_args_bytes: The largest `args`, and the largest `kwargs`, that
            schedule() accepts, in bytes of their stored JSON (default
            64 KiB): every claim reads them, so large ones slow every job.
        namespace: The application this scheduler belongs to: it sees, runs
            and changes only the jobs of its namespace, so several
            applications can share one database. Default "default" (every
            job made before namespaces existed is there).
        share_work: Deprecated, with no effect: instances on one database
            always share the work (the documentation, "Several instances").
            False warns (`DeprecationWarning`); the option will be removed in
            the next minor release.
        max_clock_skew_seconds: How far this host's clock may be from the
            database's clock (default 2 s), read at the first use and at every
            heartbeat (SQLite: this machine's clock, at the first use). Beyond
            it the scheduler logs one WARNING and keeps to the database's
            time, so a host with a wrong clock neither takes over the others'
            work nor runs slots early or late (the documentation, "Several
            instances": what skew does). None: never read it. A
            `persched.testing.FakeClock` is never compared with it.
        migration_timeout_seconds: How long start() waits while another
            process migrates the schema (default 600 s; processes starting
            together on a new or older database queue for one migration).
            Statements keep `busy_timeout_seconds`. Past it, `StoreError`.

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
        check_share_work(share_work, stacklevel=2)
        config = SchedulerConfig.checked(**scheduler_options(locals()))
        self._config: Final = config
        self.namespace: Final = config.namespace
        self.instance_id: Final = config.instance_id
        self._checks = DefinitionChecks(config.allowed_modules, config.max_args_bytes)
        self._timebase = Timebase(config.clock)
        engine = _db.open_engine(config.url, config.engine)  # the options were checked above, once
        self._store = Store(engine, _db.mask(engine.url), namespace=self.namespace)
        self._events = EventBus()
        # A job its failures paused (pause_after_failures), in a commit of this instance's store.
        self._store.failures_paused = lambda job_id, generation: self._emit("job_paused", job_id, generation)
        self._retention = Retention(
            self._store, self._timebase, config.keep_runs, config.keep_for, config.keep_error_runs
        )
        self._clock_check = ClockCheck(
            self._timebase,
            self._store.server_time,
            config.max_clock_skew,
            follow=not self._store.dialect.in_process,  # SQLite: the machine's clock
            instance_id=self.instance_id,
            retimed=lambda: self._dispatcher.retime(),  # made below
        )
        # Every instance is a member, even a lone one (`persched instances` reads them).
        self._membership = Membership(self._store, self._timebase, self.instance_id, config.lease, self._clock_check)
        self._runs = RunBook(
            self._store, self._timebase, self.instance_id, config.lease, self._emit, self._retention.recorded
        )
        self._dispatcher = Dispatcher(
            self._timebase,
            self._runs,
            config.workers,
            self._membership.owns,
            self._store.jitter_reach,
            config.allowed_modules,
            # A server's commit is a round trip worth sharing among more runs; SQLite's is local.
            batch_wait=0.0 if self._store.dialect.in_process else BATCH_WAIT,
        )
        self._horizon = Horizon(self._store, self._timebase, self._membership)
        self._heartbeat = self._make_heartbeat(config)
        self._lifecycle = Lifecycle(
            self.instance_id,
            config.horizon,
            store=self._store,
            timebase=self._timebase,
            clock_check=self._clock_check,
            membership=self._membership,
            sweeps=self._horizon,
            runs=self._runs,
            dispatcher=self._dispatcher,
            heartbeat=self._heartbeat,
            events=self._events,
            migration_timeout=config.migration_timeout,
        )

    def _make_heartbeat(self, config: SchedulerConfig) -> Heartbeat:
        """The heartbeat thread and its tasks, wired to the engine."""
        offer, membership = self._dispatcher.offer, self._membership

        def view_changed(shared: bool) -> None:
            """On the heartbeat thread: keep the owned entries, reload the owned rows, sweep the buckets gained."""
            self._dispatcher.repartition(shared)
            if self._horizon.view_changed():
                self._heartbeat.sweep_again()

        def renew_membership() -> None:
            if membership.beat():
                view_changed(membership.shared)

        pause_ends = PauseEnds(
            self._store,
            self._timebase,
            offer,
            lambda job_id, generation: self._emit("job_resumed", job_id, generation),
            period=config.heartbeat,
        )
        return Heartbeat(
            self._timebase.clock,
            pickup=ChangePickup(
                self._store,
                self._timebase,
                offer,
                membership,
                view_changed,
                pause_ends.reread,
                pickup=config.pickup,
                pickup_check=config.pickup_check,
                cancels=self._pick_up_cancels,
            ),
            membership=Every("renewing membership", config.heartbeat, renew_membership),
            leases=Leases(
                self._store,
                self._timebase,
                self.instance_id,
                config.lease,
                config.heartbeat,
                self._runs.in_flight,
                offer,
                self._on_lost,
            ),
            pause_ends=pause_ends,
            maintenance=Every("run-history maintenance", config.heartbeat, self._maintenance),
        )

    # -- lifecycle ------------------------------------------------------------

    def start(self) -> None:
        """Migrate the schema to head, load the jobs and start dispatching.

        From here on every due job runs, those that were due while no
        scheduler ran them at once (coalesced); before it, nothing runs.

        Raises:
            SchedulerStateError: Already started, or shut down.
            SchemaVersionError: The database's schema is newer than this code.
            StoreError: The database cannot be used.
        """
        self._lifecycle.start()

    def shutdown(self, wait: bool = True, timeout: float | None = None) -> None:
        """Stop dispatching; let in-flight runs finish; release the database.

        No claim commits after this call begins. Idempotent, and callable from
        any thread, a running job included (then it does not wait for itself:
        the rest of the shutdown goes on in the background).

        Args:
            wait: Block until in-flight runs finished (up to `timeout`).
            timeout: Seconds to wait for in-flight runs; None waits for ever.
        """
        self._lifecycle.shutdown(wait, timeout)

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

    def wait_idle(self, timeout: float | None = 10.0) -> bool:
        """Block until every run that is due has started, finished and been recorded, and its events delivered.

        The testing kit for schedules on a `persched.testing.FakeClock`: after
        ``clock.advance(seconds)``, ``wait_idle()`` returns once the runs that
        became due have run, so a test needs no sleep and no polling loop. On
        the real clock it returns at the first moment nothing is due or running.
        A timed pause whose end the clock reached is resumed before it looks.
        A claim that met a store error is tried again a second later: on a
        FakeClock, advance the clock to let it run.

        Args:
            timeout: Real seconds to wait at most; None waits for ever.

        Returns:
            True when idle; False if `timeout` passed first.
        """
        self._lifecycle.check_process()
        timeout = check_wait(True, timeout)
        deadline = None if timeout is None else _realtime.monotonic() + timeout

        def left() -> float | None:
            return None if deadline is None else max(0.0, deadline - _realtime.monotonic())

        # A timed pause that ended by now is resumed first: its job may then be due.
        if not self._heartbeat.wait_pause_ends(left()) or not self._dispatcher.wait_idle(left()):
            return False
        return self._events.wait_delivered(left())

    # -- internals ------------------------------------------------------------------

    def _maintenance(self) -> None:
        """Heartbeat callback: retry unwritten completions, then prune run history."""
        self._dispatcher.retry_unwritten()
        self._retention.prune()

    def _pick_up_cancels(self) -> bool:
        """At a change pick-up: stop the runs here that `cancel()` asked for (`persched._store.cancels`).

        True while a request found no run here to stop yet: claimed and not taken by a worker,
        or ended and not yet written. The next pick-ups read again.
        """
        handover, stops = self._dispatcher.handover, self._dispatcher.pool.stops
        if handover.free == handover.size and not handover.elsewhere:  # nothing claimed or running here
            return False
        waiting = False
        for job_id in self._store.cancel_requests(self.instance_id):
            if stops.request(job_id, "cancel"):
                logger.info("job %s: its run is stopped, as cancel() asked", job_id)
            else:
                waiting = True
        return waiting

    # -- events and observation ------------------------------------------

    def add_listener(self, callback: Listener, kinds: Iterable[EventKind] | None = None) -> None:
        """Call `callback(event)` for each event of `kinds` (default: every kind).

        The kinds are `persched.Event`'s (its ``kind``). Listeners are called in
        order on one daemon thread, ``persched-events``, never on the dispatcher
        or a worker: a listener that raises is logged and ignored, one that
        blocks delays only the listeners and events behind it. Undelivered
        events beyond 10,000 are dropped with a WARNING. Runs of other instances
        sharing the database produce no events here, except ``run_lost`` when
        this instance's heartbeat recovers them.

        Args:
            callback: Takes one `persched._engine.events.Event`.
            kinds: The event kinds wanted.

        Raises:
            InvalidJobError: `callback` is not callable or a kind is unknown.
            SchedulerStateError: Called in a forked child of the scheduler's process.
        """
        self._lifecycle.check_process()
        self._events.add(callback, kinds)

    def remove_listener(self, callback: Listener) -> bool:
        """Stop calling `callback`; True if it was registered."""
        self._lifecycle.check_process()
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
        return self._runs.count()

    @property
    def events_dropped(self) -> int:
        """How many events were dropped because listeners did not keep up (see `add_listener`)."""
        return self._events.dropped

    def _emit(
        self,
        kind: EventKind,
        job_id: str,
        generation: int,
        *,
        job: Job | None = None,
        run: Run | Callable[[], Run | None] | None = None,
    ) -> None:
        # A run's payload is built only when a listener wants the event.
        if not self._events.wants(kind):
            return
        payload = run() if callable(run) else run
        self._events.emit(Event(kind, job_id, generation, to_datetime(self._timebase.now()), job=job, run=payload))

    def _on_lost(self, lost: OpenRun) -> None:
        """Heartbeat callback: a run was recorded as lost."""
        self._emit("run_lost", lost.job_id, lost.generation, run=lambda: self._store.get_run(lost.run_id))
