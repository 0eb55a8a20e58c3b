"""The verbs that change one job: ``deschedule``, ``pause``, ``resume`` and ``run-now``.

Each writes one row through the store method of the same name and never
migrates; a scheduler running on the database picks the change up within
its ``pickup_seconds``. One rule for all four (the package docstring): exit
0 when the job ends up as asked, also when it already was ("nothing
changed"); exit 1 when it cannot be done.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._interfaces.present import job_state
from .._model.instant import Instant
from .._model.models import JobState
from .._store import RunNowVerdict
from .._store.mappers import plain_job
from ..clock import SystemClock
from .exits import EXIT_OK, CliError
from .lookup import missing_job, require_job_id, with_store
from .output import say

if TYPE_CHECKING:
    import argparse

    from .._store import Store

__all__ = ["cmd_deschedule", "cmd_pause", "cmd_resume", "cmd_run_now"]


def _now() -> Instant:
    return Instant(SystemClock().now_us())


def cmd_deschedule(args: argparse.Namespace) -> int:
    job_id = require_job_id(args.job_id)

    def body(store: Store) -> int:
        generation = store.deschedule_job(job_id, _now())
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


def cmd_pause(args: argparse.Namespace) -> int:
    job_id = require_job_id(args.job_id)

    def body(store: Store) -> int:
        generation = store.pause_job(job_id, _now())
        if generation is not None:
            say(
                f"paused {job_id!r} (generation {generation}); a run already in flight may still finish;"
                f" `persched resume {job_id}` continues it"
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


def cmd_resume(args: argparse.Namespace) -> int:
    job_id = require_job_id(args.job_id)

    def body(store: Store) -> int:
        resumed = store.resume_job(job_id, _now())
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


def cmd_run_now(args: argparse.Namespace) -> int:
    job_id = require_job_id(args.job_id)

    def body(store: Store) -> int:
        verdict, generation = store.request_run_now(job_id, _now())
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
