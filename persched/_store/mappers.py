"""Stored rows <-> the records and plans of persched: no transactions, no threads.

A row is read defensively first (`_rows`: a hand-edited value becomes a
placeholder named in `StoredRow.problems`); here it becomes a `Job`, a `Run`,
its `Policies` or its `JobPlan`, and a row that cannot be read is quarantined
for its job alone. A row's fields are mapped once (`job_fields`,
`run_fields`), into the public pydantic models or, for the read commands,
their plain twins (`persched._model.plain_models`), which need no pydantic.
"""

from __future__ import annotations

import functools
import json
import logging
from typing import TYPE_CHECKING, Any, Final

from sqlalchemy import bindparam, select, update

from .._model import triggers as _triggers
from .._model.instant import Instant, Micros, from_datetime, to_datetime
from .._model.models import (
    CLAIM_POLICY_COLUMNS,
    POLICY_COLUMNS,
    JobState,
    Policies,
    check_stored,
    job_policy_fields,
    stored_interval,
)
from .._model.plain_models import PlainJob, PlainRun
from .._model.policy import JobPlan, Missed, PlanShape, Retry
from ..errors import InvalidJobError
from ._rows import StoredRow, raw_columns, read_row, readable
from .schema import COUNTER_MAX, jobs, runs

if TYPE_CHECKING:
    from collections.abc import Collection, Iterable, Sequence
    from datetime import datetime

    from sqlalchemy import Column, Connection, Row

    from .._model.public_models import Job, Run
    from .._model.triggers import JitterReach
    from .dialects import NamedRow

logger = logging.getLogger(__name__)

CLOCK_STEP_FLOOR: Final = Micros(
    60_000_000
)  # corrections smaller than this are skew, left alone (see persched._store.ahead)
SCHEDULED: Final = JobState.SCHEDULED.value
RUNNING: Final = JobState.RUNNING.value
FINISHED: Final = JobState.FINISHED.value
DESCHEDULED: Final = JobState.DESCHEDULED.value


def column_micros(value: float) -> Micros:
    """A seconds column (float) -> microseconds. Exact for what persched wrote (``us / 1e6``):
    that float is within half an ulp of the true quotient, far under half a microsecond."""
    return Micros(round(value * 1_000_000))


def nullable_micros(value: float | None) -> Micros | None:
    """`column_micros` of a nullable column."""
    return None if value is None else column_micros(value)


# What claims and completions read of a job: its plan's columns and where it stands, not the bookkeeping.
DISPATCH_COLUMNS: Final = tuple(
    jobs.c[name]
    for name in (
        "job_id",
        "generation",
        "target",
        "args",
        "kwargs",
        "first_run_at",
        "next_run_at",
        "running_for",
        "run_now_at",
        "paused",
        "retry_attempt",
        "retry_for",
        *CLAIM_POLICY_COLUMNS,  # the options' columns (models.OPTIONS), but start_at
    )
)


# The same, selected raw and read row by row (`_rows`), so one hand-edited row is settled alone.
RAW_DISPATCH: Final = raw_columns(DISPATCH_COLUMNS)

# Where a job stands, for a claim that lost or a completion that no longer owns its row.
STANDING_COLUMNS: Final = tuple(
    jobs.c[name]
    for name in (
        "job_id",
        "generation",
        "state",
        "owner",
        "first_run_at",
        "next_run_at",
        "run_now_at",
        "paused",
        "retry_attempt",
        *CLAIM_POLICY_COLUMNS,
    )
)

# Every column but owner_bucket, which persched writes and filters on but never reads (`persched._model.buckets`).
JOB_COLUMNS, RAW_JOBS = readable(jobs, [column.name for column in jobs.c if column.name != "owner_bucket"])
# The columns a row holds of its own (`own_job_fields`): all but its target and policy columns.
OWN_JOB_COLUMNS: Final = tuple(column for column in JOB_COLUMNS if column.name not in ("target", *POLICY_COLUMNS))
RUN_COLUMNS, RAW_RUNS = readable(runs)


# What parking and quarantine write: the job paused, and no longer held by any run or request.
_PAUSED_AND_FREED: Final = {
    "state": SCHEDULED,
    "paused": True,
    "run_now_at": None,
    "owner": None,
    "lease_until": None,
    "running_for": None,
    "cancel_requested_at": None,
    "retry_attempt": None,
    "retry_for": None,
}

# Pause a job whose stored row cannot be read (see `plan_or_quarantine`).
QUARANTINE: Final = (
    update(jobs)
    .where(jobs.c.job_id == bindparam("b_job_id"), jobs.c.generation == bindparam("b_generation"))
    .values(_PAUSED_AND_FREED)
)


# Pause a job whose row the database refused to move on, while it is still that run's (see
# `refused_record`): the refused run's job waits for an operator, and every other job goes on.
PARK: Final = (
    update(jobs)
    .where(
        jobs.c.job_id == bindparam("b_job_id"),
        jobs.c.generation == bindparam("b_generation"),
        jobs.c.state == RUNNING,
        jobs.c.owner == bindparam("b_owner"),
        jobs.c.running_for == bindparam("b_running_for"),
    )
    .values(_PAUSED_AND_FREED)
)


def counted(column: str, step: str) -> str:
    """SQL for `column` + `step` (a literal or a ``?``) that stops at `COUNTER_MAX` instead of failing
    (PostgreSQL, MariaDB) or turning into a float (SQLite); a value past the bound, or not a number
    at all (written by hand), becomes the bound. Saturated, a counter stays at 2**63 - 1 for good."""
    return f"CASE WHEN {column} < {COUNTER_MAX} THEN {column} + {step} ELSE {COUNTER_MAX} END"


def stored(result: Iterable[Row[Any] | NamedRow], columns: Sequence[Column[Any]] = JOB_COLUMNS) -> list[StoredRow]:
    """Rows selected with `raw_columns`, read one by one (`_rows.read_row`)."""
    return [read_row(columns, row._mapping) for row in result]


def generation_of(value: object) -> int:
    """A generation read raw; 0 for one edited into something else (only logged and reported)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def plan_or_quarantine(
    row: StoredRow, at: Instant, instance_id: str, quarantined: list[dict[str, Any]], records: list[dict[str, Any]]
) -> JobPlan | None:
    """`plan_of(row)`; or None, with the job's pause and an "error" record queued, if its
    stored row or schedule cannot be read (settled for that job alone)."""
    if row.problems:
        what, reason = "stored row", row.describe()
    else:
        try:
            return plan_of(row)
        except (ValueError, TypeError, OverflowError) as exc:  # InvalidJobError is a ValueError
            what, reason = "stored schedule", str(exc)
    logger.error("job %s generation %d paused: its %s cannot be read: %s", row.job_id, row.generation, what, reason)
    quarantined.append({"b_job_id": row.job_id, "b_generation": row.generation})
    records.append(_unreadable_record(row, what, reason, at, instance_id))
    return None


def readable_or_refuse(row: StoredRow) -> StoredRow:
    """`row`, or InvalidJobError naming what cannot be read (resume, run-now: the caller must fix it)."""
    if row.problems:
        raise InvalidJobError(
            "job_id",
            f"the stored row of {row.job_id!r} cannot be read ({row.describe()}); "
            "schedule it again with a valid definition",
        )
    return row


def change_words(row: StoredRow) -> str:
    """What a changed row now says, for the log: "descheduled", "paused", "run-now requested", "cancel
    requested", "scheduled"."""
    if row.state == DESCHEDULED:
        return "descheduled"
    if row.state == RUNNING and row.cancel_requested_at is not None:
        return "cancel of its run requested"
    if row.paused:
        return "paused"
    if row.run_now_at is not None:
        return "run-now requested"
    return "finished" if row.state == FINISHED else "scheduled (new, replaced or resumed)"


def instant_or_none(value: datetime | None) -> Instant | None:
    return None if value is None else from_datetime(value)


def pending_retry(attempt: object, slot: Instant | None) -> Retry | None:
    """The pending attempt a row's ``retry_attempt`` and ``retry_for`` name, or None: none is pending,
    or they are not what persched writes (a hand edit: the row then waits as if none were)."""
    if slot is None or isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 2:
        return None
    return Retry(attempt, slot)


def retry_of(row: StoredRow) -> Retry | None:
    """`pending_retry` of a row read with `DISPATCH_COLUMNS` (or all of them)."""
    if "retry_attempt" in row.problems or "retry_for" in row.problems:
        return None
    return pending_retry(row.retry_attempt, instant_or_none(row.retry_for))


def policies_of(row: StoredRow, *, with_start: bool = True) -> Policies:
    """The policies of a row (`persched._model.models.OPTIONS` maps each column).

    Without start_at unless `with_start`."""
    return Policies.from_columns(row.value_of, for_claims=not with_start)


def plan_of(row: StoredRow) -> JobPlan:
    """The policies of a persched_jobs row, as a plan (raises InvalidJobError if they cannot be read)."""
    return plan_at(row, row.generation)


def plan_at(row: StoredRow, generation: int, *, with_start: bool = False) -> JobPlan:
    # start_at placed the grid's anchor once; only a correction reads it again (so claims need not).
    shape = shape_of(row, with_start=with_start)
    return shape.plan(row.job_id, generation, from_datetime(row.first_run_at), stored_interval(row.interval_seconds))


# A row's policy columns but its interval (`shape_of`): what jobs on intervals of their own share.
SHAPE_COLUMNS: Final = tuple(name for name in CLAIM_POLICY_COLUMNS if name != "interval_seconds")
_SHAPE_COLUMNS_WITH_START: Final = tuple(name for name in POLICY_COLUMNS if name != "interval_seconds")
_STAND_IN_INTERVAL: Final = 1.0  # seconds: a shape's interval (each plan takes its job's own)


def shape_of(row: StoredRow, *, with_start: bool = False) -> PlanShape:
    """The `PlanShape` of a row's policies (raises InvalidJobError if they cannot be read); without
    start_at unless `with_start`."""
    columns = _SHAPE_COLUMNS_WITH_START if with_start else SHAPE_COLUMNS
    return _plan_shape(tuple(map(row.value_of, columns)), row.interval_seconds is not None, with_start)


@functools.lru_cache(maxsize=4_096)
def _plan_shape(values: tuple[Any, ...], has_interval: bool, with_start: bool) -> PlanShape:
    # Equal values give equal shapes, and jobs share a few, so a few kept serve them all. Checked like
    # schedule()'s arguments, once per shape: a hand-made row fails here, not deep inside a decision.
    column = dict(zip(_SHAPE_COLUMNS_WITH_START if with_start else SHAPE_COLUMNS, values, strict=True))
    column["interval_seconds"] = _STAND_IN_INTERVAL if has_interval else None
    policies = Policies.from_columns(column.__getitem__, for_claims=not with_start)
    check_stored(policies)
    return PlanShape.of(policies)


def regrid(row: StoredRow, plan: JobPlan, corrected: Instant, change_seq: int) -> dict[str, Any]:
    """Columns that move a row written by a clock that was ahead back to `corrected`, in its generation
    (see DueStore._inspect): an interval grid is anchored anew there, its phase kept; the change is announced.
    The slots that clock ran early keep their runs, so the claim passes them by (`ClaimBatch.record_starts`)."""
    return {
        "first_run_at": row.first_run_at if plan.interval is None else to_datetime(corrected),
        "change_seq": change_seq,
    }


def next_fire(cron: str, zone: str, now: Instant) -> Instant | None:
    """The first fire of a stored cron expression after `now` (None if it cannot be read)."""
    try:
        return _triggers.cron_trigger(cron, zone).next_after(now)
    except InvalidJobError:
        return None  # reported on the job itself when it is claimed or listed


def readable_plan(row: StoredRow, *, with_start: bool = False) -> JobPlan | None:
    """`plan_of`, or None (logged) if the stored schedule cannot be read."""
    try:
        return plan_at(row, row.generation, with_start=with_start)
    except InvalidJobError as exc:
        logger.error("job %s generation %d: its stored schedule cannot be read: %s", row.job_id, row.generation, exc)
        return None


def due_of(row: StoredRow, reach: JitterReach) -> Instant | None:
    """When a scheduled, not paused job is due (None for any other); its jitter counted in `reach`."""
    if row.problems:
        logger.error("job %s is not scheduled: its stored row cannot be read: %s", row.job_id, row.describe())
        return None
    plan = None if row.paused or row.state != SCHEDULED else readable_plan(row)
    if plan is None:
        return None
    retry = row.get("retry_attempt") is not None  # an attempt pending: due without jitter
    return plan.due_at(from_datetime(row.next_run_at), instant_or_none(row.run_now_at), reach, retry=retry)


def rows_of(conn: Connection, job_ids: Collection[str]) -> dict[str, StoredRow]:
    if not job_ids:
        return {}
    return {row.job_id: row for row in stored(conn.execute(select(*RAW_JOBS).where(jobs.c.job_id.in_(job_ids))))}


def _state(row: StoredRow) -> JobState:
    if row.paused and row.state == SCHEDULED:
        return JobState.PAUSED
    return JobState(row.state)


def _describe(row: StoredRow) -> str:
    try:
        return plan_of(row).describe()
    except InvalidJobError as exc:
        return f"unreadable ({exc})"


def _json_value(row: StoredRow, column: str, kind: type, problems: dict[str, str]) -> Any:  # noqa: ANN401 - JSON
    if column in row.problems:
        return kind()
    try:
        value = _json_loads(getattr(row, column))
    except (ValueError, RecursionError) as exc:
        problems[column] = f"is not JSON: {exc}"
        return kind()
    if not isinstance(value, kind) or (isinstance(value, dict) and not all(isinstance(k, str) for k in value)):
        problems[column] = f"is not a JSON {'array' if kind is list else 'object'}"
        return kind()
    return value


_raw_decode: Final = json.JSONDecoder().raw_decode


def _json_loads(text: str) -> Any:  # noqa: ANN401 - JSON
    """``json.loads(text)``, faster for the JSON persched writes (no white space around the value)."""
    try:
        value, end = _raw_decode(text)
    except ValueError:
        return json.loads(text)  # white space first, or no JSON: as json.loads reads it, or its error
    return value if end == len(text) else json.loads(text)


def to_job(row: StoredRow) -> Job:
    """The `Job` of a row; a row that cannot be read is still listed, with `unreadable` saying why."""
    from .._model.public_models import Job  # pydantic, which the read commands do without (`plain_job`)

    return Job(**job_fields(row))


def plain_job(row: StoredRow) -> PlainJob:
    """`to_job`, as a `PlainJob`."""
    return PlainJob(**job_fields(row))


def job_fields(row: StoredRow) -> dict[str, Any]:
    """The fields of the `Job` of a row."""
    problems = dict(row.problems)
    fields = own_job_fields(row, problems)
    schedule = "unreadable" if problems else _describe(row)
    return {
        "target": row.target,
        **fields,
        **job_policy_fields(row.value_of),  # the options' fields (models.OPTIONS)
        "schedule": schedule,
        "unreadable": "; ".join(f"{column}: {reason}" for column, reason in problems.items()) or None,
    }


def own_job_fields(row: StoredRow, problems: dict[str, str]) -> dict[str, Any]:
    """The fields of the `Job` of a row that are its own, from `OWN_JOB_COLUMNS`: not those its target and
    policy columns give (which rows of one definition share); what cannot be read is added to `problems`."""
    args = _json_value(row, "args", list, problems)
    kwargs = _json_value(row, "kwargs", dict, problems)
    try:
        state = _state(row)
    except ValueError:
        problems["state"] = f"{row.state!r} is not a job state"
        state = JobState.PAUSED  # a state the claims do not know: the job does not run
    pending = retry_of(row)
    return {
        "job_id": row.job_id,
        "args": tuple(args),
        "kwargs": kwargs,
        "next_run_at": row.next_run_at,
        "generation": row.generation,
        "state": state,
        "created_at": row.created_at,
        "updated_at": row.updated_at,
        "run_count": row.run_count,
        "error_count": row.error_count,
        "failure_streak": row.failure_streak,
        "last_outcome": row.last_outcome,
        "owner": row.owner,
        "lease_until": row.lease_until,
        "paused": bool(row.paused),
        "paused_until": row.paused_until,
        "pause_note": row.pause_note,
        "run_now_requested": row.run_now_at is not None,
        # As the claims read it: a hand-edited pair that is not an attempt shows as none.
        "pending_attempt": None if pending is None else pending.attempt,
        "pending_attempt_slot": None if pending is None else to_datetime(pending.slot),
        "namespace": row.namespace,
        "declared": bool(row.declared),
    }


_OUTCOMES: Final = frozenset(("ok", "error", "lost", "missed", "stopped"))


def to_run(row: StoredRow) -> Run:
    """The `Run` of a row; one that cannot be read is still listed, with `unreadable` saying why."""
    from .._model.public_models import Run  # pydantic, which the read commands do without (`plain_run`)

    return Run(**run_fields(row))


def plain_run(row: StoredRow) -> PlainRun:
    """`to_run`, as a `PlainRun`."""
    return PlainRun(**run_fields(row))


def run_fields(row: StoredRow) -> dict[str, Any]:
    """The fields of the `Run` of a row."""
    problems = dict(row.problems)
    outcome = row.outcome
    if outcome is not None and outcome not in _OUTCOMES:
        problems["outcome"] = f"{outcome!r} is not an outcome"
        outcome = "error"
    return {
        "job_id": row.job_id,
        "generation": row.generation,
        "scheduled_for": row.scheduled_for,
        "started_at": row.started_at,
        "finished_at": row.finished_at,
        "outcome": outcome,
        "error": row.error,
        "instance_id": row.instance_id,
        "run_id": row.run_id,
        "missed_until": row.missed_until,
        "missed_count": row.missed_count,
        "overran": bool(row.overran),
        "run_now": bool(row.run_now),
        "attempt": row.attempt,
        "unreadable": "; ".join(f"{column}: {reason}" for column, reason in problems.items()) or None,
    }


def _unreadable_record(row: StoredRow, what: str, reason: str, at: Instant, instance_id: str) -> dict[str, Any]:
    """A persched_runs row (outcome "error") saying why a job with an unreadable schedule or row was paused."""
    return notice_record(
        row.job_id,
        row.generation,
        at if "next_run_at" in row.problems else from_datetime(row.next_run_at),
        f"the job's {what} cannot be read ({reason}); it was paused: "
        "schedule it again with a valid definition, then resume it",
        at,
        instance_id,
    )


def refused_record(
    job_id: str, generation: int, slot: Instant, what: str, detail: str, at: Instant, instance_id: str
) -> dict[str, Any]:
    """A persched_runs row (outcome "error") saying why a job whose row the database refused to update
    (to record `what`) was paused (`PARK`)."""
    return notice_record(
        job_id,
        generation,
        slot,
        f"the database refused to record {what} ({detail}); the job was paused so that the other jobs go on: "
        "fix its row, or schedule it again, then resume it",
        at,
        instance_id,
    )


def notice_record(
    job_id: str, generation: int, slot: Instant, error: str, at: Instant, instance_id: str
) -> dict[str, Any]:
    """A persched_runs row (outcome "error") in which persched says what it did to a job, and why."""
    return {
        "job_id": job_id,
        "generation": generation,
        "scheduled_for": to_datetime(slot),
        "started_at": to_datetime(at),
        "finished_at": to_datetime(at),
        "outcome": "error",
        "error": error,
        "instance_id": instance_id,
        "lease_until": None,
        "run_now": True,  # off the grid (not under the one-run-per-slot index): a resume may repeat it
    }


def missed_record(job_id: str, generation: int, missed: Missed, at: Instant, instance_id: str) -> dict[str, Any]:
    """A persched_runs row (outcome "missed") standing for the slots `missed` names."""
    return {
        "job_id": job_id,
        "generation": generation,
        "scheduled_for": to_datetime(missed.first),
        "missed_until": to_datetime(missed.last),
        "missed_count": missed.count,
        "started_at": to_datetime(at),
        "finished_at": to_datetime(at),
        "outcome": "missed",
        "instance_id": instance_id,
        "lease_until": None,
        "run_now": False,
    }
