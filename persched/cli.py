"""The ``persched`` command line: inspect and steer schedules from outside the process.

Commands (``persched COMMAND --help`` shows each with an example)::

    persched demo                        # a self-contained tour; ends by itself
    persched migrate                     # create the database / upgrade its schema
    persched jobs [--json]               # every job not descheduled, with its schedule and state
    persched show JOB_ID [--json]        # one job, its policies and its latest runs
    persched runs [JOB_ID] [--limit N] [--json]
    persched deschedule JOB_ID
    persched pause JOB_ID                # no run starts until resumed
    persched resume JOB_ID               # continue on the schedule from now
    persched run-now JOB_ID              # one extra run as soon as a worker is free
    persched run --import MODULE [--workers N]

The database comes from ``--db URL`` (before or after the command), else the
``PERSCHED_DB`` environment variable, else ``persched.db`` in the current
directory. ``jobs``, ``show`` and ``runs`` never create a database and never
change its schema; ``pause``, ``resume``, ``run-now`` and ``deschedule``
write one row and never migrate; a scheduler running on the database picks
the change up (within its ``pickup_seconds``, 1 s by default). ``pause`` of a
paused job and ``resume`` of a job that is not paused change nothing, say so
and exit 0: only an unknown job is an error for them, as for ``deschedule``.

Exit codes: 0 success; 1 an error (unknown job, unusable database, schema
from a newer persched, a module that does not import, ``run-now`` of a paused
or finished job or dropped by overlap "skip"); 2 bad usage; 130 interrupted
(Ctrl-C during a read command). ``persched run`` exits 0 after a graceful
stop on SIGINT/SIGTERM, and 128 + the signal number when a second signal
forces it out. Errors are one line on stderr; ``--debug`` adds the traceback
and DEBUG logging.

This module parses, calls into persched and prints; it holds no SQL and
starts no threads of its own (``run`` starts a `JobScheduler`).
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import signal
import sys
import textwrap
import threading
import time
import traceback
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Final, NoReturn

from . import _db, _migrate
from ._instant import Instant, micros
from ._models import DEFAULT_NAMESPACE, Job, JobState, validate_job_id, validate_namespace
from ._scheduler import JobScheduler
from ._store import Store
from ._triggers import describe_duration
from .clock import SystemClock
from .errors import PerschedError

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from types import FrameType, ModuleType

    from ._models import Run

__all__ = ["EXIT_ERROR", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE", "main"]

logger = logging.getLogger(__name__)

EXIT_OK: Final = 0
EXIT_ERROR: Final = 1  # a user error: unknown job, unusable database, newer schema, bad module
EXIT_USAGE: Final = 2  # bad command-line usage (argparse's convention)
EXIT_INTERRUPTED: Final = 130  # Ctrl-C during a read command (128 + SIGINT)

DEFAULT_DB: Final = "persched.db"
ENV_DB: Final = "PERSCHED_DB"
ENV_NAMESPACE: Final = "PERSCHED_NAMESPACE"
SETUP_HOOK: Final = "persched_setup"  # `run --import`: called with the started scheduler
SHOW_RUNS: Final = 10  # runs listed by `show` unless --limit says otherwise
ERROR_COLUMN: Final = 60  # characters of error text in a runs table
RANGE: Final = "\u2013"  # EN DASH between the first and last slot of a "missed" record


class CliError(Exception):
    """A user error: printed as one line, exit code 1."""


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error in one line (exit code 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


# -- formatting ------------------------------------------------------------------


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def iso(at: datetime | None) -> str:
    """Format an aware datetime as ISO-8601 UTC to the second ("2027-01-15T08:00:00Z"); "-" for None."""
    if at is None:
        return "-"
    return at.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def human_duration(seconds: float) -> str:
    """Format a non-negative span: "250ms", "45s", "3m 12s", "2h 5m", "1d 3h"."""
    if seconds < 1:
        return f"{int(seconds * 1000)}ms"
    whole = int(seconds)
    parts = [(whole // 86_400, "d"), (whole % 86_400 // 3_600, "h"), (whole % 3_600 // 60, "m"), (whole % 60, "s")]
    while parts[0][0] == 0:
        parts.pop(0)
    return " ".join(f"{n}{unit}" for n, unit in parts[:2] if n or unit == parts[0][1])


def relative(at: datetime, now: datetime) -> str:
    """Say when `at` is seen from `now`: "in 3m 12s", "3s ago", "now"."""
    delta = (at - now).total_seconds()
    if abs(delta) < 0.001:
        return "now"
    return f"in {human_duration(delta)}" if delta > 0 else f"{human_duration(-delta)} ago"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=True)]
    lines = [
        "  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]
    return "\n".join(lines)


def _clock_time(at: datetime) -> str:
    """The UTC time of day: "08:11:00", or "08:11:00.250" off the whole second."""
    at = at.astimezone(timezone.utc)
    return at.strftime("%H:%M:%S") + (f".{at.microsecond // 1000:03d}" if at.microsecond else "")


def job_state(job: Job) -> str:
    """Say where a job stands: "scheduled", "paused", "running, paused", "finished", "..., run-now pending"."""
    words = [job.state.value]
    if job.paused and job.state != JobState.PAUSED:
        words.append("paused")  # its last run is still finishing (JobState)
    if job.run_now_requested:
        words.append("run-now pending")
    return ", ".join(words)


def _waits(job: Job) -> bool:
    """False when `next_run_at` is not a run to come: paused (resume moves it) or finished."""
    return not job.paused and job.state != JobState.FINISHED


def jobs_table(jobs: Sequence[Job], now: datetime) -> str:
    """The `persched jobs` table."""
    header = ("ID", "TARGET", "SCHEDULE", "NEXT RUN (UTC)", "WHEN", "STATE", "LAST", "RUNS", "ERRORS")
    rows = [
        (
            job.job_id,
            job.target,
            job.schedule,
            iso(job.next_run_at) if _waits(job) else "-",
            relative(job.next_run_at, now) if _waits(job) else "-",
            job_state(job),
            job.last_outcome or "-",
            str(job.run_count),
            str(job.error_count),
        )
        for job in jobs
    ]
    return _table(header, rows)


_DEFAULTS: Final = {name: field.default for name, field in Job.model_fields.items()}


def policies(job: Job) -> list[tuple[str, str]]:
    """The `show` lines, as (name, value), of each policy that differs from its default (SPEC-policies)."""
    lines: list[tuple[str, str]] = []
    if job.recurrence != _DEFAULTS["recurrence"]:
        lines.append(("recurrence", f"{job.recurrence} (one interval after the previous run ends; no grid)"))
    if job.misfire == "skip":
        lines.append(("misfire", "skip (missed slots are dropped and recorded as missed)"))
    elif job.misfire == "catch_up":
        lines.append(
            (
                "misfire",
                f"catch_up, at most {job.max_catch_up} (the most recent missed slots run, oldest first;"
                " older ones are dropped and recorded as missed)",
            )
        )
    if job.grace_seconds != _DEFAULTS["grace_seconds"]:
        lines.append(
            ("grace", f"{describe_duration(micros(job.grace_seconds))} (a slot not started by then is missed)")
        )
    if job.overlap != _DEFAULTS["overlap"]:
        lines.append(("overlap", f"{job.overlap} (slots passing while a run is in flight are dropped as missed)"))
    if job.jitter_seconds != _DEFAULTS["jitter_seconds"]:
        lines.append(
            ("jitter", f"each run starts up to {describe_duration(micros(job.jitter_seconds))} after its slot")
        )
    window = []
    if job.start_at is not None:
        window.append(f"from {iso(job.start_at)}")
    if job.end_at is not None:
        window.append(f"until {iso(job.end_at)}, then finished")
    if window:
        lines.append(("window", " ".join(window)))
    if job.max_runtime_seconds is not None:
        lines.append(
            (
                "max runtime",
                f"{describe_duration(micros(job.max_runtime_seconds))} (a longer run is reported as overran)",
            )
        )
    return lines


def _error_summary(error: str | None) -> str:
    if not error:
        return ""
    lines = [line.strip() for line in error.strip().splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    return last if len(last) <= ERROR_COLUMN else last[: ERROR_COLUMN - 3] + "..."


def missed_slots(run: Run) -> str:
    """Say what a "missed" record stands for: "missed 12 slots", then its first and last slot joined by RANGE."""
    count = run.missed_count
    slots = "every slot" if count is None else "1 slot" if count == 1 else f"{count} slots"
    first, last = run.scheduled_for, run.missed_until
    if last is None or last == first:
        span = _clock_time(first)
    elif first.astimezone(timezone.utc).date() == last.astimezone(timezone.utc).date():
        span = f"{_clock_time(first)}{RANGE}{_clock_time(last)}"  # the date is in SCHEDULED FOR
    else:
        span = f"{iso(first)}{RANGE}{iso(last)}"
    return f"missed {slots} {span}"


def run_outcome(run: Run) -> str:
    """The OUTCOME cell: "ok", "running", "error, overran", "ok, run-now", "missed 3 slots ..."."""
    words = [missed_slots(run) if run.outcome == "missed" else run.outcome or "running"]
    if run.overran:
        words.append("overran")
    if run.run_now:
        words.append("run-now")
    return ", ".join(words)


def runs_table(runs: Sequence[Run], *, with_job: bool = True) -> str:
    """The `persched runs` table (newest first)."""
    header = ["RUN", "JOB", "GEN", "SCHEDULED FOR (UTC)", "STARTED (UTC)", "DURATION", "OUTCOME", "INSTANCE", "ERROR"]
    rows = []
    for run in runs:
        duration = (
            "-"
            if run.finished_at is None or run.outcome == "missed"
            else human_duration((run.finished_at - run.started_at).total_seconds())
        )
        row = [
            str(run.run_id),
            run.job_id,
            str(run.generation),
            iso(run.scheduled_for),
            iso(run.started_at),
            duration,
            run_outcome(run),
            run.instance_id or "-",
            _error_summary(run.error),
        ]
        rows.append(row if with_job else row[:1] + row[2:])
    if not with_job:
        header.remove("JOB")
    return _table(header, rows)


def _json(value: object) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


def _say(text: str = "") -> None:
    print(text, flush=True)  # noqa: T201 - the command line talks to a person


# -- database access --------------------------------------------------------------


def open_existing(db: str, namespace: str = DEFAULT_NAMESPACE) -> Store:
    """Open a store that must already exist at the head schema; never creates or migrates.

    Raises:
        StoreError: Missing database file, no or an older persched schema, unusable database.
        SchemaVersionError: The schema is newer than this persched.
    """
    engine = _db.make_engine(db, create=False)
    try:
        _migrate.check_at_head(engine)
    except BaseException:
        engine.dispose()
        raise
    return Store(engine, _db.mask(engine.url), namespace=namespace)


def _now() -> Instant:
    return Instant(SystemClock().now_us())


def _with_store(args: argparse.Namespace, body: Callable[[Store], int]) -> int:
    store = open_existing(args.db, args.namespace)
    try:
        return body(store)
    finally:
        store.engine.dispose()


def _require_job_id(job_id: str) -> str:
    try:
        return validate_job_id(job_id)
    except PerschedError as exc:
        raise CliError(f"bad job id: {exc}") from exc


def _missing_job(store: Store, job_id: str) -> CliError:
    if store.job_known(job_id):
        return CliError(f"job {job_id!r} is not active (it was descheduled); see `persched runs {job_id}`")
    return CliError(f"no job {job_id!r} in {store.url}; `persched jobs` lists the active ones")


# -- commands ------------------------------------------------------------------------


def _cmd_migrate(args: argparse.Namespace) -> int:
    engine = _db.make_engine(args.db)
    try:
        before = _migrate.current_revision(engine)
        _migrate.upgrade(engine)
        url = _db.mask(engine.url)
    finally:
        engine.dispose()
    if before == _migrate.HEAD:
        _say(f"{url}: schema already at revision {_migrate.HEAD}")
    else:
        _say(f"{url}: schema upgraded from {before or 'empty'} to revision {_migrate.HEAD}")
    return EXIT_OK


def _cmd_jobs(args: argparse.Namespace) -> int:
    def body(store: Store) -> int:
        jobs = store.list_jobs()
        if args.json:
            _say(_json([job.model_dump(mode="json") for job in jobs]))
        elif not jobs:
            _say(f"no active jobs in {store.url}")
        else:
            _say(jobs_table(jobs, datetime.now(timezone.utc)))
        return EXIT_OK

    return _with_store(args, body)


def _cmd_show(args: argparse.Namespace) -> int:
    job_id = _require_job_id(args.job_id)

    def body(store: Store) -> int:
        job = store.get_job(job_id)
        if job is None:
            raise _missing_job(store, job_id)
        runs = store.list_runs(job_id, args.limit)
        if args.json:
            _say(_json({**job.model_dump(mode="json"), "runs": [run.model_dump(mode="json") for run in runs]}))
            return EXIT_OK
        now = datetime.now(timezone.utc)
        fields = [
            ("job", job.job_id),
            ("target", job.target),
            ("args", json.dumps(list(job.args))),
            ("kwargs", json.dumps(job.kwargs, sort_keys=True)),
            ("schedule", _schedule_words(job)),
            *policies(job),
            ("next run", _next_run_words(job, now)),
            ("state", job_state(job) + (f" on {job.owner}, lease until {iso(job.lease_until)}" if job.owner else "")),
            ("generation", str(job.generation)),
            ("runs", f"{job.run_count} ({job.error_count} errors), last outcome {job.last_outcome or '-'}"),
            ("created", iso(job.created_at)),
            ("updated", iso(job.updated_at)),
        ]
        width = max(len(name) for name, _ in fields)
        for name, value in fields:
            _say(f"{name.ljust(width)}  {value}")
        _say()
        if runs:
            _say(f"latest {len(runs)} runs, newest first:")
            _say(runs_table(runs, with_job=False))
        else:
            _say("no runs recorded yet")
        return EXIT_OK

    return _with_store(args, body)


def _schedule_words(job: Job) -> str:
    words = job.schedule
    if job.interval_seconds is not None and f"{job.interval_seconds:g} s" not in words:
        words += f" ({job.interval_seconds:g} s)"
    elif job.cron is not None and job.timezone == "UTC":
        words += " (UTC)"  # Job.schedule names the zone only when it is not UTC
    return words


def _next_run_words(job: Job, now: datetime) -> str:
    if job.state == JobState.FINISHED:
        return "- (finished: its window ended; no run starts again)"
    if job.paused:
        return f"- (paused: `persched resume {job.job_id}` continues on the schedule from then)"
    return f"{iso(job.next_run_at)} ({relative(job.next_run_at, now)})"


def _cmd_runs(args: argparse.Namespace) -> int:
    job_id = None if args.job_id is None else _require_job_id(args.job_id)

    def body(store: Store) -> int:
        runs = store.list_runs(job_id, args.limit)
        if not runs and job_id is not None and not store.job_known(job_id):
            raise _missing_job(store, job_id)
        if args.json:
            _say(_json([run.model_dump(mode="json") for run in runs]))
        elif not runs:
            _say("no runs recorded" + ("" if job_id is None else f" for {job_id!r}"))
        else:
            _say(runs_table(runs))
        return EXIT_OK

    return _with_store(args, body)


def _cmd_deschedule(args: argparse.Namespace) -> int:
    job_id = _require_job_id(args.job_id)

    def body(store: Store) -> int:
        generation = store.deschedule_job_generation(job_id, _now())
        if generation is None:
            raise _missing_job(store, job_id)
        _say(f"descheduled {job_id!r} (generation {generation}); a run already in flight may still finish")
        return EXIT_OK

    return _with_store(args, body)


def _cmd_pause(args: argparse.Namespace) -> int:
    job_id = _require_job_id(args.job_id)

    def body(store: Store) -> int:
        generation = store.pause_job(job_id, _now())
        if generation is not None:
            _say(
                f"paused {job_id!r} (generation {generation}); a run already in flight may still finish;"
                f" `persched resume {job_id}` continues it"
            )
            return EXIT_OK
        job = store.get_job(job_id)
        if job is None:
            raise _missing_job(store, job_id)
        if job.paused:
            _say(f"{job_id!r} is already paused; nothing changed")
        elif job.state == JobState.FINISHED:
            _say(f"{job_id!r} is finished (its window ended) and never runs again; nothing to pause")
        else:  # changed by someone else meanwhile
            _say(f"{job_id!r} is {job_state(job)}; nothing changed")
        return EXIT_OK

    return _with_store(args, body)


def _cmd_resume(args: argparse.Namespace) -> int:
    job_id = _require_job_id(args.job_id)

    def body(store: Store) -> int:
        resumed = store.resume_job(job_id, _now())
        if resumed is None:
            job = store.get_job(job_id)
            if job is None:
                raise _missing_job(store, job_id)
            _say(f"{job_id!r} is not paused (it is {job_state(job)}); nothing changed")
            return EXIT_OK
        generation, _ = resumed
        job = store.get_job(job_id)
        if job is not None and job.state == JobState.FINISHED:
            _say(f"resumed {job_id!r} (generation {generation}); its window has ended, so it is finished")
        else:
            _say(f"resumed {job_id!r} (generation {generation}); slots passed while paused do not run")
        return EXIT_OK

    return _with_store(args, body)


def _cmd_run_now(args: argparse.Namespace) -> int:
    job_id = _require_job_id(args.job_id)

    def body(store: Store) -> int:
        verdict, generation = store.request_run_now(job_id, _now())
        if verdict == "unknown":
            raise _missing_job(store, job_id)
        if verdict == "paused":
            raise CliError(f"job {job_id!r} is paused: no run starts; `persched resume {job_id}` first")
        if verdict == "finished":
            raise CliError(f"job {job_id!r} is finished (its window ended): no run starts again")
        if verdict == "dropped":
            raise CliError(
                f"job {job_id!r} is running and its overlap policy is 'skip': the extra run was dropped;"
                " ask again once the run ended"
            )
        if verdict == "pending":
            _say(f"a run-now of {job_id!r} is already pending; nothing added")
        else:
            _say(
                f"run-now requested for {job_id!r} (generation {generation}): one extra run as soon as a"
                " scheduler on this database has a worker free; its schedule does not move"
            )
        return EXIT_OK

    return _with_store(args, body)


def _cmd_demo(args: argparse.Namespace) -> int:
    demo = importlib.import_module("persched._demo")
    result = demo.main(args.db)
    return int(result or EXIT_OK)


def _import_module(name: str) -> ModuleType:
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m` does, so a local module imports
    try:
        return importlib.import_module(name)
    except Exception as exc:
        raise CliError(f"cannot import module {name!r}: {type(exc).__name__}: {_one_line(exc)}") from exc


def _cmd_run(args: argparse.Namespace) -> int:
    module = _import_module(args.module)
    scheduler = JobScheduler(args.db, workers=args.workers, namespace=args.namespace)
    stop = threading.Event()
    received: list[int] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        # Only set the event (STYLE §5); the main thread logs and shuts down.
        if stop.is_set():
            os.write(2, b"persched: second signal: exiting now, in-flight runs are abandoned\n")
            os._exit(128 + signum)
        received.append(signum)
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        try:
            scheduler.start()
            setup = getattr(module, SETUP_HOOK, None)
            if callable(setup):
                try:
                    specs = setup(scheduler)
                    if specs is not None:  # issue 16: the module's declared set, reconciled
                        scheduler.declare(specs, prune=True)
                except PerschedError:
                    raise
                except Exception as exc:
                    raise CliError(
                        f"{args.module}.{SETUP_HOOK}() raised {type(exc).__name__}: {_one_line(exc)}"
                    ) from exc
        except BaseException:
            scheduler.shutdown(wait=True)
            raise
        logger.info(
            "persched running %d jobs from %s with %d workers; SIGINT or SIGTERM stops it",
            len(scheduler.jobs()),
            args.module,
            args.workers,
        )
        # A timed wait keeps the main thread responsive to signals everywhere.
        while not stop.wait(1.0):
            pass
        name = signal.Signals(received[0]).name if received else "signal"
        logger.info("%s received: shutting down, in-flight runs finish (send it again to force exit)", name)
        scheduler.shutdown(wait=True)
        logger.info("persched stopped")
        return EXIT_OK
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


# -- parser ----------------------------------------------------------------------------


def _example(text: str) -> str:
    return "example:\n" + textwrap.indent(textwrap.dedent(text).strip(), "  ") + "\n"


def build_parser() -> argparse.ArgumentParser:
    """Build the argument parser (exposed for documentation and tests)."""
    common = _Parser(add_help=False)
    # SUPPRESS: a value given before the command is not reset by the subparser.
    common.add_argument(
        "--db",
        default=argparse.SUPPRESS,
        metavar="URL",
        help=f"SQLAlchemy URL or SQLite file path (default: ${ENV_DB} or {DEFAULT_DB})",
    )
    common.add_argument(
        "--namespace",
        default=argparse.SUPPRESS,
        metavar="NAME",
        help=f"the application whose jobs to see and run (default: ${ENV_NAMESPACE} or {DEFAULT_NAMESPACE})",
    )
    common.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks and DEBUG logging"
    )
    common.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help="INFO logging")

    parser = _Parser(
        prog="persched",
        description="Run callables at fixed intervals or on cron expressions; every schedule lives in SQL.",
        epilog=textwrap.dedent(
            """\
            exit codes: 0 ok, 1 error (one line on stderr), 2 usage, 130 interrupted;
            `run` exits 0 after a graceful stop, 128+N when a second signal N forces it.

            example:
              persched --db sqlite:///jobs.db jobs"""
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[common],
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=_Parser)

    def command(
        name: str, summary: str, example: str, func: Callable[[argparse.Namespace], int], details: str = ""
    ) -> _Parser:
        sub: _Parser = commands.add_parser(
            name,
            help=summary,
            description=summary,
            epilog=(textwrap.fill(details, 79) + "\n\n" if details else "") + _example(example),
            formatter_class=argparse.RawDescriptionHelpFormatter,
            parents=[common],
        )
        sub.set_defaults(func=func)
        return sub

    command(
        "demo",
        "schedule a few jobs, show them run, restart, show they resume (ends by itself)",
        "persched --db /tmp/demo.db demo",
        _cmd_demo,
    )
    command(
        "migrate",
        "create the database if needed and upgrade its schema to the newest revision",
        "persched --db postgresql+psycopg://app@db/app migrate",
        _cmd_migrate,
    )
    sub = command(
        "jobs",
        "list every job not descheduled (scheduled, running, paused, finished) with its schedule (read-only)",
        "persched --db jobs.db jobs --json",
        _cmd_jobs,
    )
    sub.add_argument("--json", action="store_true", help="print a JSON array of jobs (Job field names)")
    sub = command(
        "show",
        "show one job, its schedule, the policies that differ from the defaults and its latest runs (read-only)",
        "persched show report --limit 5",
        _cmd_show,
    )
    sub.add_argument("job_id", metavar="JOB_ID")
    sub.add_argument("--limit", type=_positive_int, default=SHOW_RUNS, metavar="N", help=f"runs to show ({SHOW_RUNS})")
    sub.add_argument("--json", action="store_true", help="print the job as a JSON object with a 'runs' array")
    sub = command("runs", "list recorded runs, newest first (read-only)", "persched runs report --limit 20", _cmd_runs)
    sub.add_argument("job_id", metavar="JOB_ID", nargs="?", help="only this job's runs")
    sub.add_argument("--limit", type=_positive_int, default=100, metavar="N", help="runs to show (100)")
    sub.add_argument("--json", action="store_true", help="print a JSON array of runs (Run field names)")
    sub = command(
        "deschedule",
        "remove a job: its current definition never starts again, in any process",
        "persched deschedule report",
        _cmd_deschedule,
    )
    sub.add_argument("job_id", metavar="JOB_ID")
    sub = command(
        "pause",
        "pause a job: it keeps its definition and history and starts no run until resumed, in any process",
        "persched pause report",
        _cmd_pause,
        "A run already in flight may finish. Pausing a job that is already paused, or finished, changes"
        " nothing, says so and exits 0; an unknown or descheduled job exits 1 (as for deschedule).",
    )
    sub.add_argument("job_id", metavar="JOB_ID")
    sub = command(
        "resume",
        "resume a paused job on its schedule from now (slots passed while paused do not run)",
        "persched resume report",
        _cmd_resume,
        "Resuming a job that is not paused changes nothing, says so and exits 0; an unknown or"
        " descheduled job exits 1 (as for deschedule).",
    )
    sub.add_argument("job_id", metavar="JOB_ID")
    sub = command(
        "run-now",
        "ask for one extra run of a job as soon as a worker is free, without moving its schedule",
        "persched run-now report",
        _cmd_run_now,
        "The run obeys the job's overlap policy and starts in whichever scheduler runs on this"
        " database. Exits 0 once a run is pending (asking again adds nothing); exits 1 with one line"
        " on stderr when the job is paused, finished, unknown or descheduled, or when it is running"
        " with overlap 'skip' (the request is dropped).",
    )
    sub.add_argument("job_id", metavar="JOB_ID")
    sub = command(
        "run",
        f"import MODULE, start a scheduler and run until SIGINT/SIGTERM; if MODULE defines "
        f"{SETUP_HOOK}(scheduler) it is called with the started scheduler; if that returns JobSpec "
        "values, they are declared with prune (see README, declarative schedules)",
        "persched --db jobs.db run --import myapp.schedules --workers 4",
        _cmd_run,
    )
    sub.add_argument("--import", dest="module", required=True, metavar="MODULE", help="dotted module name")
    sub.add_argument("--workers", type=_positive_int, default=8, metavar="N", help="worker threads (8)")
    return parser


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _configure_logging(args: argparse.Namespace) -> None:
    if args.debug:
        level = logging.DEBUG
    elif args.verbose or args.command == "run":
        level = logging.INFO
    else:
        level = logging.WARNING
    handler = logging.StreamHandler(sys.stderr)
    formatter = logging.Formatter(
        "%(asctime)s.%(msecs)03dZ %(levelname)-7s %(name)s [%(threadName)s] %(message)s", "%Y-%m-%dT%H:%M:%S"
    )
    formatter.converter = time.gmtime
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(level)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code (see the module docstring).

    Args:
        argv: The arguments after the program name; default ``sys.argv[1:]``.
    """
    args = build_parser().parse_args(argv)
    for name, default in (("debug", False), ("verbose", False)):
        if not hasattr(args, name):
            setattr(args, name, default)
    if not hasattr(args, "db"):
        args.db = os.environ.get(ENV_DB) or DEFAULT_DB
    if not hasattr(args, "namespace"):
        args.namespace = os.environ.get(ENV_NAMESPACE) or DEFAULT_NAMESPACE
    try:
        validate_namespace(args.namespace)
    except PerschedError as exc:
        sys.stderr.write(f"persched: error: bad --namespace: {_one_line(exc)}\n")
        return EXIT_ERROR
    _configure_logging(args)
    try:
        result: int = args.func(args)
    except (CliError, PerschedError) as exc:
        if args.debug:
            traceback.print_exc()
        sys.stderr.write(f"persched: error: {_one_line(exc)}\n")
        return EXIT_ERROR
    except KeyboardInterrupt:
        sys.stderr.write("persched: interrupted\n")
        return EXIT_INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - a user sees one line; --debug shows the traceback
        if args.debug:
            traceback.print_exc()
        sys.stderr.write(
            f"persched: error: unexpected {type(exc).__name__}: {_one_line(exc)} (rerun with --debug for details)\n"
        )
        return EXIT_ERROR
    return result
