"""Rows written by a clock that was ahead, put back on their grid wherever an instance meets them.

A row whose next slot lies further ahead of `now` than its schedule allows,
by more than `CLOCK_STEP_FLOOR`, is moved back to its next slot from `now` by
`correct_ahead`, in the caller's transaction (the start-up sweep, the change
pick-up, a lost claim). Each correction is conditional on the row as read, so
anything committed since wins and two instances move a row once. The slots
run early keep their runs, so the claim passes them by: no slot runs twice
(docs/reference/behaviour.md#clock-corrections-across-a-restart).
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
    """Whether a row was written by a clock ahead of `now`: its grid moved past its first slot, or it
    was written ahead of `now` by more than the floor (a first slot far ahead on purpose is no error)."""
    return next_at != first_at or (updated_at is not None and updated_at - now > CLOCK_STEP_FLOOR)


def corrected_slot(row: StoredRow, now: Instant, updated_at: Instant | None) -> tuple[Instant, Instant] | None:
    """``(next_run_at, the slot it should have)`` of a scheduled row a clock ahead wrote; else None.

    `updated_at` None: a row with the claims' columns only, whose slot is an estimate (no ``start_at``).
    """
    if row.problems or row.state != SCHEDULED:
        return None
    next_at = from_datetime(row.next_run_at)
    basis = next_at
    if row.retry_attempt is not None:
        # A pending attempt is due within its slot: ahead only if that slot lies ahead of `now`;
        # then the row goes back to its grid and the attempt is dropped.
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
    """Move those of `job_ids` whose rows a clock ahead wrote back onto their grid, in `conn`'s transaction.

    `change_seq` is asked only when a row moves; the caller logs the corrections once committed. A clock
    for `now` is read after the rows: a time read earlier would take a row this instance wrote meanwhile
    for one a clock ahead wrote."""
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
    """Log a WARNING that names the job and the size of the correction."""
    logger.warning(
        "job %s: its next run (%s) lay %s further ahead than its schedule allows, written while a "
        "wall clock was ahead; it runs again at %s (slots that clock ran early are passed by)",
        c.job_id,
        to_datetime(c.was).isoformat(),
        _triggers.describe_duration(c.was - c.now),
        to_datetime(c.now).isoformat(),
    )
