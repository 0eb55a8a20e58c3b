"""Public models (`Job`, `Run`, `JobState`) and validation of `schedule()` input."""

from __future__ import annotations

import dataclasses
import enum
import json
import math
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict

from . import _triggers
from ._instant import Instant, Micros, from_datetime, micros, seconds, to_datetime
from .errors import InvalidJobError

__all__ = ["DEFAULT_NAMESPACE", "Job", "JobDefinition", "JobState", "Outcome", "Policies", "Run", "validate_definition"]

MAX_JOB_ID_LENGTH = 200
DEFAULT_NAMESPACE: Final = "default"  # every job made before namespaces (revision 0004) is here
MAX_NAMESPACE_LENGTH: Final = 100
MAX_INTERVAL_SECONDS = 10 * 366 * 24 * 3600.0  # "at most 10 years"
MIN_INTERVAL_SECONDS = 1e-6  # the store keeps microseconds: a shorter interval has no distinct slots
MAX_CRON_LENGTH = 200  # characters: persched_jobs.cron is String(200)
MAX_TIMEZONE_LENGTH = 64  # characters: persched_jobs.timezone is String(64)
MAX_STORED_INT = 2**31 - 1  # an Integer column (max_catch_up) on PostgreSQL
DEFAULT_MAX_ARGS_BYTES = 64 * 1024  # per args / kwargs, as stored JSON; JobScheduler(max_args_bytes=...)
MAX_ARGS_DEPTH = 100  # nesting levels of args / kwargs (json would hit the recursion limit long before 5,000)
# Instants given by the caller: later ones leave no room for the slots after
# them (datetime ends at year 9999).
LATEST_INSTANT = datetime(9000, 1, 1, tzinfo=timezone.utc)

DEFAULT_GRACE: Final = Micros(1_000_000)  # grace_seconds=1.0
NO_JITTER: Final = Micros(0)

Outcome = Literal["ok", "error", "lost", "missed"]
Recurrence = Literal["fixed_rate", "fixed_delay"]
Misfire = Literal["coalesce", "skip", "catch_up"]
Overlap = Literal["forbid", "skip"]


class JobState(str, enum.Enum):
    """Where a job stands.

    The store's `state` column holds scheduled, running, finished or
    descheduled; "paused" is its `paused` flag on a job that is not running
    (a paused job whose last run is still finishing shows as running, with
    `Job.paused` set).
    """

    SCHEDULED = "scheduled"
    RUNNING = "running"
    PAUSED = "paused"
    FINISHED = "finished"
    DESCHEDULED = "descheduled"


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
    last_outcome: str | None = None
    owner: str | None = None
    lease_until: datetime | None = None
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
    paused: bool = False
    run_now_requested: bool = False
    schedule: str = ""  # the schedule in words: "every 5 min", "cron 0 3 * * * Europe/Paris"
    # Why the stored row cannot be read (a hand edit), or None; the fields it names
    # show placeholders. schedule() with a valid definition replaces such a row.
    unreadable: str | None = None
    run_at: datetime | None = None  # the one instant of a one-shot job (schedule(run_at=...))
    namespace: str = DEFAULT_NAMESPACE  # the application the job belongs to
    declared: bool = False  # written by declare(): a later declare(prune=True) may deschedule it


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
    unreadable: str | None = None  # why the stored record cannot be read (fields it names are placeholders)


@dataclass(frozen=True)
class Policies:
    """The SPEC-policies options of a job, validated (all part of its definition).

    Durations and instants are whole microseconds (`_instant`), rounded once, at `schedule()`.
    """

    interval: Micros | None = None
    cron: str | None = None
    timezone: str = "UTC"
    # Plain str (not the Literal types of schedule()'s arguments): a job is read
    # back whatever a hand-made UPDATE wrote, so that it can be shown and fixed.
    recurrence: str = "fixed_rate"
    misfire: str = "coalesce"
    max_catch_up: int | None = None
    grace: Micros = DEFAULT_GRACE
    overlap: str = "forbid"
    jitter: Micros = NO_JITTER
    start_at: Instant | None = None
    end_at: Instant | None = None
    max_runtime: Micros | None = None

    @property
    def one_shot(self) -> bool:
        """A job with one slot, at `end_at` (``schedule(run_at=...)``): neither an interval nor cron."""
        return self.interval is None and self.cron is None

    def columns(self) -> dict[str, Any]:
        """The policy columns of persched_jobs (seconds as floats, instants as datetimes)."""

        def secs(us: int | None) -> float | None:
            return None if us is None else seconds(us)

        def when(us: int | None) -> datetime | None:
            return None if us is None else to_datetime(us)

        return {
            "interval_seconds": secs(self.interval),
            "cron": self.cron,
            "timezone": self.timezone,
            "recurrence": self.recurrence,
            "misfire": self.misfire,
            "max_catch_up": self.max_catch_up,
            "grace_seconds": secs(self.grace),
            "overlap": self.overlap,
            "jitter_seconds": secs(self.jitter),
            "start_at": when(self.start_at),
            "end_at": when(self.end_at),
            "max_runtime_seconds": secs(self.max_runtime),
        }


@dataclass(frozen=True)
class JobDefinition:
    """What `schedule()` writes, validated; `key()` decides "identical"
    (same generation, same grid) versus "replaced"."""

    job_id: str
    target: str
    args_json: str
    kwargs_json: str
    policies: Policies
    start_in: Micros | None

    def key(self) -> tuple[Any, ...]:
        """Everything that makes up the definition (not start_in: it only places a new grid)."""
        return (self.target, self.args_json, self.kwargs_json, self.policies)


def shown(value: object, limit: int = 80) -> str:
    """`repr(value)` for a message: cut to `limit` characters, and safe for huge ints."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 256:
        return f"an integer of {value.bit_length()} bits"  # repr() may refuse it (4,300 digits)
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a caller's object with a broken __repr__
        text = f"<{type(value).__name__} object>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_encodable(argument: str, text: str) -> None:
    """Refuse a str the database cannot store: a lone surrogate (not UTF-8) or NUL (PostgreSQL text)."""
    if "\x00" in text:
        raise InvalidJobError(argument, f"must not contain NUL characters: {shown(text)}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidJobError(
            argument, f"is not valid Unicode (a lone surrogate at position {exc.start}): {shown(text)}"
        ) from None


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
    check_encodable("job_id", job_id)
    return job_id


def validate_namespace(namespace: object, argument: str = "namespace") -> str:
    """Return `namespace` if it is acceptable (like a job id, at most 100 characters), else raise."""
    if not isinstance(namespace, str) or not namespace.strip():
        raise InvalidJobError(argument, f"must be a non-empty str such as 'billing', got {namespace!r}")
    if len(namespace) > MAX_NAMESPACE_LENGTH:
        raise InvalidJobError(argument, f"must be at most {MAX_NAMESPACE_LENGTH} characters, got {len(namespace)}")
    if any(ord(c) < 32 or 127 <= ord(c) < 160 for c in namespace):
        raise InvalidJobError(argument, f"must not contain control characters: {namespace!r}")
    return namespace


def _seconds(argument: str, value: object, *, allow_zero: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidJobError(argument, f"must be a number of seconds, got {shown(value)}")
    try:
        seconds = float(value)
    except OverflowError:  # an int beyond any float (10**400)
        raise InvalidJobError(argument, f"must be at most 10 years, got {shown(value)}") from None
    if not math.isfinite(seconds):
        raise InvalidJobError(argument, f"must be finite, got {value!r}")
    if seconds < 0 or (seconds == 0 and not allow_zero):
        raise InvalidJobError(argument, f"must be {'>= 0' if allow_zero else '> 0'}, got {value!r}")
    if seconds > MAX_INTERVAL_SECONDS:
        raise InvalidJobError(
            argument,
            f"must be at most 10 years ({MAX_INTERVAL_SECONDS:.0f} s), got {shown(value)}",
        )
    return seconds


def _check_shape(argument: str, value: object) -> None:
    """Refuse nesting deeper than MAX_ARGS_DEPTH and strings the database cannot store.

    Iterative, so that a deep value fails here with a clear message and not
    with a RecursionError inside json.
    """
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise InvalidJobError(argument, f"holds a string with a lone surrogate: {shown(item)}") from None
        elif isinstance(item, (list, tuple, dict)):
            if depth >= MAX_ARGS_DEPTH:
                raise InvalidJobError(argument, f"is nested more than {MAX_ARGS_DEPTH} levels deep")
            if isinstance(item, dict):
                stack.extend((k, depth + 1) for k in item)  # keys: str, or refused by the round trip
                stack.extend((v, depth + 1) for v in item.values())
            else:
                stack.extend((v, depth + 1) for v in item)


def _to_json(argument: str, value: object, max_bytes: int = DEFAULT_MAX_ARGS_BYTES) -> str:
    _check_shape(argument, value)
    try:
        text = json.dumps(value, allow_nan=False, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidJobError(argument, f"must be JSON-serialisable (persched never pickles): {exc}") from exc
    if len(text) > max_bytes:  # ASCII: json escapes everything else
        raise InvalidJobError(
            argument,
            f"is {len(text)} bytes as JSON, more than max_args_bytes ({max_bytes}); store large data elsewhere "
            "and pass a reference to it",
        )
    if json.loads(text) != value:
        # e.g. non-str dict keys, tuples nested inside: they would come back changed.
        raise InvalidJobError(argument, f"does not survive a JSON round trip unchanged: {value!r}")
    return text


_CHOICES: dict[str, tuple[str, ...]] = {
    "recurrence": ("fixed_rate", "fixed_delay"),
    "misfire": ("coalesce", "skip", "catch_up"),
    "overlap": ("forbid", "skip"),
}


def _choice(argument: str, value: object) -> Any:  # noqa: ANN401 - one of the Literal types above
    if value not in _CHOICES[argument]:
        raise InvalidJobError(argument, f"must be one of {', '.join(map(repr, _CHOICES[argument]))}, got {value!r}")
    return value


def _micros(argument: str, value: object, *, allow_zero: bool) -> Micros:
    """`_seconds`, rounded once to whole microseconds (an interval of 1/3 s is 333,333 µs)."""
    us = micros(_seconds(argument, value, allow_zero=allow_zero))
    if us == 0 and not allow_zero:
        raise InvalidJobError(argument, f"must be at least one microsecond, got {value!r}")
    return Micros(us)


def _instant(argument: str, value: object) -> Instant | None:
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise InvalidJobError(argument, f"must be a timezone-aware datetime, got {value!r}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidJobError(argument, f"must be timezone-aware (naive datetimes are ambiguous), got {value!r}")
    if value > LATEST_INSTANT:
        raise InvalidJobError(argument, f"must be before {LATEST_INSTANT.isoformat()}, got {value!r}")
    return from_datetime(value)  # exact: a datetime holds whole microseconds


def validate_policies(
    interval_seconds: object,
    *,
    cron: object = None,
    timezone: object = "UTC",
    recurrence: object = "fixed_rate",
    misfire: object = "coalesce",
    max_catch_up: object = None,
    grace_seconds: object = 1.0,
    overlap: object = "forbid",
    jitter_seconds: object = 0.0,
    start_at: object = None,
    end_at: object = None,
    max_runtime_seconds: object = None,
    run_at: object = None,
) -> Policies:
    """Check the schedule and policy arguments of `schedule()` (SPEC-policies)."""
    if run_at is not None:
        return _one_shot(
            interval_seconds,
            cron=cron,
            recurrence=recurrence,
            start_at=start_at,
            end_at=end_at,
            run_at=run_at,
            policies=validate_policies(
                1.0,  # a stand-in, to check the other options exactly as for a grid
                timezone=timezone,
                misfire=misfire,
                max_catch_up=max_catch_up,
                grace_seconds=grace_seconds,
                overlap=overlap,
                jitter_seconds=jitter_seconds,
                max_runtime_seconds=max_runtime_seconds,
            ),
        )
    if (interval_seconds is None) == (cron is None):
        raise InvalidJobError("interval_seconds", "give exactly one of interval_seconds, cron and run_at")
    interval = None
    if interval_seconds is not None:
        if _seconds("interval_seconds", interval_seconds, allow_zero=False) < MIN_INTERVAL_SECONDS:
            raise InvalidJobError(
                "interval_seconds",
                f"must be at least one microsecond (the store's resolution), got {interval_seconds!r}",
            )
        interval = _micros("interval_seconds", interval_seconds, allow_zero=False)
    expression = None if cron is None else _triggers.validate_cron(cron)
    if expression is not None and len(expression) > MAX_CRON_LENGTH:  # as stored: whitespace collapsed
        raise InvalidJobError("cron", f"must be at most {MAX_CRON_LENGTH} characters, got {len(expression)}")
    if isinstance(timezone, str) and len(timezone) > MAX_TIMEZONE_LENGTH:
        raise InvalidJobError("timezone", f"must be at most {MAX_TIMEZONE_LENGTH} characters, got {len(timezone)}")
    zone = _triggers.validate_timezone(timezone)
    rec = _choice("recurrence", recurrence)
    if rec == "fixed_delay" and expression is not None:
        raise InvalidJobError("recurrence", "fixed_delay needs interval_seconds; a cron job runs on its expression")
    mis = _choice("misfire", misfire)
    if mis == "catch_up":
        if isinstance(max_catch_up, bool) or not isinstance(max_catch_up, int) or max_catch_up < 1:
            raise InvalidJobError(
                "max_catch_up", f"must be a whole number >= 1 with misfire='catch_up', got {shown(max_catch_up)}"
            )
        if max_catch_up > MAX_STORED_INT:
            raise InvalidJobError("max_catch_up", f"must be at most {MAX_STORED_INT}, got {shown(max_catch_up)}")
        if rec == "fixed_delay":
            raise InvalidJobError("misfire", "catch_up needs slots to catch up; fixed_delay has no grid")
    elif max_catch_up is not None:
        raise InvalidJobError("max_catch_up", f"only applies with misfire='catch_up' (misfire is {mis!r})")
    start, end = _instant("start_at", start_at), _instant("end_at", end_at)
    if start is not None and end is not None and end < start:
        raise InvalidJobError("end_at", f"must not be before start_at ({start_at} > {end_at})")
    runtime = None
    if max_runtime_seconds is not None:
        runtime = _micros("max_runtime_seconds", max_runtime_seconds, allow_zero=False)
    return Policies(
        interval=interval,
        cron=expression,
        timezone=zone,
        recurrence=rec,
        misfire=mis,
        max_catch_up=max_catch_up if mis == "catch_up" else None,
        grace=_micros("grace_seconds", grace_seconds, allow_zero=True),
        overlap=_choice("overlap", overlap),
        jitter=_micros("jitter_seconds", jitter_seconds, allow_zero=True),
        start_at=start,
        end_at=end,
        max_runtime=runtime,
    )


def _one_shot(
    interval_seconds: object,
    *,
    cron: object,
    recurrence: object,
    start_at: object,
    end_at: object,
    run_at: object,
    policies: Policies,
) -> Policies:
    """A one-shot job: one slot at `run_at`, kept as a window of one instant (start_at = end_at = run_at)."""
    for argument, value in (("interval_seconds", interval_seconds), ("cron", cron)):
        if value is not None:
            raise InvalidJobError(argument, "give exactly one of interval_seconds, cron and run_at")
    for argument, value in (("start_at", start_at), ("end_at", end_at)):
        if value is not None:
            raise InvalidJobError(argument, "a one-shot job (run_at) has no window; its one run is at run_at")
    if recurrence != "fixed_rate":
        raise InvalidJobError("recurrence", f"a one-shot job (run_at) does not recur, got {recurrence!r}")
    at = _instant("run_at", run_at)
    return dataclasses.replace(policies, interval=None, start_at=at, end_at=at)


def validate_definition(
    job_id: object,
    target: str,
    policies: Policies,
    args: object,
    kwargs: object,
    start_in: object,
    *,
    max_args_bytes: int = DEFAULT_MAX_ARGS_BYTES,
) -> JobDefinition:
    """Check the remaining arguments of `schedule()` (the target and policies are checked by the caller)."""
    job_id = validate_job_id(job_id)
    if not isinstance(args, (tuple, list)):
        raise InvalidJobError("args", f"must be a tuple or list, got {type(args).__name__}")
    args_json = _to_json("args", list(args), max_args_bytes)
    if kwargs is None:
        kwargs = {}
    if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
        raise InvalidJobError("kwargs", f"must be a dict with str keys, got {shown(kwargs)}")
    kwargs_json = _to_json("kwargs", kwargs, max_args_bytes)
    start = None if start_in is None else _micros("start_in", start_in, allow_zero=True)
    if start is not None and policies.cron is not None:
        raise InvalidJobError("start_in", "a cron job starts on its expression; use start_at to delay it")
    if start is not None and policies.interval is None and policies.cron is None:
        raise InvalidJobError("start_in", "a one-shot job runs at its run_at; give run_at alone")
    if start is not None and policies.start_at is not None:
        raise InvalidJobError("start_in", "give start_in or start_at, not both")
    return JobDefinition(job_id, target, args_json, kwargs_json, policies, start)
