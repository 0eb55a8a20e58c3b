"""Public models (`Job`, `Run`, `JobState`) and validation of `schedule()` input."""

from __future__ import annotations

import enum
import json
import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from .errors import InvalidJobError

__all__ = ["Job", "JobDefinition", "JobState", "Outcome", "Run", "validate_definition"]

MAX_JOB_ID_LENGTH = 200
MAX_INTERVAL_SECONDS = 10 * 366 * 24 * 3600.0  # "at most 10 years"
MIN_INTERVAL_SECONDS = 1e-6  # the store keeps microseconds: a shorter interval has no distinct slots

Outcome = Literal["ok", "error", "lost"]


class JobState(str, enum.Enum):
    """Where a job's row stands. Stored as its lower-case value."""

    SCHEDULED = "scheduled"
    RUNNING = "running"
    DESCHEDULED = "descheduled"


class Job(BaseModel):
    """A job as the store has it (immutable)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    job_id: str
    target: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    interval_seconds: float
    next_run_at: datetime
    generation: int
    state: JobState
    created_at: datetime
    updated_at: datetime
    run_count: int = 0
    error_count: int = 0
    last_outcome: str | None = None
    owner: str | None = None
    lease_until: datetime | None = None


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


@dataclass(frozen=True)
class JobDefinition:
    """What `schedule()` writes, validated; the definition fields decide
    "identical" (same generation, same grid) versus "replaced"."""

    job_id: str
    target: str
    args_json: str
    kwargs_json: str
    interval_seconds: float
    start_in: float | None

    def same_definition(self, target: str, args_json: str, kwargs_json: str, interval_seconds: float) -> bool:
        return (
            self.target,
            self.args_json,
            self.kwargs_json,
            self.interval_seconds,
        ) == (
            target,
            args_json,
            kwargs_json,
            interval_seconds,
        )


def validate_job_id(job_id: object) -> str:
    """Return `job_id` if it is acceptable, else raise `InvalidJobError`."""
    if not isinstance(job_id, str):
        raise InvalidJobError("job_id", f"must be a str, got {type(job_id).__name__}")
    if not job_id:
        raise InvalidJobError("job_id", "must not be empty")
    if len(job_id) > MAX_JOB_ID_LENGTH:
        raise InvalidJobError(
            "job_id",
            f"must be at most {MAX_JOB_ID_LENGTH} characters, got {len(job_id)}",
        )
    if any(ord(c) < 32 or 127 <= ord(c) < 160 for c in job_id):
        raise InvalidJobError("job_id", f"must not contain control characters: {job_id!r}")
    return job_id


def _seconds(argument: str, value: object, *, allow_zero: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidJobError(argument, f"must be a number of seconds, got {value!r}")
    seconds = float(value)
    if not math.isfinite(seconds):
        raise InvalidJobError(argument, f"must be finite, got {value!r}")
    if seconds < 0 or (seconds == 0 and not allow_zero):
        raise InvalidJobError(argument, f"must be {'>= 0' if allow_zero else '> 0'}, got {value!r}")
    if seconds > MAX_INTERVAL_SECONDS:
        raise InvalidJobError(
            argument,
            f"must be at most 10 years ({MAX_INTERVAL_SECONDS:.0f} s), got {value!r}",
        )
    return seconds


def _to_json(argument: str, value: object) -> str:
    try:
        text = json.dumps(value, allow_nan=False, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise InvalidJobError(argument, f"must be JSON-serialisable (persched never pickles): {exc}") from exc
    if json.loads(text) != value:
        # e.g. non-str dict keys, tuples nested inside: they would come back changed.
        raise InvalidJobError(argument, f"does not survive a JSON round trip unchanged: {value!r}")
    return text


def validate_definition(
    job_id: object,
    target: str,
    interval_seconds: object,
    args: object,
    kwargs: object,
    start_in: object,
) -> JobDefinition:
    """Check every argument of `schedule()` (the target is checked by the caller)."""
    job_id = validate_job_id(job_id)
    interval = _seconds("interval_seconds", interval_seconds, allow_zero=False)
    if interval < MIN_INTERVAL_SECONDS:
        raise InvalidJobError(
            "interval_seconds", f"must be at least one microsecond (the store's resolution), got {interval_seconds!r}"
        )
    if not isinstance(args, (tuple, list)):
        raise InvalidJobError("args", f"must be a tuple or list, got {type(args).__name__}")
    args_json = _to_json("args", list(args))
    if kwargs is None:
        kwargs = {}
    if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
        raise InvalidJobError("kwargs", f"must be a dict with str keys, got {kwargs!r}")
    kwargs_json = _to_json("kwargs", kwargs)
    start = None if start_in is None else _seconds("start_in", start_in, allow_zero=True)
    return JobDefinition(job_id, target, args_json, kwargs_json, interval, start)
