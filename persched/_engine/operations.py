"""`JobOperations`: what a `JobScheduler` does to jobs (schedule, declare, deschedule, pause, ...).

Each operation checks its arguments first (a bad one writes nothing), makes its
change in one store transaction, which is its linearization point, and only after
the commit logs it, queues the job's next slot and emits its event. It is mixed
into `JobScheduler`, which provides the attributes declared at the top of the class.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Final

from .. import _loggers
from .._model.checks import positive
from .._model.declare import DeclareResult, JobSpec
from .._model.instant import to_datetime
from .._model.models import (
    Job,
    JobState,
    Run,
    given_options,
    validate_job_id,
)
from .._model.pauses import check_pause
from .._store import RunNowVerdict
from .._store.coming import coming_slots
from .._store.views import whereabouts
from ..errors import InvalidJobError, JobNotFoundError, SchedulerStateError
from .config import MAX_COUNT, check_wait

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Iterable
    from datetime import date, datetime

    from .._model.definitions import DefinitionChecks
    from .._model.instant import Instant
    from .._model.models import Executor, Misfire, OnOverrun, Overlap, Recurrence
    from .._store import Store
    from .dispatcher import Dispatcher
    from .events import EventKind
    from .heartbeat import Heartbeat
    from .lifecycle import Lifecycle
    from .runs import RunBook
    from .timebase import Timebase

__all__ = ["MAX_NEXT_RUNS", "JobOperations"]

MAX_NEXT_RUNS: Final = 1000  # slots next_runs() lists at most

logger = logging.getLogger(_loggers.LIBRARY)


class JobOperations:
    """The public operations on jobs, for `JobScheduler`."""

    # Provided by JobScheduler.
    _store: Store
    _timebase: Timebase
    _dispatcher: Dispatcher
    _heartbeat: Heartbeat
    _runs: RunBook
    _lifecycle: Lifecycle
    _checks: DefinitionChecks

    if TYPE_CHECKING:

        @property
        def namespace(self) -> str: ...

        def _emit(self, kind: EventKind, job_id: str, generation: int, *, job: Job | None = None) -> None: ...

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
            cron: A 5-field cron expression (or 6 with seconds), or a
                shortcut (`@hourly`, `@daily`, `@midnight`, `@weekly`,
                `@monthly`, `@yearly`, `@annually`), instead of
                `interval_seconds`.
            timezone: The IANA zone `cron` and `exclude` are read in;
                default UTC.
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
            on_overrun: What a run past `max_runtime_seconds` gets: "warn"
                (it is reported as overran) or "stop" (it is also asked to stop).
            executor: Where the callable runs: "thread" (a worker thread) or
                "process" (a child process per run, which a stop can end).
            stop_grace_seconds: How long a stopped child process
                (executor="process") has after SIGTERM before it is killed.
            exclude: Dates ('2026-12-25', datetime.date) and inclusive
                ranges ('2026-12-24/2026-12-26') in `timezone` on which the
                job has no slot; at most 1,000 entries.
            pause_after_failures: Pause the job after this many slots in a
                row ended in failure (outcome error, lost or stopped); a
                success starts the count again. The pause's note says why;
                `resume` starts the count again too.
            retries: Try a run that failed (outcome error) again, up to
                this many times (0 to 100), within its slot: never at or
                after the job's next slot. Each attempt is a run of the same
                slot with its own `Run.attempt` (docs/reference/behaviour.md,
                "Retries").
            retry_delay_seconds: How long after a failed attempt ended the
                next one is due (the first retry's delay).
            retry_backoff: Each retry's delay is the previous one's times
                this (>= 1).
            retry_max_delay_seconds: The longest delay before a retry (None:
                no cap).
            retry_lost: Also try again a run recorded "lost" (its scheduler
                died while it ran).
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
        options = given_options(locals())  # every keyword option of persched._model.models.OPTIONS
        self._lifecycle.check_open()
        definition = self._checks.definition(
            job_id, fn, interval_seconds, args=args, kwargs=kwargs, start_in=start_in, **options
        )
        self._lifecycle.ensure_schema()
        return self._upserted(*self._store.upsert_job(definition, self._timebase.now()))

    def _upserted(self, job: Job, change: str, due: Instant | None) -> Job:
        """After an upsert: log, queue the job's next slot, emit the event."""
        if change != "unchanged":
            logger.info("job %s generation %d %s: %s %s", job.job_id, job.generation, change, job.target, job.schedule)
            if job.state == JobState.FINISHED:
                # Accepted (a re-declared campaign that ended must not stop a start-up), never silently.
                logger.warning(
                    "job %s generation %d has no slot left in its window (end_at %s is past): it is finished "
                    "at once and never runs; give it a later end_at, or remove it",
                    job.job_id,
                    job.generation,
                    job.end_at.isoformat() if job.end_at is not None else "-",
                )
            if due is not None and self._lifecycle.state == "running":
                self._dispatcher.offer(due, job.job_id, job.generation)
            kind: EventKind = "job_replaced" if change == "replaced" else "job_scheduled"
            self._emit(kind, job.job_id, job.generation, job=job)
        return job

    def declare(self, specs: Iterable[JobSpec], *, prune: bool = False, allow_empty: bool = False) -> DeclareResult:
        """Reconcile this namespace's declared jobs with `specs` (an application's whole set of jobs).

        Every spec is checked first: one bad spec raises and nothing is
        written. Then each job is scheduled as by `schedule()`: new ones are
        created, changed ones replaced, identical ones left untouched (same
        generation, same grid). With `prune`, jobs that an earlier
        ``declare()`` of this namespace wrote and that `specs` no longer
        names are descheduled; jobs made by ``schedule()`` and other
        namespaces' jobs are never touched. The whole declaration is one
        transaction: it commits entirely or not at all (an id that another
        namespace's active job holds refuses all of it). What it did is
        logged at INFO in one line and returned.

        Args:
            specs: `JobSpec` values, one per job id.
            prune: Deschedule the declared jobs that `specs` leaves out.
            allow_empty: With `prune`, allow an empty `specs`, which
                deschedules every declared job of this namespace (refused
                otherwise: an empty set is more often a mistake than a wish).

        Returns:
            The declared jobs as stored, in the order of `specs` (a list), with the ids
            created, replaced, unchanged and pruned as attributes (`DeclareResult`).

        Raises:
            InvalidJobError: A spec is not acceptable, two name one job id, an id is
                another namespace's job, or `specs` is empty with `prune` and not
                `allow_empty` (nothing written).
            SchedulerStateError: The scheduler was shut down.
            StoreError: The database cannot be written (nothing written).
        """
        self._lifecycle.check_open()
        for name, flag in (("prune", prune), ("allow_empty", allow_empty)):
            if not isinstance(flag, bool):
                raise InvalidJobError(name, f"must be True or False, got {flag!r}")
        definitions = self._checks.declared(specs)
        if prune and not definitions and not allow_empty:
            raise InvalidJobError(
                "specs",
                f"is empty, and prune=True would deschedule every declared job of namespace {self.namespace!r}; "
                "pass allow_empty=True to do that",
            )
        self._lifecycle.ensure_schema()
        upserts, pruned = self._store.declare_jobs(definitions, self._timebase.now(), prune=prune)
        del definitions  # let go before the jobs are made: of 100,000 specs, the collector need not walk both
        declared = DeclareResult(
            self.namespace,
            ((self._upserted(job, change, due), change) for job, change, due in upserts),
            [job_id for job_id, _ in pruned],
        )
        for job_id, generation in pruned:
            logger.info("job %s generation %d descheduled: no longer declared", job_id, generation)
            self._emit("job_descheduled", job_id, generation)
        logger.info("%s", declared.summary())
        return declared

    def deschedule(self, job_id: str, wait: bool = False, timeout: float | None = None) -> bool:
        """Remove a job: its current generation never starts again, in any process.

        A run that was claimed before may still finish. With `wait`, also
        block until this process's in-flight run of the job (if any) ended.

        Removing is idempotent: an id that this namespace never
        had, or already descheduled, returns False and raises nothing, so an
        application can deschedule a retired job at every start-up. An id
        that is an active job of another namespace returns False too, with a
        WARNING naming that namespace (this scheduler never changes it).

        Returns:
            True if an active job was removed.

        Raises:
            InvalidJobError: `job_id` is not a valid id.
            SchedulerStateError: The scheduler was shut down.
            StoreError: The database cannot be written.
        """
        self._lifecycle.check_open()
        validate_job_id(job_id)
        timeout = check_wait(wait, timeout)
        self._lifecycle.ensure_schema()
        generation = self._store.deschedule_job(job_id, self._timebase.now())
        removed = generation is not None
        if generation is not None:
            logger.info("job %s generation %d descheduled", job_id, generation)
            self._emit("job_descheduled", job_id, generation)
        elif (found := whereabouts(self._store, job_id)) is not None and found[1] and found[0] != self.namespace:
            logger.warning(
                "deschedule(%r) in namespace %r changed nothing: it is a job of namespace %r",
                job_id,
                self.namespace,
                found[0],
            )
        if wait:
            self._runs.wait_for_job(job_id, timeout)
        return removed

    def pause(self, job_id: str, *, until: datetime | None = None, note: str | None = None) -> bool:
        """Pause a job: it keeps its definition and history and starts no run until resumed.

        Linearized like deschedule(): once this returns, the paused
        generation starts no run, in any process (a run claimed before may
        finish). Paused jobs stay paused across restarts and replacements.

        Args:
            job_id: The job.
            until: A timezone-aware instant after now: the job resumes by itself
                then, once, in whichever scheduler of the namespace runs
                (on the scheduler's clock; slots passed while paused do not run).
            note: Why the job is paused (at most 500 characters), shown in
                `Job.pause_note`, ``persched show`` and ``persched jobs --json``.

        Returns:
            True if the job was paused by this call; False if there was
            nothing to change (paused already, or finished).

        Raises:
            InvalidJobError: `until` naive or not ahead of now, `note` too long (nothing is written).
            JobNotFoundError: No such job in this namespace (unknown, or descheduled).
        """
        self._lifecycle.check_open()
        validate_job_id(job_id)
        now = self._timebase.now()
        end, text = check_pause(until, note, now)
        self._lifecycle.ensure_schema()
        generation = self._store.pause_job(job_id, now, until=end, note=text)
        if generation is None:
            self._check_found(job_id)
            return False
        logger.info("job %s generation %d paused", job_id, generation)
        if end is not None:
            self._heartbeat.pause_ending()
        self._emit("job_paused", job_id, generation)
        return True

    def pause_all(self, *, until: datetime | None = None, note: str | None = None) -> int:
        """Pause every scheduled or running job of the namespace that is not paused, in one transaction.

        Each is paused as by `pause` (with the same `until` and `note`).

        Returns:
            How many jobs were paused (0 when there was nothing to change).

        Raises:
            InvalidJobError: `until` naive or not ahead of now, `note` too long (nothing is written).
        """
        self._lifecycle.check_open()
        now = self._timebase.now()
        end, text = check_pause(until, note, now)
        self._lifecycle.ensure_schema()
        count = self._store.pause_all_jobs(now, until=end, note=text)
        logger.info("paused %d jobs of namespace %s", count, self.namespace)
        if end is not None and count:
            self._heartbeat.pause_ending()
        return count

    def resume(self, job_id: str) -> bool:
        """Resume a paused job on its grid from now: slots that passed while it was paused do not run.

        Clears the pause's `until` and note.

        Returns:
            True if the job was paused and is resumed now; False if it was not paused.

        Raises:
            JobNotFoundError: No such job in this namespace (unknown, or descheduled).
        """
        self._lifecycle.check_open()
        validate_job_id(job_id)
        self._lifecycle.ensure_schema()
        resumed = self._store.resume_job(job_id, self._timebase.now())
        if resumed is None:
            self._check_found(job_id)
            return False
        self._resumed(job_id, *resumed)
        return True

    def resume_all(self) -> int:
        """Resume every paused job of the namespace, in one transaction, as `resume` does each.

        Returns:
            How many jobs were resumed (0 when none was paused).
        """
        self._lifecycle.check_open()
        self._lifecycle.ensure_schema()
        resumed = self._store.resume_all_jobs(self._timebase.now())
        for job_id, generation, due in resumed:
            self._resumed(job_id, generation, due)
        return len(resumed)

    def _resumed(self, job_id: str, generation: int, due: Instant | None) -> None:
        logger.info("job %s generation %d resumed", job_id, generation)
        if due is not None and self._lifecycle.state == "running":
            self._dispatcher.offer(due, job_id, generation)
        self._emit("job_resumed", job_id, generation)

    def run_now(self, job_id: str) -> bool:
        """Ask for one extra run of the job as soon as a worker is free, without moving its grid.

        The run obeys the job's overlap rule: while a run is in flight it
        waits for it ("forbid"), or is dropped ("skip"). Asking again before
        the extra run started adds nothing.

        Returns:
            True if an extra run is pending; False if the request was
            dropped by overlap "skip".

        Raises:
            JobNotFoundError: No such job in this namespace (unknown, or descheduled).
            SchedulerStateError: The job is paused or finished.
        """
        self._lifecycle.check_open()
        validate_job_id(job_id)
        self._lifecycle.ensure_schema()
        now = self._timebase.now()
        verdict, generation = self._store.request_run_now(job_id, now)
        if verdict is RunNowVerdict.UNKNOWN:
            raise self._not_found(job_id, whereabouts(self._store, job_id))
        if verdict in (RunNowVerdict.PAUSED, RunNowVerdict.FINISHED):
            raise SchedulerStateError(f"run_now({job_id!r}): the job is {verdict.value}; resume or schedule it first")
        if verdict is RunNowVerdict.REQUESTED:
            assert generation is not None
            logger.info("job %s generation %d: run now requested", job_id, generation)
            if self._lifecycle.state == "running":
                self._dispatcher.offer(now, job_id, generation)  # a run in flight: its completion queues it too
        return verdict.will_run

    def cancel(self, job_id: str) -> bool:
        """Ask the run of the job in flight to stop, in whichever instance runs it.

        This instance stops its own run at once; another one notices within
        its `pickup_seconds`. A thread job sees `persched.current_run()`'s
        ``stopping`` set, an async job's task is cancelled, a job with
        ``executor="process"`` is terminated, then killed after its
        ``stop_grace_seconds`` (docs/reference/behaviour.md, "Stopping a run").
        The job's schedule is unchanged: its next slot runs as usual.

        Returns:
            True if a run of the job was in flight; False if none was.

        Raises:
            JobNotFoundError: No such job in this namespace (unknown, or descheduled).
        """
        self._lifecycle.check_open()
        validate_job_id(job_id)
        self._lifecycle.ensure_schema()
        running = self._store.request_cancel(job_id, self._timebase.now())
        if running is None:
            raise self._not_found(job_id, whereabouts(self._store, job_id))
        if running:
            logger.info("job %s: cancel requested for its run in flight", job_id)
            self._dispatcher.pool.stops.request(job_id, "cancel")  # this instance's run, if it runs it: at once
        return running

    def _check_found(self, job_id: str) -> None:
        """After a pause or resume that changed nothing: raise unless the job is active in this namespace.

        Read after that call's own transaction: a job scheduled in between
        counts as found (the call changed nothing, and False says so).
        """
        found = whereabouts(self._store, job_id)
        if found != (self.namespace, True):
            raise self._not_found(job_id, found)

    def _not_found(self, job_id: str, found: tuple[str, bool] | None) -> JobNotFoundError:
        """The error for `job_id` missing from this namespace; `found` is its `whereabouts`."""
        if found is None:
            return JobNotFoundError(job_id, self.namespace)
        namespace, active = found
        if namespace != self.namespace:
            return JobNotFoundError(job_id, self.namespace, owner=namespace if active else None)
        return JobNotFoundError(job_id, self.namespace, descheduled=not active)

    def get_job(self, job_id: str) -> Job | None:
        """Return the job `job_id` (scheduled, running, paused or finished), or None (also once descheduled)."""
        self._lifecycle.check_open()
        validate_job_id(job_id)
        self._lifecycle.ensure_schema()
        return self._store.get_job(job_id)

    def next_runs(self, job_id: str, count: int = 10) -> list[datetime]:
        """Return the coming slots of a job as it will run them (UTC, aware), soonest first.

        They follow the job's schedule, time zone and daylight-saving rules,
        its window and a pause with an end (the slots after it). A job paused
        without an end, or finished, has none; fixed delay knows only its
        next slot. Runs are not predicted: a slot still to run while one is in
        flight is listed at its time.

        Args:
            job_id: The job.
            count: How many slots, 1 to 1000.

        Raises:
            InvalidJobError: `count` is not a whole number from 1 to 1000.
            JobNotFoundError: No such job in this namespace (unknown, or descheduled).
        """
        self._lifecycle.check_open()
        validate_job_id(job_id)
        wanted = int(positive("count", count, integer=True, maximum=MAX_NEXT_RUNS))
        self._lifecycle.ensure_schema()
        slots = self._store.get_job_as(lambda row: coming_slots(row, wanted), job_id)
        if slots is None:
            self._check_found(job_id)
            return []
        return [to_datetime(slot) for slot in slots]

    def jobs(self) -> list[Job]:
        """Return every job not descheduled (scheduled, running, paused, finished), soonest first."""
        self._lifecycle.check_open()
        self._lifecycle.ensure_schema()
        return self._store.list_jobs()

    def runs(self, job_id: str | None = None, limit: int = 100) -> list[Run]:
        """Return the latest runs of `job_id` (or of all jobs), newest first."""
        self._lifecycle.check_open()
        if job_id is not None:
            validate_job_id(job_id)
        limit = int(positive("limit", limit, integer=True, maximum=MAX_COUNT))
        self._lifecycle.ensure_schema()
        return self._store.list_runs(job_id, limit)
