"""`PlainJob` and `PlainRun`: `Job` and `Run` as frozen dataclasses, so the read commands never import pydantic.

Built from the same row mapping as the public models (`_store.mappers.job_fields`, `run_fields`);
tests/store/test_plain_models.py keeps their fields in step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .models import DEFAULT_NAMESPACE

if TYPE_CHECKING:
    from datetime import datetime

    from .models import JobState, Outcome

__all__ = ["PlainJob", "PlainRun"]


@dataclass(frozen=True, slots=True, kw_only=True)
class PlainJob:
    """The fields of a `Job`, unvalidated: they come from a stored row read defensively."""

    job_id: str
    target: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    interval_seconds: float | None
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
    cron: str | None = None
    timezone: str = "UTC"
    recurrence: str = "fixed_rate"
    misfire: str = "coalesce"
    max_catch_up: int | None = None
    grace_seconds: float = 1.0
    overlap: str = "forbid"
    jitter_seconds: float = 0.0
    start_at: datetime | None = None
    end_at: datetime | None = None
    max_runtime_seconds: float | None = None
    on_overrun: str = "warn"
    executor: str = "thread"
    stop_grace_seconds: float = 5.0
    exclude: tuple[str, ...] | None = None
    pause_after_failures: int | None = None
    retries: int = 0
    retry_delay_seconds: float = 10.0
    retry_backoff: float = 2.0
    retry_max_delay_seconds: float | None = None
    retry_lost: bool = False
    paused: bool = False
    paused_until: datetime | None = None  # a timed pause resumes by itself then (pause(until=...))
    pause_note: str | None = None  # why the job is paused (pause(note=...))
    run_now_requested: bool = False
    pending_attempt: int | None = None
    pending_attempt_slot: datetime | None = None
    schedule: str = ""
    unreadable: str | None = None
    run_at: datetime | None = None
    namespace: str = DEFAULT_NAMESPACE
    declared: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class PlainRun:
    """The fields of a `Run`, unvalidated: they come from a stored row read defensively."""

    job_id: str
    generation: int
    scheduled_for: datetime
    started_at: datetime
    finished_at: datetime | None = None
    outcome: Outcome | None = None
    error: str | None = None
    instance_id: str | None = None
    run_id: int | None = None
    missed_until: datetime | None = None
    missed_count: int | None = None
    overran: bool = False
    run_now: bool = False
    attempt: int = 1
    unreadable: str | None = None
