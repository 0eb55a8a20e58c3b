"""The verbs that change one job: ``deschedule``, ``pause``, ``resume``, ``run-now`` and ``cancel``.

Each writes one row through the store method of the same name, never migrating. Exit 0 when the job
ends up as asked (also when it already was), 1 when it cannot be done.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._interfaces.present import iso, job_state, plural
from .._model.instant import Instant, to_datetime
from .._model.models import JobState
from .._model.pauses import check_pause
from .._store import RunNowVerdict
from .._store.mappers import plain_job
from .exits import EXIT_OK, CliError
from .lookup import missing_job, require_job_id, with_store
from .output import say
from .when import instant_now, parse_until

if TYPE_CHECKING:
    import argparse

    from .._store import Store

__all__ = ["cmd_cancel", "cmd_deschedule", "cmd_pause", "cmd_resume", "cmd_run_now"]


def cmd_deschedule(args: argparse.Namespace) -> int:
    job_id = require_job_id(args.job_id)

    def body(store: Store) -> int:
        generation = store.deschedule_job(job_id, instant_now())
        if generation is None:
            if store.job_known(job_id):
                # Already in the state asked for: a no-op, exit 0 (the same rule as pause and resume).
                say(f"{job_id!r} is already descheduled; nothing changed")
                return EXIT_OK
            raise missing_job(store, job_id)
        say(f"descheduled {job_id!r} (generation {generation}); a run already in flight may still finish")
        say(
            f"note: an application that declares {job_id!r} (in persched_setup or at its start-up)"
            " schedules it again when it next starts: remove it there too"
        )
        return EXIT_OK

    return with_store(args, body)


def _pause_of(args: argparse.Namespace) -> tuple[Instant, Instant | None, str | None]:
    """Now, and the pause's end and note, checked as `JobScheduler.pause` checks them (nothing written before)."""
    now = instant_now()
    until = None if args.until is None else parse_until(args.until, now)
    end, note = check_pause(None if until is None else to_datetime(until), args.note, now)
    return now, end, note


def _ends(end: Instant | None) -> str:
    return "" if end is None else f" until {iso(to_datetime(end))}"


def cmd_pause(args: argparse.Namespace) -> int:
    if args.all:
        return _pause_all(args)
    job_id = require_job_id(_one_job(args, "pause"))
    now, end, note = _pause_of(args)

    def body(store: Store) -> int:
        generation = store.pause_job(job_id, now, until=end, note=note)
        if generation is not None:
            resume = "it resumes by itself then" if end is not None else f"`persched resume {job_id}` continues it"
            say(
                f"paused {job_id!r} (generation {generation}){_ends(end)}; a run already in flight may still finish;"
                f" {resume}"
            )
            return EXIT_OK
        job = store.get_job_as(plain_job, job_id)
        if job is None:
            raise missing_job(store, job_id)
        if job.paused:
            say(f"{job_id!r} is already paused; nothing changed")
        elif job.state == JobState.FINISHED:
            say(f"{job_id!r} is finished (its window ended) and never runs again; nothing to pause")
        else:  # changed by someone else meanwhile
            say(f"{job_id!r} is {job_state(job)}; nothing changed")
        return EXIT_OK

    return with_store(args, body)


def _pause_all(args: argparse.Namespace) -> int:
    _one_job(args, "pause")
    now, end, note = _pause_of(args)

    def body(store: Store) -> int:
        count = store.pause_all_jobs(now, until=end, note=note)
        say(f"paused {plural(count, 'job')} of namespace {store.namespace!r}{_ends(end)}")
        return EXIT_OK

    return with_store(args, body)


def _one_job(args: argparse.Namespace, verb: str) -> str:
    """The JOB_ID, or nothing with ``--all`` (one of the two, else a CliError)."""
    if args.all and args.job_id is not None:
        raise CliError(f"name one job or --all, not both: `persched {verb} {args.job_id}` or `persched {verb} --all`")
    if not args.all and args.job_id is None:
        raise CliError(f"which job? `persched {verb} JOB_ID`, or `persched {verb} --all` for every job")
    return "" if args.all else str(args.job_id)


def cmd_resume(args: argparse.Namespace) -> int:
    if args.all:
        _one_job(args, "resume")
        return with_store(args, _resume_all)
    job_id = require_job_id(_one_job(args, "resume"))

    def body(store: Store) -> int:
        resumed = store.resume_job(job_id, instant_now())
        if resumed is None:
            job = store.get_job_as(plain_job, job_id)
            if job is None:
                raise missing_job(store, job_id)
            say(f"{job_id!r} is not paused (it is {job_state(job)}); nothing changed")
            return EXIT_OK
        generation, _ = resumed
        job = store.get_job_as(plain_job, job_id)
        if job is not None and job.state == JobState.FINISHED:
            say(f"resumed {job_id!r} (generation {generation}); its window has ended, so it is finished")
        else:
            say(f"resumed {job_id!r} (generation {generation}); slots passed while paused do not run")
        return EXIT_OK

    return with_store(args, body)


def _resume_all(store: Store) -> int:
    resumed = store.resume_all_jobs(instant_now())
    say(f"resumed {plural(len(resumed), 'job')} of namespace {store.namespace!r}; slots passed while paused do not run")
    return EXIT_OK


def cmd_run_now(args: argparse.Namespace) -> int:
    job_id = require_job_id(args.job_id)

    def body(store: Store) -> int:
        verdict, generation = store.request_run_now(job_id, instant_now())
        if verdict is RunNowVerdict.UNKNOWN:
            raise missing_job(store, job_id)
        if verdict is RunNowVerdict.PAUSED:
            raise CliError(f"job {job_id!r} is paused: no run starts; `persched resume {job_id}` first")
        if verdict is RunNowVerdict.FINISHED:
            raise CliError(f"job {job_id!r} is finished (its window ended): no run starts again")
        if verdict is RunNowVerdict.DROPPED:
            raise CliError(
                f"job {job_id!r} is running and its overlap policy is 'skip': the extra run was dropped;"
                " ask again once the run ended"
            )
        if verdict is RunNowVerdict.PENDING:
            say(f"a run-now of {job_id!r} is already pending; nothing added")
        else:
            say(
                f"run-now requested for {job_id!r} (generation {generation}): one extra run as soon as a"
                " scheduler on this database has a worker free; its schedule does not move"
            )
        return EXIT_OK

    return with_store(args, body)


def cmd_cancel(args: argparse.Namespace) -> int:
    job_id = require_job_id(args.job_id)

    def body(store: Store) -> int:
        running = store.request_cancel(job_id, instant_now())
        if running is None:
            raise missing_job(store, job_id)
        if running:
            say(
                f"cancel requested for the run of {job_id!r} in flight: the scheduler that runs it stops it"
                " within its pickup_seconds; its schedule does not move"
            )
        else:
            say(f"job {job_id!r} has no run in flight; nothing to cancel")
        return EXIT_OK

    return with_store(args, body)
