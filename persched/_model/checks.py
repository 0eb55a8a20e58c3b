"""The checks of single arguments: each returns the value as kept or raises `InvalidJobError` naming it."""

from __future__ import annotations

import json
import math
import re
from datetime import datetime, timezone
from typing import Any, Final

from ..errors import InvalidJobError
from .instant import Instant, Micros, from_datetime, micros

__all__ = [
    "DEFAULT_MAX_ARGS_BYTES",
    "MAX_CRON_LENGTH",
    "MAX_INTERVAL_SECONDS",
    "MAX_STORED_INT",
    "MAX_TIMEZONE_LENGTH",
    "MIN_INTERVAL_SECONDS",
    "WHOLE",
    "as_choice",
    "as_instant",
    "as_json",
    "as_micros",
    "as_seconds",
    "check_encodable",
    "positive",
    "shown",
    "validate_job_id",
    "validate_namespace",
]

MAX_JOB_ID_LENGTH = 200
MAX_NAMESPACE_LENGTH: Final = 100
MAX_INTERVAL_SECONDS = 10 * 366 * 24 * 3600.0  # "at most 10 years"
MIN_INTERVAL_SECONDS = 1e-6  # the store keeps microseconds: a shorter interval has no distinct slots
MAX_CRON_LENGTH = 200  # characters: persched_jobs.cron is String(200)
MAX_TIMEZONE_LENGTH = 64  # characters: persched_jobs.timezone is String(64)
MAX_STORED_INT = 2**31 - 1  # an Integer column (max_catch_up) on PostgreSQL
DEFAULT_MAX_ARGS_BYTES = 64 * 1024  # per args / kwargs, as stored JSON; JobScheduler(max_args_bytes=...)
MAX_ARGS_DEPTH = 100  # nesting levels of args / kwargs (json would hit the recursion limit long before 5,000)
# Instants given by the caller: later ones leave no room for the slots after
# them (datetime ends at year 9999); earlier ones cannot be converted to UTC or
# shown in every time zone (datetime begins at year 1: 0001-01-01T12:00+14:00 is
# before it in UTC).
EARLIEST_INSTANT = datetime(1, 1, 2, tzinfo=timezone.utc)
LATEST_INSTANT = datetime(9000, 1, 1, tzinfo=timezone.utc)

WHOLE: Final = 2**31  # a `shown` limit that never cuts: repr() as it is, but safe for huge ints
_CONTROL_CHARACTERS: Final = re.compile("[\x00-\x1f\x7f-\x9f]")  # C0, DEL and C1: not in an id
# Values JSON gives back as they are (the round trip of `as_json`); text too when it is ASCII.
_PLAIN_SCALARS: Final = frozenset({int, float, bool, type(None)})
_JSON: Final = json.JSONEncoder(allow_nan=False, sort_keys=True, separators=(",", ":"))  # json.dumps makes one a call


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
        raise InvalidJobError("job_id", f"must be at most {MAX_JOB_ID_LENGTH} characters, got {len(job_id)}")
    if _CONTROL_CHARACTERS.search(job_id):
        raise InvalidJobError("job_id", f"must not contain control characters: {job_id!r}")
    check_encodable("job_id", job_id)
    return job_id


def validate_namespace(namespace: object, argument: str = "namespace") -> str:
    """Return `namespace` if it is acceptable (like a job id, at most 100 characters), else raise."""
    if not isinstance(namespace, str) or not namespace.strip():
        raise InvalidJobError(argument, f"must be a non-empty str such as 'billing', got {namespace!r}")
    if len(namespace) > MAX_NAMESPACE_LENGTH:
        raise InvalidJobError(argument, f"must be at most {MAX_NAMESPACE_LENGTH} characters, got {len(namespace)}")
    if _CONTROL_CHARACTERS.search(namespace):
        raise InvalidJobError(argument, f"must not contain control characters: {namespace!r}")
    check_encodable(argument, namespace)  # a lone surrogate: no database can store it
    return namespace


def as_seconds(argument: str, value: object, *, allow_zero: bool) -> float:
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
        raise InvalidJobError(argument, f"must be at most 10 years ({MAX_INTERVAL_SECONDS:.0f} s), got {shown(value)}")
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


def _plain(item: object) -> bool:
    return type(item) in _PLAIN_SCALARS or _ascii_text(item)


def _flat(value: object) -> bool:
    """True for a list of plain scalars, or a dict of them by ASCII keys (the usual args and kwargs): one
    level deep, no text a database refuses, and JSON gives it back as it is (no check or round trip needed)."""
    if type(value) is list:
        return all(map(_plain, value))
    return type(value) is dict and all(map(_plain, value.values())) and all(map(_ascii_text, value))


def _ascii_text(item: object) -> bool:
    return type(item) is str and item.isascii()


_EMPTY_JSON: Final[dict[type, str]] = {list: "[]", dict: "{}"}  # most jobs have no kwargs, many no args


def as_json(argument: str, value: object, max_bytes: int = DEFAULT_MAX_ARGS_BYTES) -> str:
    if type(value) in _EMPTY_JSON and not value:
        return _EMPTY_JSON[type(value)]
    flat = _flat(value)
    if not flat:
        _check_shape(argument, value)
    try:
        text = _JSON.encode(value)
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidJobError(argument, f"must be JSON-serialisable (persched never pickles): {exc}") from exc
    if len(text) > max_bytes:  # ASCII: json escapes everything else
        raise InvalidJobError(
            argument,
            f"is {len(text)} bytes as JSON, more than max_args_bytes ({max_bytes}); store large data elsewhere "
            "and pass a reference to it",
        )
    if not flat and json.loads(text) != value:
        # e.g. non-str dict keys, tuples nested inside: they would come back changed.
        raise InvalidJobError(argument, f"does not survive a JSON round trip unchanged: {shown(value, WHOLE)}")
    return text


_CHOICES: dict[str, tuple[str, ...]] = {
    "recurrence": ("fixed_rate", "fixed_delay"),
    "misfire": ("coalesce", "skip", "catch_up"),
    "overlap": ("forbid", "skip"),
    "on_overrun": ("warn", "stop"),
    "executor": ("thread", "process"),
}


def as_choice(argument: str, value: object) -> Any:  # noqa: ANN401 - one of the Literal types above
    if value not in _CHOICES[argument]:
        raise InvalidJobError(
            argument, f"must be one of {', '.join(map(repr, _CHOICES[argument]))}, got {shown(value, WHOLE)}"
        )
    return value


def as_micros(argument: str, value: object, *, allow_zero: bool) -> Micros:
    """`as_seconds`, rounded once to whole microseconds (an interval of 1/3 s is 333,333 µs)."""
    us = micros(as_seconds(argument, value, allow_zero=allow_zero))
    if us == 0 and not allow_zero:
        raise InvalidJobError(argument, f"must be at least one microsecond, got {value!r}")
    return Micros(us)


def as_instant(argument: str, value: object) -> Instant | None:
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise InvalidJobError(argument, f"must be a timezone-aware datetime, got {shown(value, WHOLE)}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidJobError(argument, f"must be timezone-aware (naive datetimes are ambiguous), got {value!r}")
    # Compared as aware datetimes, which never overflows; converting first would.
    if not EARLIEST_INSTANT <= value <= LATEST_INSTANT:
        raise InvalidJobError(
            argument,
            f"must be between {EARLIEST_INSTANT.isoformat()} and {LATEST_INSTANT.isoformat()}, got {value!r}",
        )
    return from_datetime(value)  # exact: a datetime holds whole microseconds


# -- the options of schedule(), declared once ----------------------------------------------------


def positive(argument: str, value: object, *, integer: bool = False, maximum: float) -> float:
    """Check a number > 0 and at most `maximum` (also ints beyond any float: no OverflowError)."""
    kinds: tuple[type, ...] = (int,) if integer else (int, float)
    kind = "a whole number" if integer else "a finite number of seconds"
    if isinstance(value, bool) or not isinstance(value, kinds):
        raise InvalidJobError(argument, f"must be {kind} > 0, got {shown(value)}")
    number: int | float = value  # type: ignore[assignment]  # checked int or float above
    # Compared before float(): an int and a float compare exactly, at any size.
    if not number > 0:
        raise InvalidJobError(argument, f"must be {kind} > 0, got {shown(value)}")
    if not number <= maximum:
        if not number < float("inf"):
            raise InvalidJobError(argument, f"must be finite, got {shown(value)}")
        raise InvalidJobError(argument, f"must be at most {maximum:g}, got {shown(value)}")
    return float(number)
