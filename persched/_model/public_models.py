"""The public models `Job` and `Run` (pydantic), apart so that a read command never imports pydantic."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from .terms import DEFAULT_NAMESPACE, JobState, Outcome

__all__ = ["Job", "Run", "job_over"]


class Job(BaseModel):
    """A job as the store has it (immutable)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    job_id: str
    target: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    interval_seconds: float | None  # None for a cron or one-shot job
    next_run_at: datetime
    generation: int
    state: JobState
    created_at: datetime
    updated_at: datetime
    run_count: int = 0
    error_count: int = 0
    failure_streak: int = 0  # slots in a row that ended in failure (pause_after_failures)
    last_outcome: str | None = None
    owner: str | None = None
    lease_until: datetime | None = None
    # The options of schedule(), as stored (seconds, aware datetimes): declared in OPTIONS (a test keeps these in step).
    cron: str | None = None
    timezone: str = "UTC"
    # Plain str (not the Literal types of schedule()'s arguments): a job is read
    # back whatever a hand-made UPDATE wrote, so that it can be shown and fixed.
    recurrence: str = "fixed_rate"
    misfire: str = "coalesce"
    max_catch_up: int | None = None
    grace_seconds: float = 1.0
    overlap: str = "forbid"
    jitter_seconds: float = 0.0
    start_at: datetime | None = None
    end_at: datetime | None = None
    max_runtime_seconds: float | None = None
    on_overrun: str = "warn"  # "stop": a run past max_runtime_seconds is asked to stop
    executor: str = "thread"  # "process": each run in a child process
    stop_grace_seconds: float = 5.0  # a stopped child process is killed this long after SIGTERM
    exclude: tuple[str, ...] | None = None  # excluded dates and ranges, canonical ("2026-12-24/2026-12-26")
    pause_after_failures: int | None = None  # paused after this many failed slots in a row
    retries: int = 0  # a failed run is tried again up to this many times, within its slot
    retry_delay_seconds: float = 10.0  # the first retry's delay after the failed attempt ended
    retry_backoff: float = 2.0  # each retry's delay is the previous one's times this
    retry_max_delay_seconds: float | None = None  # the longest delay (None: no cap)
    retry_lost: bool = False  # a run recorded "lost" is tried again too
    paused: bool = False
    paused_until: datetime | None = None  # a timed pause resumes by itself then (pause(until=...))
    pause_note: str | None = None  # why the job is paused (pause(note=...))
    run_now_requested: bool = False
    pending_attempt: int | None = None  # a retry is pending: the attempt next_run_at starts (2, 3, ...)
    pending_attempt_slot: datetime | None = None  # the slot (Run.scheduled_for) that pending attempt runs
    schedule: str = ""  # the schedule in words: "every 5 min", "cron 0 3 * * * Europe/Paris"
    # Why the stored row cannot be read (a hand edit), or None; the fields it names show placeholders.
    unreadable: str | None = None
    run_at: datetime | None = None  # the one instant of a one-shot job (schedule(run_at=...))
    namespace: str = DEFAULT_NAMESPACE  # the application the job belongs to
    declared: bool = False  # written by declare(): a later declare(prune=True) may deschedule it


def job_over(template: Job, fields: dict[str, Any]) -> Job:
    """Return ``template.model_copy(update=fields)``, equal, without pydantic's general steps.

    A declaration returns 100,000 of them. Like ``model_copy`` it does not validate: `fields` must be
    of the types validation gives.
    """
    job = Job.__new__(Job)
    _set_attribute(job, "__dict__", {**template.__dict__, **fields})
    fields_set = template.model_fields_set
    if not fields.keys() <= fields_set:  # else shared, as ``model_construct`` shares the one it is given
        fields_set = fields_set | fields.keys()
    _set_attribute(job, "__pydantic_fields_set__", fields_set)
    _set_attribute(job, "__pydantic_extra__", None)  # extra="forbid": never any
    _set_attribute(job, "__pydantic_private__", None)  # no private attributes
    return job


_set_attribute = object.__setattr__  # a frozen model's own __setattr__ refuses, as pydantic's copy knows


class Run(BaseModel):
    """One run of a job (immutable); `outcome` is None while it runs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    job_id: str
    generation: int
    scheduled_for: datetime
    started_at: datetime
    finished_at: datetime | None = None
    outcome: Outcome | None = None
    error: str | None = None
    instance_id: str | None = None
    run_id: int | None = None
    missed_until: datetime | None = None  # a "missed" record stands for scheduled_for .. missed_until
    missed_count: int | None = None  # how many slots it stands for (None: not counted, a long cron range)
    overran: bool = False  # still running after the job's max_runtime_seconds
    run_now: bool = False  # started by run_now(), off the grid
    attempt: int = 1  # which attempt of its slot (retries): 1 for the first
    unreadable: str | None = None  # why the stored record cannot be read (fields it names are placeholders)
