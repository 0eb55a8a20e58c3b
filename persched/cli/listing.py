"""The read-only verbs: ``jobs``, ``show`` and ``runs``.

They read plain rows (`persched._model.plain_models`); only ``--json`` imports pydantic
(tests/integration/test_cli_startup.py).
"""

from __future__ import annotations

import json
import textwrap
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Final

from .._engine.liveness import display_id
from .._interfaces.present import iso, job_state, pending_attempt, relative, retry_policy, run_counts
from .._model.instant import micros
from .._model.models import OPTIONS, JobState
from .._model.triggers import describe_duration
from .._store.mappers import plain_job, plain_run
from .._store.views import all_jobs_as, all_runs_as, namespaces_of, whereabouts
from .exits import EXIT_OK, CliError
from .health import no_scheduler_note
from .lookup import missing_job, require_job_id, say_empty, with_store
from .output import jobs_table, json_text, runs_table, say, table_width

if TYPE_CHECKING:
    import argparse

    from .._model.plain_models import PlainJob, PlainRun
    from .._store import Store

__all__ = ["cmd_jobs", "cmd_runs", "cmd_show"]


def cmd_jobs(args: argparse.Namespace) -> int:
    def body(store: Store) -> int:
        jobs = all_jobs_as(store, plain_job) if args.all_namespaces else store.list_jobs_as(plain_job)
        if not jobs and args.all_namespaces:
            say("[]" if args.json else f"no active jobs in {store.url}")
        elif not jobs:
            say_empty(store, "no active jobs", json_output=args.json)
            if args.json:
                say("[]")
        elif args.json:
            say(json_text([_job_json(job) for job in jobs]))  # a Job carries its namespace
        else:
            running = any(_running(job) for job in jobs)
            in_flight = {run.job_id: run for run in store.runs_in_flight_as(plain_run)} if running else {}
            now = datetime.now(timezone.utc)
            say(jobs_table(jobs, now, table_width(args), in_flight, namespaces=args.all_namespaces))
            note = None if args.all_namespaces else no_scheduler_note(store)
            if note is not None:
                width = table_width(args)
                say(note if width is None else textwrap.fill(note, max(width, 20), break_on_hyphens=False))
        return EXIT_OK

    return with_store(args, body, read_only=True)


def _running(job: PlainJob) -> bool:
    return job.state == JobState.RUNNING


def cmd_show(args: argparse.Namespace) -> int:
    job_id = require_job_id(args.job_id)

    def body(store: Store) -> int:
        job = store.get_job_as(plain_job, job_id)
        if job is None:
            raise missing_job(store, job_id)
        runs = store.list_runs_as(plain_run, job_id, args.limit)
        if args.json:
            say(json_text({**_job_json(job), "runs": [_run_json(run) for run in runs]}))
            return EXIT_OK
        now = datetime.now(timezone.utc)
        fields = [
            ("job", job.job_id),
            ("namespace", job.namespace),
            *(
                [("unreadable", f"{job.unreadable} (schedule it again with a valid definition)")]
                if job.unreadable
                else []
            ),
            ("target", job.target),
            ("args", json.dumps(list(job.args))),
            ("kwargs", json.dumps(job.kwargs, sort_keys=True)),
            ("schedule", _schedule_words(job)),
            *policies(job),
            ("next run", _next_run_words(job, now)),
            ("state", job_state(job) + _owner_words(job, now)),
            *(
                [("paused until", f"{iso(job.paused_until)} ({relative(job.paused_until, now)})")]
                if job.paused_until
                else []
            ),
            *([("pause note", job.pause_note)] if job.pause_note is not None else []),
            ("generation", str(job.generation)),
            ("runs", run_counts(job)),
            ("created", iso(job.created_at)),
            ("updated", iso(job.updated_at)),
        ]
        indent = max(len(name) for name, _ in fields) + 2
        width = table_width(args)
        for name, value in fields:
            line = f"{name.ljust(indent)}{value}"
            if width is not None and len(line) > width:
                # Wrap long values (policies, kwargs) under themselves rather than mid-word.
                line = textwrap.fill(
                    line, max(width, indent + 20), subsequent_indent=" " * indent, break_on_hyphens=False
                )
            say(line)
        say()
        if runs:
            say("latest run:" if len(runs) == 1 else f"latest {len(runs)} runs, newest first:")
            say(runs_table(runs, with_job=False, width=width))
        else:
            say("no runs recorded yet")
        return EXIT_OK

    return with_store(args, body, read_only=True)


def _owner_words(job: PlainJob, now: datetime) -> str:
    """Where a running job runs and its lease; a lease that expired says what becomes of the run."""
    if not job.owner:
        return ""
    where, lease = f" on {display_id(job.owner)}", job.lease_until
    if lease is None:
        return f"{where}, lease until -"
    if lease > now:
        return f"{where}, lease until {iso(lease)} ({relative(lease, now)})"
    # The heartbeat's recovery (persched._engine.heartbeat): a scheduler of this namespace marks the run lost once
    # it has watched the lease go unrenewed for lease_seconds, or at once if the owner is provably gone.
    return (
        f"{where}, lease expired {relative(lease, now)} ({iso(lease)}), not renewed since: a scheduler of this"
        " namespace records the run as lost once it has seen the lease unrenewed for its lease_seconds,"
        " at once if it can tell the process is gone"
    )


def _schedule_words(job: PlainJob) -> str:
    words = job.schedule
    if job.interval_seconds is not None and f"{job.interval_seconds:g} s" not in words:
        words += f" ({job.interval_seconds:g} s)"
    elif job.cron is not None and job.timezone == "UTC":
        words += " (UTC)"  # Job.schedule names the zone only when it is not UTC
    return words


def _next_run_words(job: PlainJob, now: datetime) -> str:
    if job.state == JobState.FINISHED:
        return "- (finished: its window ended; no run starts again)"
    if job.paused:
        return f"- (paused: `persched resume {job.job_id}` continues on the schedule from then)"
    pending = pending_attempt(job)
    return f"{iso(job.next_run_at)} ({relative(job.next_run_at, now)})" + ("" if pending is None else f", {pending}")


def _misfire_line(job: PlainJob) -> tuple[str, str] | None:
    if job.misfire == "skip":
        return ("misfire", "skip (missed slots are dropped and recorded as missed)")
    if job.misfire == "catch_up":
        return (
            "misfire",
            f"catch_up, at most {job.max_catch_up} (the most recent missed slots run, oldest first;"
            " older ones are dropped and recorded as missed)",
        )
    return None


def _window_line(job: PlainJob) -> tuple[str, str] | None:
    window = []
    if job.start_at is not None:
        window.append(f"from {iso(job.start_at)}")
    if job.end_at is not None:
        window.append(f"until {iso(job.end_at)}, then finished")
    return ("window", " ".join(window)) if window else None


def _exclude_line(job: PlainJob) -> tuple[str, str] | None:
    if not job.exclude:
        return None
    more = len(job.exclude) - EXCLUDE_SHOWN
    rest = f" and {more} more (--json lists them all)" if more > 0 else ""
    return ("excluded", f"{', '.join(job.exclude[:EXCLUDE_SHOWN])}{rest} (no slot on these dates, in {job.timezone})")


def _failures_line(job: PlainJob) -> tuple[str, str] | None:
    if job.pause_after_failures is None:
        return None
    so_far = f"{job.failure_streak} so far; a success or a resume clears them"
    return ("pause after", f"{job.pause_after_failures} failed slots in a row ({so_far})")


def _retries_line(job: PlainJob) -> tuple[str, str] | None:
    words = retry_policy(job)
    return None if words is None else ("retries", words)


EXCLUDE_SHOWN: Final = 20  # entries `show` lists on its line

# The `show` lines of the options whose words take more than their own value (the others: Option.shown).
_SHOWN: Final = {
    "misfire": _misfire_line,
    "start_at": _window_line,
    "exclude": _exclude_line,
    "pause_after_failures": _failures_line,
    "retries": _retries_line,  # says the other retry options too
}


def policies(job: PlainJob) -> list[tuple[str, str]]:
    """The `show` lines, as (name, value), of each policy that differs from its default."""
    lines: list[tuple[str, str]] = []
    for option in OPTIONS:
        line: tuple[str, str] | None = None
        if option.name in _SHOWN:
            line = _SHOWN[option.name](job)
        elif option.shown is not None:
            value = getattr(job, option.name)
            if value != option.default:
                label, words = option.shown
                line = (label, words.format(describe_duration(micros(value)) if option.unit == "seconds" else value))
        if line is not None:
            lines.append(line)
    return lines


def cmd_runs(args: argparse.Namespace) -> int:
    job_id = None if args.job_id is None else require_job_id(args.job_id)
    if args.all_namespaces:
        return with_store(args, lambda store: _all_runs(args, store, job_id), read_only=True)

    def body(store: Store) -> int:
        runs = store.list_runs_as(plain_run, job_id, args.limit)
        if not runs and job_id is not None and not store.job_known(job_id):
            raise missing_job(store, job_id)
        if not runs and job_id is None:
            say_empty(store, "no runs recorded", json_output=args.json)
        if args.json:
            say(json_text([_run_json(run) for run in runs]))
        elif runs:
            say(runs_table(runs, width=table_width(args)))
        elif job_id is not None:
            say(f"no runs recorded for {job_id!r}")
        return EXIT_OK

    return with_store(args, body, read_only=True)


def _all_runs(args: argparse.Namespace, store: Store, job_id: str | None) -> int:
    """`persched runs --all-namespaces`: the runs of every namespace, each with its job's namespace."""
    runs = all_runs_as(store, plain_run, job_id, args.limit)
    if not runs and job_id is not None and whereabouts(store, job_id) is None:
        raise CliError(f"no job {job_id!r} in any namespace of {store.url}; see `persched jobs --all-namespaces`")
    namespaces = namespaces_of(store, {run.job_id for run in runs})
    if args.json:
        say(json_text([{**_run_json(run), "namespace": namespaces.get(run.job_id)} for run in runs]))
    elif runs:
        say(runs_table(runs, width=table_width(args), namespaces=namespaces))
    else:
        say("no runs recorded" + (f" in {store.url}" if job_id is None else f" for {job_id!r}"))
    return EXIT_OK


def _job_json(job: PlainJob) -> dict[str, Any]:
    from .._model.models import Job  # pydantic: `--json` prints what the public model dumps, and only it needs it

    return Job.model_validate(job, from_attributes=True).model_dump(mode="json")


def _run_json(run: PlainRun) -> dict[str, Any]:
    from .._model.models import Run  # as in `_job_json`

    return Run.model_validate(run, from_attributes=True).model_dump(mode="json")
