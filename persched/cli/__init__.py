"""The ``persched`` command line: inspect and steer schedules from outside the process.

Commands (``persched COMMAND --help`` shows each with an example)::

    persched demo                        # a self-contained tour; ends by itself
    persched migrate                     # create the database / upgrade its schema
    persched jobs [--json] [--all-namespaces]   # every job not descheduled, its schedule and state
    persched show JOB_ID [--json]        # one job, its policies and its latest runs
    persched runs [JOB_ID] [--limit N] [--json] [--all-namespaces]
    persched deschedule JOB_ID
    persched pause JOB_ID                # no run starts until resumed
    persched resume JOB_ID               # continue on the schedule from now
    persched run-now JOB_ID              # one extra run as soon as a worker is free
    persched run MODULE [--workers N] [--allow PKG ... | --allow-any-module] [--metrics-port N]
                                         # (`--import MODULE` names the module too)
    persched web [--port N] [--token-file PATH] [--allowed-host NAME ...]   # a dashboard in the browser

The database comes from ``--db URL`` (before or after the command), else the
``PERSCHED_DB`` environment variable, else ``persched.db`` in the current
directory; the namespace from ``--namespace NAME``, else ``PERSCHED_NAMESPACE``,
else "default". ``--json`` may come before the command too; ``--version``
prints the version. A listing of a namespace without jobs says which
namespaces have some; an unknown job id is reported with the namespace that
holds it, or a near miss ("did you mean 'report'?").

``jobs``, ``show`` and ``runs`` never create a database and never change its
schema; ``pause``, ``resume``, ``run-now`` and ``deschedule`` write one row
and never migrate; a scheduler running on the database picks the change up
(within its ``pickup_seconds``, 1 s by default).

One rule for the verbs: a command exits 0 when the job ends up as asked,
also when it already was (``pause`` of a paused job, ``resume`` of a job that
is not paused, ``deschedule`` of a descheduled job, a second ``run-now``: each
says "nothing changed"); it exits 1 when it cannot be done: the job is
unknown (or, for ``pause``, ``resume`` and ``run-now``, descheduled), or
``run-now`` of a paused or finished job, or dropped by overlap "skip".

Exit codes: 0 success; 1 an error (that rule, an unusable database, schema
from a newer persched, a module that does not import); 2 bad usage; 130
interrupted (Ctrl-C during a read command); 141 (128 + SIGPIPE) when the
reader of the output went away (``persched runs | head -1``), quietly. ``persched run`` exits 0 after a graceful
stop on SIGINT/SIGTERM, and 128 + the signal number when a second signal
forces it out. Errors are one line on stderr; ``--debug`` adds the traceback
and DEBUG logging.

This module parses, calls into persched and prints; it holds no SQL and
starts no threads of its own (``run`` starts a `JobScheduler`).
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import json
import logging
import os
import shlex
import shutil
import signal
import sys
import textwrap
import threading
import time
import traceback
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Final, NoReturn

# Only what the read commands need: Alembic (`_migrate`), pydantic (`--json`)
# and the scheduler are imported by the commands that use them (start-up time,
# issue 15); the commands read rows as plain dataclasses (`_plain_models`).
from .. import __version__, _db
from .._config import DEFAULT_WORKERS
from .._existing import open_existing
from .._instant import Instant, micros
from .._liveness import display_id
from .._models import DEFAULT_NAMESPACE, OPTIONS, JobState, validate_job_id, validate_namespace
from .._present import human_duration, iso, job_state, plural, relative, run_outcome
from .._signals import StopSignals
from .._store import RunNowVerdict, Store
from .._store.mappers import plain_job, plain_run
from .._triggers import describe_duration
from .._views import all_jobs_as, all_runs_as, job_ids, namespace_counts, namespaces_of, whereabouts
from ..clock import SystemClock
from ..errors import JobNotFoundError, PerschedError

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from types import ModuleType

    from .._plain_models import PlainJob, PlainRun
    from .._scheduler import JobScheduler
    from .._web_server import Server

__all__ = ["EXIT_ERROR", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_PIPE", "EXIT_USAGE", "main"]

logger = logging.getLogger(__name__)

EXIT_OK: Final = 0
EXIT_ERROR: Final = 1  # a user error: unknown job, unusable database, newer schema, bad module
EXIT_USAGE: Final = 2  # bad command-line usage (argparse's convention)
EXIT_INTERRUPTED: Final = 130  # Ctrl-C during a read command (128 + SIGINT)
EXIT_PIPE: Final = 141  # the reader of stdout went away (128 + SIGPIPE), as `cat` or `yes` would

DEFAULT_DB: Final = "persched.db"
ENV_DB: Final = "PERSCHED_DB"
ENV_NAMESPACE: Final = "PERSCHED_NAMESPACE"
SETUP_HOOK: Final = "persched_setup"  # `run --import`: called with the started scheduler
MAX_CLI_INT: Final = 2**31 - 1  # --limit, --workers: what a SQL LIMIT takes everywhere
SHOW_RUNS: Final = 10  # runs listed by `show` unless --limit says otherwise
ERROR_COLUMN: Final = 60  # characters of error text in a runs table


class CliError(Exception):
    """A user error: printed as one line, exit code 1."""


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error in one line (exit code 2); `commands` holds the subcommands' parsers."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # noqa: ANN401 - argparse's own parameters
        super().__init__(*args, **kwargs)
        self.commands: dict[str, _Parser] = {}

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {_printable(message)} (see {self.prog} --help)\n")


# -- formatting ------------------------------------------------------------------


def _printable(text: str) -> str:
    # argv may hold lone surrogates (undecodable bytes): show them escaped, on any stream.
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _one_line(text: object) -> str:
    return _printable(" ".join(str(text).split()))


_SECOND: Final = timedelta(seconds=1)
ELLIPSIS: Final = "\u2026"  # marks a cell cut to fit the terminal


@dataclass(frozen=True)
class Column:
    """A table column: its header, and how it gives way when the table is too wide.

    `drop` ranks the columns that may be left out (1 goes first); `shrink` is
    the narrowest a column may be cut to (the end of a cut cell is ELLIPSIS).
    A column with neither is always shown in full (ids, counts).
    """

    header: str
    drop: int | None = None
    shrink: int | None = None


def _table(columns: Sequence[Column | str], rows: Sequence[Sequence[str]], width: int | None = None) -> str:
    """Align `rows` under `columns`; with `width`, fit it: cut the shrinkable
    columns first, then leave out droppable ones, least useful first."""
    specs = [Column(c) if isinstance(c, str) else c for c in columns]
    natural = [max(len(str(cell)) for cell in column) for column in zip([c.header for c in specs], *rows, strict=True)]
    shown = list(range(len(specs)))
    widths = list(natural)
    if width is not None:
        droppable = sorted((c.drop, i) for i, c in enumerate(specs) if c.drop is not None)
        while True:
            widths = list(natural)
            excess = sum(widths[i] for i in shown) + 2 * (len(shown) - 1) - width
            # Cut the widest shrinkable column one character at a time: the cut is shared fairly.
            while excess > 0:
                room = [(widths[i] - (specs[i].shrink or 0), i) for i in shown if specs[i].shrink is not None]
                best = max(room, default=(0, -1))
                if best[0] <= 0:
                    break
                widths[best[1]] -= 1
                excess -= 1
            if excess <= 0 or not droppable:
                break
            shown.remove(droppable.pop(0)[1])

    def cell(text: object, i: int) -> str:
        text = str(text)
        if len(text) > widths[i]:
            text = text[: widths[i] - 1] + ELLIPSIS
        return text.ljust(widths[i])

    lines = ["  ".join(cell(row[i], i) for i in shown).rstrip() for row in [[c.header for c in specs], *rows]]
    return "\n".join(lines)


def _running(job: PlainJob) -> bool:
    return job.state == JobState.RUNNING


def _waits(job: PlainJob) -> bool:
    """False when `next_run_at` is not a run to come: paused (resume moves it) or finished."""
    return not job.paused and job.state != JobState.FINISHED and job.unreadable is None


JOBS_COLUMNS: Final = (
    Column("ID"),
    Column("TARGET", drop=2, shrink=12),
    Column("SCHEDULE", shrink=14),
    Column("NEXT RUN (UTC)", drop=1),  # WHEN says the same, relative to now
    Column("WHEN"),
    Column("STATE", shrink=9),
    Column("LAST", drop=3),
    Column("RUNS"),
    Column("ERRORS"),
)


NAMESPACE_COLUMN: Final = Column("NAMESPACE", shrink=9)  # `--all-namespaces`: first, never left out


def jobs_table(
    jobs: Sequence[PlainJob],
    now: datetime,
    width: int | None = None,
    in_flight: Mapping[str, PlainRun] | None = None,
    *,
    namespaces: bool = False,
) -> str:
    """The `persched jobs` table, fitted to `width` columns when given.

    A job with a run in `in_flight` shows that run: its slot under NEXT RUN,
    "started 3s ago" under WHEN, and "running, run-now" when it is one.
    With `namespaces`, a NAMESPACE column comes first.
    """
    rows: list[tuple[str, ...]] = []
    for job in jobs:
        run = (in_flight or {}).get(job.job_id)
        if run is not None and run.generation == job.generation:
            at, when = iso(run.scheduled_for), "started " + relative(run.started_at, now)
            state = job_state(job) + (", run-now" if run.run_now else "")
        elif _waits(job):
            at, when, state = iso(job.next_run_at), relative(job.next_run_at, now), job_state(job)
        else:
            at, when, state = "-", "-", job_state(job)
        rows.append(
            (
                job.job_id,
                job.target,
                job.schedule,
                at,
                when,
                state,
                job.last_outcome or "-",
                str(job.run_count),
                str(job.error_count),
            )
        )
    if namespaces:
        rows = [(job.namespace, *row) for job, row in zip(jobs, rows, strict=True)]
        return _table((NAMESPACE_COLUMN, *JOBS_COLUMNS), rows, width)
    return _table(JOBS_COLUMNS, rows, width)


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


# The `show` lines of the options whose words take more than their own value (the others: Option.shown).
_SHOWN: Final = {"misfire": _misfire_line, "start_at": _window_line}


def policies(job: PlainJob) -> list[tuple[str, str]]:
    """The `show` lines, as (name, value), of each policy that differs from its default (SPEC-policies)."""
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


def _error_summary(error: str | None) -> str:
    if not error:
        return ""
    lines = [line.strip() for line in error.strip().splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    return last if len(last) <= ERROR_COLUMN else last[: ERROR_COLUMN - 1] + ELLIPSIS


RUNS_COLUMNS: Final = (
    Column("RUN"),
    Column("JOB", shrink=10),
    Column("GEN", drop=3),
    Column("SCHEDULED FOR (UTC)", drop=4),
    Column("STARTED (UTC)", drop=2),
    Column("DURATION"),
    Column("OUTCOME", shrink=12),
    Column("INSTANCE", drop=1, shrink=12),
    Column("ERROR", drop=5, shrink=12),
)


def runs_table(
    runs: Sequence[PlainRun],
    *,
    with_job: bool = True,
    width: int | None = None,
    namespaces: Mapping[str, str] | None = None,
) -> str:
    """The `persched runs` table (newest first), fitted to `width` columns when given.

    With `namespaces` (job id -> namespace), a NAMESPACE column comes first.
    """
    rows = []
    for run in runs:
        duration = (
            "-"
            if run.finished_at is None or run.outcome == "missed"
            else human_duration((run.finished_at - run.started_at) / _SECOND)
        )
        row = [
            str(run.run_id),
            run.job_id,
            str(run.generation),
            iso(run.scheduled_for),
            iso(run.started_at),
            duration,
            run_outcome(run),
            display_id(run.instance_id) if run.instance_id else "-",
            _error_summary(run.error),
        ]
        row = row if with_job else row[:1] + row[2:]
        rows.append(row if namespaces is None else [namespaces.get(run.job_id, "-"), *row])
    columns = [c for c in RUNS_COLUMNS if with_job or c.header != "JOB"]
    return _table(columns if namespaces is None else [NAMESPACE_COLUMN, *columns], rows, width)


def _json(value: object) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


def _job_json(job: PlainJob) -> dict[str, Any]:
    from .._models import Job  # pydantic: `--json` prints what the public model dumps, and only it needs it

    return Job.model_validate(job, from_attributes=True).model_dump(mode="json")


def _run_json(run: PlainRun) -> dict[str, Any]:
    from .._models import Run  # as in `_job_json`

    return Run.model_validate(run, from_attributes=True).model_dump(mode="json")


def _say(text: str = "") -> None:
    print(text, flush=True)  # noqa: T201 - the command line talks to a person


# -- database access --------------------------------------------------------------


def _now() -> Instant:
    return Instant(SystemClock().now_us())


def _with_store(args: argparse.Namespace, body: Callable[[Store], int], *, read_only: bool = False) -> int:
    store = open_existing(args.db, args.namespace, read_only=read_only)
    try:
        return body(store)
    finally:
        store.engine.dispose()


def _width(args: argparse.Namespace) -> int | None:
    """The width to fit a table to, or None for full output.

    ``--wide``: full. Else ``COLUMNS`` when it is set (a request for that
    width, also into a pipe), else the terminal's width when stdout is one.
    Output into a file or a pipe is never cut, so scripts see every cell.
    """
    if getattr(args, "wide", False):
        return None
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    if sys.stdout.isatty():
        return shutil.get_terminal_size().columns
    return None


def _require_job_id(job_id: str) -> str:
    try:
        return validate_job_id(job_id)
    except PerschedError as exc:
        raise CliError(f"bad job id: {exc}") from exc


# "did you mean" looks for a near miss among at most this many ids, else offers none: difflib takes
# about 0.1 ms per similar id (CPython's own suggestions stop at 750 names, for the same reason).
MAX_SUGGESTION_IDS: Final = 1000


def _missing_job(store: Store, job_id: str) -> JobNotFoundError:
    """The error for a job id that the chosen namespace does not have: where the job is, or a near miss."""
    found = whereabouts(store, job_id)
    if found is not None and found[0] != store.namespace and found[1]:
        owner = found[0]
        return JobNotFoundError(job_id, store.namespace, owner=owner, remedy=f"add --namespace {_shell_word(owner)}")
    if found == (store.namespace, False):
        return JobNotFoundError(
            job_id, store.namespace, descheduled=True, remedy=f"`persched runs {_shell_word(job_id)}` shows its history"
        )
    ids = job_ids(store, MAX_SUGGESTION_IDS + 1)
    near = difflib.get_close_matches(job_id, ids, n=1) if len(ids) <= MAX_SUGGESTION_IDS else []
    remedy = f"did you mean {near[0]!r}?" if near else "`persched jobs` lists its jobs"
    return JobNotFoundError(job_id, store.namespace, remedy=remedy)


def _shell_word(text: str) -> str:
    """`text` as one word a user can paste into a shell (quoted only when it needs to be)."""
    return shlex.quote(text)


MAX_NAMESPACES_NAMED: Final = 10  # namespaces listed by name when the chosen one is empty


def _other_namespaces(store: Store) -> list[str]:
    """When the chosen namespace has no job: lines that say which namespaces have jobs (none: no lines)."""
    counts = {name: sum(states.values()) for name, states in namespace_counts(store).items()}
    if not counts or store.namespace in counts:
        return []  # nothing anywhere, or the chosen namespace has jobs (just no runs yet)
    named = [f"{name} ({plural(count, 'job')})" for name, count in list(counts.items())[:MAX_NAMESPACES_NAMED]]
    if len(counts) > MAX_NAMESPACES_NAMED:
        named.append(f"and {len(counts) - MAX_NAMESPACES_NAMED} more")
    near = difflib.get_close_matches(store.namespace, list(counts), n=1)
    return [
        "namespaces with jobs: " + ", ".join(named),
        f"did you mean --namespace {_shell_word(near[0])}? (or --all-namespaces for all of them)"
        if near
        else "choose one with --namespace NAME, or all of them with --all-namespaces",
    ]


def _say_empty(store: Store, headline: str, *, json_output: bool) -> None:
    """Say that the chosen namespace has nothing to list, and where the jobs are if elsewhere.

    With `json_output` stdout carries only the JSON; the namespaces go to stderr as a note.
    """
    others = _other_namespaces(store)
    if json_output:
        if others:
            print(f"persched: note: namespace {store.namespace!r} has no jobs; {others[0]}", file=sys.stderr)  # noqa: T201
        return
    _say(f"{headline} in namespace {store.namespace!r} of {store.url}")
    for line in others:
        _say(line)


# -- commands ------------------------------------------------------------------------


def _cmd_migrate(args: argparse.Namespace) -> int:
    from .. import _migrate  # Alembic only where it is used

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
        jobs = all_jobs_as(store, plain_job) if args.all_namespaces else store.list_jobs_as(plain_job)
        if not jobs and args.all_namespaces:
            _say("[]" if args.json else f"no active jobs in {store.url}")
        elif not jobs:
            _say_empty(store, "no active jobs", json_output=args.json)
            if args.json:
                _say("[]")
        elif args.json:
            _say(_json([_job_json(job) for job in jobs]))  # a Job carries its namespace
        else:
            running = any(_running(job) for job in jobs)
            in_flight = {run.job_id: run for run in store.runs_in_flight_as(plain_run)} if running else {}
            now = datetime.now(timezone.utc)
            _say(jobs_table(jobs, now, _width(args), in_flight, namespaces=args.all_namespaces))
        return EXIT_OK

    return _with_store(args, body, read_only=True)


def _cmd_show(args: argparse.Namespace) -> int:
    job_id = _require_job_id(args.job_id)

    def body(store: Store) -> int:
        job = store.get_job_as(plain_job, job_id)
        if job is None:
            raise _missing_job(store, job_id)
        runs = store.list_runs_as(plain_run, job_id, args.limit)
        if args.json:
            _say(_json({**_job_json(job), "runs": [_run_json(run) for run in runs]}))
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
            ("state", job_state(job) + _owner_words(job)),
            ("generation", str(job.generation)),
            (
                "runs",
                f"{job.run_count} ({plural(job.error_count, 'error')}), last outcome {job.last_outcome or '-'}",
            ),
            ("created", iso(job.created_at)),
            ("updated", iso(job.updated_at)),
        ]
        indent = max(len(name) for name, _ in fields) + 2
        width = _width(args)
        for name, value in fields:
            line = f"{name.ljust(indent)}{value}"
            if width is not None and len(line) > width:
                # Wrap long values (policies, kwargs) under themselves rather than mid-word.
                line = textwrap.fill(
                    line, max(width, indent + 20), subsequent_indent=" " * indent, break_on_hyphens=False
                )
            _say(line)
        _say()
        if runs:
            _say("latest run:" if len(runs) == 1 else f"latest {len(runs)} runs, newest first:")
            _say(runs_table(runs, with_job=False, width=width))
        else:
            _say("no runs recorded yet")
        return EXIT_OK

    return _with_store(args, body, read_only=True)


def _owner_words(job: PlainJob) -> str:
    return f" on {display_id(job.owner)}, lease until {iso(job.lease_until)}" if job.owner else ""


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
    return f"{iso(job.next_run_at)} ({relative(job.next_run_at, now)})"


def _cmd_runs(args: argparse.Namespace) -> int:
    job_id = None if args.job_id is None else _require_job_id(args.job_id)
    if args.all_namespaces:
        return _with_store(args, lambda store: _all_runs(args, store, job_id), read_only=True)

    def body(store: Store) -> int:
        runs = store.list_runs_as(plain_run, job_id, args.limit)
        if not runs and job_id is not None and not store.job_known(job_id):
            raise _missing_job(store, job_id)
        if not runs and job_id is None:
            _say_empty(store, "no runs recorded", json_output=args.json)
        if args.json:
            _say(_json([_run_json(run) for run in runs]))
        elif runs:
            _say(runs_table(runs, width=_width(args)))
        elif job_id is not None:
            _say(f"no runs recorded for {job_id!r}")
        return EXIT_OK

    return _with_store(args, body, read_only=True)


def _all_runs(args: argparse.Namespace, store: Store, job_id: str | None) -> int:
    """`persched runs --all-namespaces`: the runs of every namespace, each with its job's namespace."""
    runs = all_runs_as(store, plain_run, job_id, args.limit)
    if not runs and job_id is not None and whereabouts(store, job_id) is None:
        raise CliError(f"no job {job_id!r} in any namespace of {store.url}; see `persched jobs --all-namespaces`")
    namespaces = namespaces_of(store, {run.job_id for run in runs})
    if args.json:
        _say(_json([{**_run_json(run), "namespace": namespaces.get(run.job_id)} for run in runs]))
    elif runs:
        _say(runs_table(runs, width=_width(args), namespaces=namespaces))
    else:
        _say("no runs recorded" + (f" in {store.url}" if job_id is None else f" for {job_id!r}"))
    return EXIT_OK


def _cmd_deschedule(args: argparse.Namespace) -> int:
    job_id = _require_job_id(args.job_id)

    def body(store: Store) -> int:
        generation = store.deschedule_job(job_id, _now())
        if generation is None:
            if store.job_known(job_id):
                # Already in the state asked for: a no-op, exit 0 (the same rule as pause and resume).
                _say(f"{job_id!r} is already descheduled; nothing changed")
                return EXIT_OK
            raise _missing_job(store, job_id)
        _say(f"descheduled {job_id!r} (generation {generation}); a run already in flight may still finish")
        _say(
            f"note: an application that declares {job_id!r} (in persched_setup or at its start-up)"
            " schedules it again when it next starts: remove it there too"
        )
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
        job = store.get_job_as(plain_job, job_id)
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
            job = store.get_job_as(plain_job, job_id)
            if job is None:
                raise _missing_job(store, job_id)
            _say(f"{job_id!r} is not paused (it is {job_state(job)}); nothing changed")
            return EXIT_OK
        generation, _ = resumed
        job = store.get_job_as(plain_job, job_id)
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
        if verdict is RunNowVerdict.UNKNOWN:
            raise _missing_job(store, job_id)
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
    # SPEC §4: never the database of --db or PERSCHED_DB; it only says so.
    result = demo.main(ignored=args.db_given)
    return int(result or EXIT_OK)


def _import_module(name: str) -> ModuleType:
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m` does, so a local module imports
    try:
        return importlib.import_module(name)
    except SystemExit as exc:  # a module that ends the process at import: say so, never exit silently
        raise CliError(f"cannot import module {name!r}: it called sys.exit({_one_line(exc.code)})") from exc
    except Exception as exc:
        raise CliError(f"cannot import module {name!r}: {type(exc).__name__}: {_one_line(exc)}") from exc


def run_allowed_modules(args: argparse.Namespace) -> list[str] | None:
    """The `allowed_modules` of `persched run`: the imported module's top-level package
    plus every ``--allow``, or None (anything importable) with ``--allow-any-module``.

    A row's target is whatever its last writer put there; by default a
    long-running `persched run` only runs code of the application it was
    started for (README, "Trust").
    """
    if args.allow_any_module:
        return None
    return [args.module.partition(".")[0], *args.allow]


def _cmd_run(args: argparse.Namespace) -> int:
    from .._scheduler import JobScheduler  # not needed by the read commands

    module = _import_module(args.module)
    scheduler = JobScheduler(
        args.db, workers=args.workers, allowed_modules=run_allowed_modules(args), namespace=args.namespace
    )

    def on_signal(signum: int) -> None:
        # No lock and no logging here (persched._signals); the main thread logs and shuts down.
        if stop.received:
            os.write(2, b"persched: second signal: exiting now, in-flight runs are abandoned\n")
            os._exit(128 + signum)

    stop = StopSignals(on_signal)
    with stop.installed():
        return _run_until_stopped(args, module, scheduler, stop)


def _run_until_stopped(args: argparse.Namespace, module: ModuleType, scheduler: JobScheduler, stop: StopSignals) -> int:
    """`persched run` from start() to a graceful shutdown at the first stop signal."""
    metrics_server = None
    try:
        try:
            if args.metrics_port is not None:
                metrics_server = _serve_metrics(scheduler, args)
            scheduler.start()
            setup = getattr(module, SETUP_HOOK, None)
            if callable(setup):
                try:
                    specs = setup(scheduler)
                    if specs is not None:  # issue 16: the module's declared set, reconciled
                        scheduler.declare(specs, prune=True)
                except PerschedError:
                    raise
                except (Exception, SystemExit) as exc:  # SystemExit too: never a silent exit
                    raise CliError(
                        f"{args.module}.{SETUP_HOOK}() raised {type(exc).__name__}: {_one_line(exc)}"
                    ) from exc
        except BaseException:
            scheduler.shutdown(wait=True)
            raise
        logger.info(
            "persched running %s from %s with %s; SIGINT or SIGTERM stops it",
            plural(len(scheduler.jobs()), "job"),
            args.module,
            plural(args.workers, "worker"),
        )
        # A timed wait keeps the main thread responsive to signals everywhere.
        while not stop.wait(1.0):
            pass
        name = signal.Signals(stop.received[0]).name if stop.received else "signal"
        logger.info("%s received: shutting down, in-flight runs finish (send it again to force exit)", name)
        scheduler.shutdown(wait=True)
        logger.info("persched stopped")
        _warn_of_lingering_threads(args.module)
        return EXIT_OK
    finally:
        if metrics_server is not None:
            metrics_server.shutdown()
            metrics_server.server_close()


def _warn_of_lingering_threads(module: str) -> None:
    """Name the non-daemon threads (the imported module's, say) that keep the process from exiting."""
    lingering = [
        t.name for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon and t.is_alive()
    ]
    if lingering:
        logger.warning(
            "threads started outside persched keep the process alive (%s; from %s?): a second SIGINT/SIGTERM ends it",
            ", ".join(lingering),
            module,
        )


def _serve_metrics(scheduler: JobScheduler, args: argparse.Namespace) -> Server:
    try:
        metrics = importlib.import_module("persched.metrics")  # the optional extra: only when asked for
    except ImportError as exc:
        raise CliError(f"--metrics-port: {exc}") from exc
    host, allowed = args.metrics_host, args.metrics_allowed_host
    server, _ = metrics.serve(scheduler, host, args.metrics_port, allowed_hosts=allowed)
    logger.info("metrics at http://%s:%d/metrics", host, server.server_port)
    return server  # type: ignore[no-any-return]  # imported by name


def _cmd_web(args: argparse.Namespace) -> int:
    web = importlib.import_module("persched._web")
    auth = importlib.import_module("persched._web_auth")
    token, warnings = auth.resolve_token(args.token, args.token_file, os.environ, web.ENV_TOKEN)
    for warning in warnings:
        logger.warning("web: %s", warning)
    limits = importlib.import_module("persched._web_server").Limits(
        read_timeout=args.read_timeout, max_connections=args.max_connections
    )
    web.serve(
        args.db,
        args.host,
        args.port,
        token,
        lambda url: _say(f"persched web: {url} (Ctrl-C stops it)"),
        namespace=args.namespace,
        allowed_hosts=args.allowed_host,
        limits=limits,
    )
    return EXIT_OK


# -- parser ----------------------------------------------------------------------------


def _example(text: str) -> str:
    return "example:\n" + textwrap.indent(textwrap.dedent(text).strip(), "  ") + "\n"


def build_parser() -> _Parser:
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
            exit codes: 0 ok (also when the job already was as asked), 1 error (one line
            on stderr), 2 usage, 130 interrupted, 141 output pipe closed (quietly);
            `run` exits 0 after a graceful stop, 128+N when a second signal N forces it.

            example:
              persched --db sqlite:///jobs.db jobs"""
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[common],
    )
    parser.add_argument("--version", action="version", version=f"persched {__version__}")
    # Before the command as after it, like --db; its own dest, or the command's default would reset it.
    parser.add_argument(
        "--json", dest="json_first", action="store_true", help=f"JSON output (of {', '.join(JSON_COMMANDS)})"
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
        parser.commands[name] = sub
        return sub

    command(
        "demo",
        "schedule a few jobs, show them run, restart, show they resume (ends by itself)",
        "persched demo",
        _cmd_demo,
        "The demo works on a new database of its own in a new temporary directory (it says where),"
        " never the one named by --db or PERSCHED_DB, so it can never change your jobs.",
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
    _add_all_namespaces(sub, "jobs")
    _add_wide(sub)
    sub = command(
        "show",
        "show one job, its schedule, the policies that differ from the defaults and its latest runs (read-only)",
        "persched show report --limit 5",
        _cmd_show,
    )
    sub.add_argument("job_id", metavar="JOB_ID")
    sub.add_argument("--limit", type=_positive_int, default=SHOW_RUNS, metavar="N", help=f"runs to show ({SHOW_RUNS})")
    sub.add_argument("--json", action="store_true", help="print the job as a JSON object with a 'runs' array")
    _add_wide(sub)
    sub = command("runs", "list recorded runs, newest first (read-only)", "persched runs report --limit 20", _cmd_runs)
    sub.add_argument("job_id", metavar="JOB_ID", nargs="?", help="only this job's runs")
    sub.add_argument("--limit", type=_positive_int, default=100, metavar="N", help="runs to show (100)")
    sub.add_argument("--json", action="store_true", help="print a JSON array of runs (Run field names)")
    _add_all_namespaces(sub, "runs")
    _add_wide(sub)
    sub = command(
        "deschedule",
        "remove a job: its current definition never starts again, in any process",
        "persched deschedule report",
        _cmd_deschedule,
        "Descheduling a job that is already descheduled changes nothing, says so and exits 0; an"
        " unknown job exits 1. An application that declares the job at its start-up (persched_setup)"
        " schedules it again when it next starts: remove the declaration too.",
    )
    sub.add_argument("job_id", metavar="JOB_ID")
    sub = command(
        "pause",
        "pause a job: it keeps its definition and history and starts no run until resumed, in any process",
        "persched pause report",
        _cmd_pause,
        "A run already in flight may finish. Pausing a job that is already paused, or finished, changes"
        " nothing, says so and exits 0; an unknown or descheduled job exits 1.",
    )
    sub.add_argument("job_id", metavar="JOB_ID")
    sub = command(
        "resume",
        "resume a paused job on its schedule from now (slots passed while paused do not run)",
        "persched resume report",
        _cmd_resume,
        "Resuming a job that is not paused changes nothing, says so and exits 0; an unknown or"
        " descheduled job exits 1.",
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
        "persched --db jobs.db run myapp.schedules --workers 4",
        _cmd_run,
    )
    sub.add_argument("module", nargs="?", metavar="MODULE", help="dotted module name (or give it as --import MODULE)")
    sub.add_argument("--import", dest="import_module", metavar="MODULE", help="the same as MODULE")
    workers_help = f"worker threads ({DEFAULT_WORKERS})"
    sub.add_argument("--workers", type=_positive_int, default=DEFAULT_WORKERS, metavar="N", help=workers_help)
    allow = sub.add_mutually_exclusive_group()
    allow.add_argument(
        "--allow",
        action="append",
        default=[],
        metavar="MODULE",
        help="also run callables defined in MODULE (or its submodules); repeatable "
        "(default: only MODULE's top-level package of --import)",
    )
    allow.add_argument(
        "--allow-any-module",
        action="store_true",
        help="run whatever callable a job's row names, from any importable module (trust every database writer)",
    )
    sub.add_argument(
        "--metrics-port", type=_port, metavar="N", help="serve Prometheus metrics on this port (persched[metrics])"
    )
    sub.add_argument("--metrics-host", default="127.0.0.1", metavar="HOST", help="address to bind (127.0.0.1)")
    _add_allowed_host(sub, "--metrics-allowed-host")
    sub = command(
        "web",
        "serve a dashboard of this database in the browser: jobs, runs, charts (read-only without --token)",
        "persched --db jobs.db --namespace web web --port 8765 --token-file ~/.persched-token",
        _cmd_web,
        "Never creates or migrates the database; works with or without a scheduler running on it."
        " With an access token (--token-file or $PERSCHED_WEB_TOKEN), a browser that signs in with it gets"
        " pause, resume, run-now and deschedule buttons; every action is logged.",
    )
    sub.add_argument("--port", type=_port, default=8765, metavar="N", help="port to listen on (8765; 0: any free)")
    sub.add_argument("--host", default="127.0.0.1", metavar="HOST", help="address to bind (127.0.0.1)")
    _add_allowed_host(sub, "--allowed-host")
    token = sub.add_mutually_exclusive_group()
    token.add_argument(
        "--token-file", metavar="PATH", help="file whose first line is the access token that enables the actions"
    )
    token.add_argument(
        "--token", metavar="TOKEN", help="the access token itself (visible in the process list: prefer the others)"
    )
    sub.add_argument(
        "--read-timeout", type=_seconds, default=10.0, metavar="S", help="seconds a client has to send its request (10)"
    )
    sub.add_argument(
        "--max-connections", type=_positive_int, default=256, metavar="N", help="connections read at once (256)"
    )
    return parser


def _add_allowed_host(sub: argparse.ArgumentParser, flag: str) -> None:
    sub.add_argument(
        flag,
        action="append",
        default=[],
        metavar="NAME",
        help="also answer requests for this Host (NAME or NAME:PORT; repeatable; '*': any, unsafe);"
        " by default only 127.0.0.1, localhost, [::1] and the bound address",
    )


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text[:40]!r}") from None
    if not 0 < value < 86_400:
        raise argparse.ArgumentTypeError(f"must be more than 0 and less than 86400, got {text[:40]}")
    return value


def _add_all_namespaces(sub: argparse.ArgumentParser, what: str) -> None:
    sub.add_argument(
        "--all-namespaces",
        action="store_true",
        help=f"list the {what} of every namespace, with a NAMESPACE column (--json: a 'namespace' key)",
    )


def _add_wide(sub: argparse.ArgumentParser) -> None:
    sub.add_argument(
        "--wide",
        action="store_true",
        help="never cut or leave out columns (default at a terminal or with COLUMNS set: fit its width)",
    )


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be 0..65535, got {value}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text[:40]!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    if value > MAX_CLI_INT:  # the API refuses it too (a SQL LIMIT, a thread count)
        raise argparse.ArgumentTypeError(f"must be at most {MAX_CLI_INT}, got {text[:40]}")
    return value


def _configure_logging(args: argparse.Namespace) -> None:
    if args.debug:
        level = logging.DEBUG
    elif args.verbose or args.command in ("run", "web"):
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


def _closed_pipe() -> int:
    """End quietly after the reader of stdout went away (SPEC §4)."""
    # Python flushes stdout again at exit and would complain on stderr;
    # point it at /dev/null first (the recipe in the `signal` docs).
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass  # stdout is not a real file (tests capturing it): nothing to flush at exit
    return EXIT_PIPE


JSON_COMMANDS: Final = ("jobs", "show", "runs")  # the commands that print --json


def _merge_early_options(parser: _Parser, args: argparse.Namespace) -> None:
    """Fold the options that may come before the command into the command's own (usage errors exit 2)."""
    if args.json_first:
        if args.command not in JSON_COMMANDS:
            parser.error(f"--json is an option of jobs, show and runs, not of {args.command}")
        args.json = True
    if args.command == "run":
        run = parser.commands["run"]
        if args.module is not None and args.import_module is not None:
            run.error("name the module once: `persched run MODULE` or `persched run --import MODULE`")
        args.module = args.module or args.import_module
        if args.module is None:
            run.error("which module? `persched run myapp.schedules` (or `--import myapp.schedules`)")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code (see the module docstring).

    Args:
        argv: The arguments after the program name; default ``sys.argv[1:]``.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    _merge_early_options(parser, args)
    for name, default in (("debug", False), ("verbose", False)):
        if not hasattr(args, name):
            setattr(args, name, default)
    args.db_given = "--db" if hasattr(args, "db") else ENV_DB if os.environ.get(ENV_DB) else None
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
    except BrokenPipeError:
        return _closed_pipe()
    except Exception as exc:  # noqa: BLE001 - a user sees one line; --debug shows the traceback
        if args.debug:
            traceback.print_exc()
        sys.stderr.write(
            f"persched: error: unexpected {type(exc).__name__}: {_one_line(exc)} (rerun with --debug for details)\n"
        )
        return EXIT_ERROR
    return result
