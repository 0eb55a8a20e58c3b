"""Rows written by a clock that was ahead, put back on their grid wherever an instance meets them.

A row whose next slot lies further ahead of `now` than its schedule allows,
by more than `CLOCK_STEP_FLOOR`, was written while a wall clock was ahead
(docs/reference/behaviour.md#clock-corrections-across-a-restart). It is
moved back to its next slot from `now` (cron: its next fire after now), in
its generation, by `correct_ahead`, in the caller's transaction: at the
start-up sweep (`persched._store.due`), when the change pick-up reads a row
changed elsewhere (`DueStore.changes_since`), and when a claim finds that
another instance moved the row that far (`persched._store.claims`). The
slots that clock ran early keep their runs, so when their time comes the
claim passes them by (`ClaimBatch.record_starts`): no ``(job_id,
scheduled_for)`` runs twice.

Each correction is conditional on the row as it was read (generation,
state, next_run_at): anything committed since wins, and two instances that
correct one row at once move it once.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from sqlalchemy import update

from .. import _loggers
from .._model import triggers as _triggers
from .._model.instant import Instant, from_datetime, to_datetime
from ._tx import read_time
from .mappers import CLOCK_STEP_FLOOR, SCHEDULED, instant_or_none, plan_at, readable_plan, regrid, rows_of
from .records import Correction
from .schema import jobs

if TYPE_CHECKING:
    from collections.abc import Callable, Collection

    from sqlalchemy import Connection

    from .._model.triggers import JitterReach
    from ._rows import StoredRow

__all__ = ["correct_ahead", "corrected_slot", "log_correction", "written_ahead"]

logger = logging.getLogger(_loggers.LIBRARY)


def written_ahead(next_at: Instant, first_at: Instant | None, updated_at: Instant | None, now: Instant) -> bool:
    """Whether a row was written by a clock ahead of `now`: its grid moved past its first slot, or,
    still at its first slot, it was last written at an instant ahead of `now` by more than the floor
    (`updated_at` None: not known).

    A first slot placed far ahead on purpose (``start_in``, ``start_at``) is not a clock error.
    """
    return next_at != first_at or (updated_at is not None and updated_at - now > CLOCK_STEP_FLOOR)


def corrected_slot(row: StoredRow, now: Instant, updated_at: Instant | None) -> tuple[Instant, Instant] | None:
    """``(next_run_at, the slot it should have)`` of a scheduled row that lies ahead of `now` beyond
    its schedule and was written by a clock ahead (`written_ahead`); else None.

    `updated_at` None: a row read with the claims' columns only (`STANDING_COLUMNS`): only a grid
    moved past its first slot tells, and the slot is an estimate that ignores ``start_at`` (which
    `correct_ahead` reads the whole row for)."""
    if row.problems or row.state != SCHEDULED:
        return None
    next_at = from_datetime(row.next_run_at)
    basis = next_at
    if row.retry_attempt is not None:
        # A pending attempt is due off the grid, within its slot: not ahead of it, unless that slot
        # itself lies ahead of `now` (a clock ahead ran it): then the row goes back to its grid from
        # that slot, and the attempt is dropped (`correct_ahead`). Only the whole row has the slot.
        slot = instant_or_none(row.get("retry_for"))
        if slot is None or slot - now <= CLOCK_STEP_FLOOR:
            return None
        basis = slot
    elif not written_ahead(next_at, instant_or_none(row.first_run_at), updated_at, now):
        return None
    # A correction never moves a job before start_at (only the whole row has it).
    plan = readable_plan(row, with_start=updated_at is not None)
    corrected = None if plan is None else plan.corrected(basis, now)
    if corrected is None or next_at - corrected <= CLOCK_STEP_FLOOR:
        return None  # within the floor: skew between live instances, left alone
    return next_at, corrected


def correct_ahead(
    conn: Connection,
    job_ids: Collection[str],
    now: Instant | Callable[[], Instant],
    change_seq: Callable[[Connection], int],
    reach: JitterReach,
) -> list[Correction]:
    """Move those of `job_ids` whose rows lie ahead of `now` beyond their schedule back onto their
    grid, in `conn`'s transaction (module docstring); `change_seq` gives the change counter's value
    to announce them with (asked only when a row moves). The caller logs them once committed.

    A clock for `now` is read once the rows are read: a time read earlier, before a thread that
    was held for a while, would take a row this instance wrote meanwhile for one a clock ahead wrote."""
    corrections: list[Correction] = []
    rows = rows_of(conn, job_ids)
    now = read_time(now)
    for job_id, row in rows.items():
        found = corrected_slot(row, now, from_datetime(row.updated_at))
        plan = None if found is None else readable_plan(row, with_start=True)
        if found is None or plan is None:
            continue
        was, corrected = found
        moved = conn.execute(
            update(jobs)
            .where(
                jobs.c.job_id == job_id,
                jobs.c.generation == row.generation,
                jobs.c.state == SCHEDULED,
                jobs.c.next_run_at == to_datetime(was),  # PostgreSQL read no lock: anything since wins
            )
            .values(
                next_run_at=to_datetime(corrected),
                retry_attempt=None,  # an attempt of a slot that has not come yet (`corrected_slot`)
                retry_for=None,
                updated_at=to_datetime(now),
                **regrid(row, plan, corrected, change_seq(conn)),
            )
        )
        if moved.rowcount != 1:
            continue
        due = (
            None
            if row.paused
            else plan_at(row, row.generation).due_at(corrected, instant_or_none(row.run_now_at), reach)
        )
        corrections.append(Correction(job_id, row.generation, was, corrected, due))
    return corrections


def log_correction(c: Correction) -> None:
    """A WARNING that names the job and the size of the correction
    (docs/reference/behaviour.md, "Clock corrections across a restart")."""
    logger.warning(
        "job %s: its next run (%s) lay %s further ahead than its schedule allows, written while a "
        "wall clock was ahead; it runs again at %s (slots that clock ran early are passed by)",
        c.job_id,
        to_datetime(c.was).isoformat(),
        _triggers.describe_duration(c.was - c.now),
        to_datetime(c.now).isoformat(),
    )
