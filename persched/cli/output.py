"""What the commands print: lines, and tables fitted to the terminal's width.

Everything printed passes `printable`, so terminal escapes from the database or user code reach the
operator escaped (docs/operations.md#terminal-output); ``--json`` (`json_text`) keeps every value
exact. How a table is fitted: docs/explanation/interfaces.md, "Tables on a terminal".
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Final

from .._engine.liveness import display_id
from .._interfaces.present import human_duration, iso, job_state, relative, run_attempt, run_outcome
from .._model.models import JobState

if TYPE_CHECKING:
    import argparse
    from collections.abc import Iterator, Mapping, Sequence

    from .._model.plain_models import PlainJob, PlainRun

__all__ = [
    "NAMESPACE_COLUMN",
    "Column",
    "fit_table",
    "jobs_table",
    "json_text",
    "printable",
    "runs_table",
    "say",
    "table_width",
]

ERROR_COLUMN: Final = 60  # characters of error text in a runs table

# What a terminal acts on: C0 controls (ESC, BEL, CR, ...), DEL and C1 controls (U+009B is CSI).
_CONTROLS: Final = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_CONTROLS_BUT_LINES: Final = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # newline and tab kept
_NOT_JSON_ESCAPED: Final = re.compile(r"[\x7f-\x9f]")  # json.dumps escapes C0 itself


def _escape(match: re.Match[str]) -> str:
    return f"\\x{ord(match.group()):02x}"


def printable(text: str, *, lines: bool = False) -> str:
    """Return `text` safe on a terminal: control characters and lone surrogates as backslash escapes.

    With `lines`, newlines and tabs are kept.
    """
    text = (_CONTROLS_BUT_LINES if lines else _CONTROLS).sub(_escape, text)
    # argv may hold lone surrogates (undecodable bytes): escaped too, so any stream can print them.
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def json_text(value: object) -> str:
    """Return `value` as ``--json`` prints it: exact, with every control character a JSON escape."""
    text = json.dumps(value, indent=2, ensure_ascii=False)
    return _NOT_JSON_ESCAPED.sub(lambda match: f"\\u{ord(match.group()):04x}", text)


def say(text: str = "") -> None:
    """Print `text` for a person (or ``--json`` for a program), terminal escapes escaped."""
    print(printable(text, lines=True), flush=True)  # noqa: T201 - the command line talks to a person


def table_width(args: argparse.Namespace) -> int | None:
    """Return the width to fit a table to, or None for full output.

    ``--wide``: full; else ``COLUMNS`` if set (also into a pipe); else the terminal's width if stdout
    is one. A file or a pipe is never cut, so scripts see every cell.
    """
    if getattr(args, "wide", False):
        return None
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    if sys.stdout.isatty():
        return shutil.get_terminal_size().columns
    return None


_SECOND: Final = timedelta(seconds=1)
ELLIPSIS: Final = "\u2026"  # marks a cell cut to fit the terminal


@dataclass(frozen=True)
class Column:
    """A table column: its header, and how it gives way when the table is too wide.

    `drop` ranks the columns that may be left out (1 goes first); `shrink` is the narrowest a column
    may be cut to (ending in ELLIPSIS). An `own_line` column is narrowed last, down to its header,
    and never cut: a longer cell is printed whole on a line of its own, the row's other cells on the
    next. A column with none of these is always shown in full.
    """

    header: str
    drop: int | None = None
    shrink: int | None = None
    own_line: bool = False


@dataclass(frozen=True)
class Cell:
    """A cell with a short form, shown whole where its column is cut narrower than `text`."""

    text: str
    short: str

    def __str__(self) -> str:
        return self.text


def fit_table(columns: Sequence[Column | str], rows: Sequence[Sequence[str | Cell]], width: int | None = None) -> str:
    """Align `rows` under `columns`; with `width`, fit it: cut the shrinkable
    columns first, then leave out droppable ones, least useful first."""
    specs = [Column(c) if isinstance(c, str) else c for c in columns]
    # Escaped before measuring, so the columns line up as printed.
    rows = [[Cell(printable(c.text), printable(c.short)) if isinstance(c, Cell) else printable(c) for c in row]
            for row in rows]  # fmt: skip
    by_column = list(zip([c.header for c in specs], *rows, strict=True))
    natural = [max(len(str(cell)) for cell in column) for column in by_column]
    # A column is cut no narrower than its cells' short forms: those are shown whole.
    floors = [
        max([spec.shrink or 0] + [len(c.short) for c in column if isinstance(c, Cell)])
        for spec, column in zip(specs, by_column, strict=True)
    ]
    shown = list(range(len(specs)))
    widths = list(natural)
    if width is not None:
        droppable = sorted((c.drop, i) for i, c in enumerate(specs) if c.drop is not None)
        while True:
            widths = list(natural)
            excess = sum(widths[i] for i in shown) + 2 * (len(shown) - 1) - width
            # Cut the widest shrinkable column one character at a time: the cut is shared fairly.
            while excess > 0:
                room = [(widths[i] - floors[i], i) for i in shown if specs[i].shrink is not None]
                best = max(room, default=(0, -1))
                if best[0] <= 0:
                    break
                widths[best[1]] -= 1
                excess -= 1
            if excess <= 0 or not droppable:
                break
            shown.remove(droppable.pop(0)[1])
        for i in (i for i in shown if specs[i].own_line and excess > 0):
            narrower = max(len(specs[i].header), widths[i] - excess)
            excess -= widths[i] - narrower
            widths[i] = narrower

    def cell(value: str | Cell, i: int) -> str:
        text = str(value)
        if len(text) > widths[i] and isinstance(value, Cell):
            text = value.short
        if len(text) > widths[i]:
            text = text[: widths[i] - 1] + ELLIPSIS
        return text.ljust(widths[i])

    def lines(row: Sequence[str | Cell]) -> Iterator[str]:
        long = next((i for i in shown if specs[i].own_line and len(str(row[i])) > widths[i]), None)
        if long is not None:  # that cell alone and whole, then the row without it
            yield str(row[long])
            row = [*row[:long], "", *row[long + 1 :]]
        yield "  ".join(cell(row[i], i) for i in shown).rstrip()

    return "\n".join(line for row in [[c.header for c in specs], *rows] for line in lines(row))


def _waits(job: PlainJob) -> bool:
    """False when `next_run_at` is not a run to come: paused (resume moves it) or finished."""
    return not job.paused and job.state != JobState.FINISHED and job.unreadable is None


JOBS_COLUMNS: Final = (
    Column("ID", own_line=True),
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

    A job with a run in `in_flight` shows that run ("started 3s ago"). With `namespaces`, a NAMESPACE
    column comes first.
    """
    rows: list[tuple[str | Cell, ...]] = []
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
                job.schedule if job.run_at is None else Cell(job.schedule, _one_shot_short(job.run_at, now)),
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
        return fit_table((NAMESPACE_COLUMN, *JOBS_COLUMNS), rows, width)
    return fit_table(JOBS_COLUMNS, rows, width)


HALF_A_YEAR: Final = timedelta(days=182)  # as `ls -l`: nearer than this, a date needs no year


def _one_shot_short(at: datetime, now: datetime) -> str:
    """A one-shot schedule ("once at 2027-01-15T08:00:00Z") in the 14 characters that SCHEDULE
    may be cut to: "at 01-15 08:00" (UTC, to the minute) within half a year of `now`, else "at 2027-01-15"."""
    at = at.astimezone(timezone.utc)
    return at.strftime("at %m-%d %H:%M" if abs(at - now) < HALF_A_YEAR else "at %Y-%m-%d")


def _error_summary(error: str | None) -> str:
    if not error:
        return ""
    lines = [line.strip() for line in error.strip().splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    return last if len(last) <= ERROR_COLUMN else last[: ERROR_COLUMN - 1] + ELLIPSIS


RUNS_COLUMNS: Final = (
    Column("RUN"),
    Column("JOB", own_line=True),
    Column("GEN", drop=3),
    Column("SCHEDULED FOR (UTC)", drop=4),
    Column("STARTED (UTC)", drop=2),
    Column("DURATION"),
    Column("TRY"),  # the attempt of its slot: only when a listed run is a retry (`runs_table`)
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

    With `namespaces` (job id -> namespace), a NAMESPACE column comes first. A TRY column appears
    only when a run is a retry.
    """
    left_out = {"JOB"} if not with_job else set()
    if all(run.attempt == 1 for run in runs):
        left_out.add("TRY")
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
            run_attempt(run),
            run_outcome(run),
            display_id(run.instance_id) if run.instance_id else "-",
            _error_summary(run.error),
        ]
        row = [cell for cell, column in zip(row, RUNS_COLUMNS, strict=True) if column.header not in left_out]
        rows.append(row if namespaces is None else [namespaces.get(run.job_id, "-"), *row])
    columns = [c for c in RUNS_COLUMNS if c.header not in left_out]
    return fit_table(columns if namespaces is None else [NAMESPACE_COLUMN, *columns], rows, width)
