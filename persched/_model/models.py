"""A job as `schedule()` defines it: `Policies`, `JobDefinition`, each option declared once (`OPTIONS`).

`Job` and `Run` (pydantic) are loaded from `public_models` on first use (PEP 562), so a read command
pays no pydantic for `JobState`, `OPTIONS` or the checks.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal, cast

from ..errors import InvalidJobError
from . import triggers as _triggers
from .checks import (
    DEFAULT_MAX_ARGS_BYTES,
    MAX_CRON_LENGTH,
    MAX_INTERVAL_SECONDS,
    MAX_STORED_INT,
    MAX_TIMEZONE_LENGTH,
    MIN_INTERVAL_SECONDS,
    as_choice,
    as_instant,
    as_json,
    as_micros,
    as_seconds,
    check_encodable,
    shown,
    validate_job_id,
    validate_namespace,
)
from .exclusions import validate_exclude
from .instant import Instant, Micros, from_datetime, micros, seconds, to_datetime
from .policy import DEFAULT_RETRY_BACKOFF, DEFAULT_RETRY_DELAY, DEFAULT_STOP_GRACE
from .terms import DEFAULT_NAMESPACE, Executor, JobState, Misfire, OnOverrun, Outcome, Overlap, Recurrence

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from datetime import datetime
    from typing import TypeAlias

    from .public_models import Job, Run
    from .triggers import TriggerSpec

    Checked: TypeAlias = Mapping[str, Any]  # the options checked before one, by Policies field
    Given: TypeAlias = Mapping[str, object]  # every option as given, by name
    # An option's check: (its name, its value as given, checked, given) -> its Policies value;
    # raises InvalidJobError naming the argument.
    Check: TypeAlias = Callable[[str, object, Checked, Given], object]

__all__ = [  # with the names of `terms` and `checks` its callers import from here
    "CLAIM_POLICY_COLUMNS",
    "DEFAULT_MAX_ARGS_BYTES",
    "DEFAULT_NAMESPACE",
    "KEYWORD_OPTIONS",
    "MAX_INTERVAL_SECONDS",
    "MAX_STORED_INT",
    "OPTIONS",
    "POLICY_COLUMNS",
    "Executor",
    "Job",
    "JobDefinition",
    "JobState",
    "Misfire",
    "OnOverrun",
    "Option",
    "Outcome",
    "Overlap",
    "Policies",
    "Recurrence",
    "Run",
    "check_encodable",
    "check_stored",
    "given_options",
    "job_policy_fields",
    "shown",
    "stored_interval",
    "validate_definition",
    "validate_job_id",
    "validate_namespace",
    "validate_policies",
]


DEFAULT_GRACE: Final = Micros(1_000_000)  # grace_seconds=1.0
NO_JITTER: Final = Micros(0)
NO_MICROS: Final = 2**62  # µs (146,000 years): stands in for a stored duration beyond any (see _micros_of_column)


def __getattr__(name: str) -> Any:  # noqa: ANN401 - PEP 562
    if name not in ("Job", "Run"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from . import public_models as _public_models  # pydantic, on first use only (see the module docstring)

    value = getattr(_public_models, name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


@dataclass(frozen=True)
class Policies:
    """The policy options of a job (docs/how-to/schedules.md), validated (all part of its definition).

    Durations and instants are whole microseconds (`persched._model.instant`), rounded once, at `schedule()`.
    Each field is the `Option.attr` of one of `OPTIONS`, which maps it to and from its column.
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
    on_overrun: str = "warn"
    executor: str = "thread"
    stop_grace: Micros = DEFAULT_STOP_GRACE
    exclude: tuple[str, ...] | None = None  # canonical entries (`persched._model.exclusions`)
    pause_after_failures: int | None = None  # pause after this many failed slots in a row
    retries: int = 0  # a failed run is tried again up to this many times, within its slot
    retry_delay: Micros = DEFAULT_RETRY_DELAY
    retry_backoff: float = DEFAULT_RETRY_BACKOFF
    retry_max_delay: Micros | None = None
    retry_lost: bool = False

    def columns(self) -> dict[str, Any]:
        """Return the policy columns of persched_jobs (seconds as floats, instants as datetimes)."""
        return {name: to_column(getattr(self, attr)) for name, attr, to_column, _, _ in _COLUMNS}

    @classmethod
    def from_columns(cls, column: Callable[[str], Any], *, for_claims: bool = False) -> Policies:
        """Return the policies of a row, `column(name)` giving each column's value (unchecked: `check_stored`).

        `for_claims` reads only `CLAIM_POLICY_COLUMNS` and leaves the others at their defaults.
        """
        fields = {}
        for name, attr, read in _READ_CLAIMS if for_claims else _READ_ALL:  # the claims' hot path: kept lean
            value = column(name)
            fields[attr] = value if read is None or value is None else read(value)
        return cls(**fields)

    def arguments(self) -> dict[str, Any]:
        """Return the schedule() arguments that give these policies, but the window's instants."""
        kind = _triggers.kind_of(self).ARGUMENT
        return {
            # excluded dates: as schedule() takes them (entries), not as their column keeps them (JSON text)
            option.name: option.read(self) if option.unit == "dates" else option.to_column(option.read(self))
            for option in OPTIONS
            if option.name == kind or (option.unit != "instant" and option.attr is not None)
        }


@dataclass(frozen=True, slots=True)  # slots: declare() holds one a spec, 100,000 of them
class JobDefinition:
    """What `schedule()` writes, validated.

    All but `start_in` (which only places a new grid) decide "identical" versus "replaced"
    (`persched._store.shapes.Shapes.holds`).
    """

    job_id: str
    target: str
    args_json: str
    kwargs_json: str
    policies: Policies
    start_in: Micros | None


Unit = Literal["seconds", "instant", "plain", "dates"]


@dataclass(frozen=True)
class Option:
    """One argument of ``schedule()`` that is part of a job's definition.

    Its keyword, `Job` field and column are all `name`; `attr` is its `Policies` field (None: kept in
    other fields, see `read`). `unit` maps a value between the two: float seconds <-> whole µs, aware
    datetime <-> instant, JSON text <-> a tuple of dates, or as it is. Adding an option: docs/design.md,
    "Code map"; tests/unit/test_options.py checks the explicit surfaces against this.
    """

    name: str
    attr: str | None
    unit: Unit
    default: object  # schedule()'s default (public units), also the Job field's
    check: Check
    shown: tuple[str, str] | None = None  # `persched show`: (label, words; {} is the value) when not the default
    read_by_claims: bool = True  # False: claims and completions never read it (`_store` leaves it out)

    def to_column(self, value: Any) -> Any:  # noqa: ANN401 - the Policies value of any option
        """Return a Policies value as its column's (and its Job field's) value."""
        return _TO_COLUMN[self.unit](value)

    def read(self, policies: Policies | TriggerSpec) -> Any:  # noqa: ANN401 - the Policies value of any option
        """Return this option's Policies value (run_at: as its kind reads it back; None for other kinds)."""
        if self.attr is not None:
            return getattr(policies, self.attr)
        kind = _triggers.kind_of(policies)
        return kind.argument_of(policies) if self.name == kind.ARGUMENT else None


def _plain(value: Any) -> Any:  # noqa: ANN401 - a column's value as it is
    return value


def _seconds_column(us: int | None) -> float | None:
    return None if us is None else seconds(us)


def _micros_of_column(value: float | None) -> Micros | None:
    # Exact for what persched wrote (``us / 1e6``): that float is within half an ulp of the true
    # quotient, far under half a microsecond.
    if value is None:
        return None
    us = value * 1_000_000
    if not math.isfinite(us):  # a hand edit (1e305 s): no whole µs; a value check_stored refuses stands in
        return Micros(int(math.copysign(NO_MICROS, us)))
    return Micros(round(us))


def _datetime_column(us: int | None) -> datetime | None:
    return None if us is None else to_datetime(us)


def _instant_of_column(value: datetime | None) -> Instant | None:
    return None if value is None else from_datetime(value)


def _dates_column(entries: tuple[str, ...] | None) -> str | None:
    return None if entries is None else json.dumps(list(entries), separators=(",", ":"))


def _dates_of_column(value: str | None) -> object:
    """A JSON array of text as a tuple; anything else (a hand edit) as it is, for `check_stored` to refuse."""
    if value is None:
        return None
    try:
        entries = json.loads(value)
    except (ValueError, RecursionError):
        return value
    return tuple(entries) if isinstance(entries, list) and all(isinstance(e, str) for e in entries) else value


def dates_field(value: str | None) -> tuple[str, ...] | None:
    """Return the `Job` field of an excluded-dates column (None if unreadable: `unreadable` says why)."""
    entries = _dates_of_column(value)
    return entries if isinstance(entries, tuple) else None


_TO_COLUMN: Final[dict[Unit, Callable[[Any], Any]]] = {
    "seconds": _seconds_column,
    "instant": _datetime_column,
    "plain": _plain,
    "dates": _dates_column,
}
_FROM_COLUMN: Final[dict[Unit, Callable[[Any], Any]]] = {
    "seconds": _micros_of_column,
    "instant": _instant_of_column,
    "plain": _plain,
    "dates": _dates_of_column,
}


def _check_interval(argument: str, value: object, checked: Checked, given: Given) -> Micros | None:
    if value is None:
        return None
    if as_seconds("interval_seconds", value, allow_zero=False) < MIN_INTERVAL_SECONDS:
        raise InvalidJobError(
            "interval_seconds", f"must be at least one microsecond (the store's resolution), got {value!r}"
        )
    return as_micros("interval_seconds", value, allow_zero=False)


def _check_cron(argument: str, value: object, checked: Checked, given: Given) -> str | None:
    if value is None:
        return None
    expression = _triggers.validate_cron(value)
    if len(expression) > MAX_CRON_LENGTH:  # as stored: whitespace collapsed
        raise InvalidJobError("cron", f"must be at most {MAX_CRON_LENGTH} characters, got {len(expression)}")
    return expression


def _check_timezone(argument: str, value: object, checked: Checked, given: Given) -> str:
    if isinstance(value, str) and len(value) > MAX_TIMEZONE_LENGTH:
        raise InvalidJobError("timezone", f"must be at most {MAX_TIMEZONE_LENGTH} characters, got {len(value)}")
    return _triggers.validate_timezone(value)


def _check_max_catch_up(argument: str, value: object, checked: Checked, given: Given) -> int | None:
    misfire = checked["misfire"]
    if misfire != "catch_up":
        if value is not None:
            raise InvalidJobError("max_catch_up", f"only applies with misfire='catch_up' (misfire is {misfire!r})")
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidJobError(
            "max_catch_up", f"must be a whole number >= 1 with misfire='catch_up', got {shown(value)}"
        )
    if value > MAX_STORED_INT:
        raise InvalidJobError("max_catch_up", f"must be at most {MAX_STORED_INT}, got {shown(value)}")
    if checked["recurrence"] == "fixed_delay":
        raise InvalidJobError("misfire", "catch_up needs slots to catch up; fixed_delay has no grid")
    return value


def _check_end_at(argument: str, value: object, checked: Checked, given: Given) -> Instant | None:
    end, start = as_instant("end_at", value), checked["start_at"]
    if start is not None and end is not None and end < start:
        raise InvalidJobError("end_at", f"must not be before start_at ({given['start_at']} > {value})")
    return end


def _check_choice(argument: str, value: object, checked: Checked, given: Given) -> str:
    return as_choice(argument, value)  # type: ignore[no-any-return]  # one of its choices, a str


def _duration(*, allow_zero: bool, optional: bool = False) -> Check:
    def check(argument: str, value: object, checked: Checked, given: Given) -> Micros | None:
        return None if optional and value is None else as_micros(argument, value, allow_zero=allow_zero)

    return check


def _check_exclude(argument: str, value: object, checked: Checked, given: Given) -> tuple[str, ...] | None:
    return validate_exclude(value)


def _check_pause_after_failures(argument: str, value: object, checked: Checked, given: Given) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidJobError(argument, f"must be None or a whole number >= 1, got {shown(value)}")
    if value > MAX_STORED_INT:
        raise InvalidJobError(argument, f"must be at most {MAX_STORED_INT}, got {shown(value)}")
    return value


MAX_RETRIES: Final = 100  # attempts of a slot past its first


def _check_retries(argument: str, value: object, checked: Checked, given: Given) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_RETRIES:
        raise InvalidJobError(argument, f"must be a whole number from 0 to {MAX_RETRIES}, got {shown(value)}")
    return value


def _check_backoff(argument: str, value: object, checked: Checked, given: Given) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidJobError(argument, f"must be a number >= 1, got {shown(value)}")
    try:
        backoff = float(value)
    except OverflowError:  # an int beyond any float
        raise InvalidJobError(argument, f"must be finite, got {shown(value)}") from None
    if not math.isfinite(backoff) or backoff < 1:
        raise InvalidJobError(argument, f"must be a finite number >= 1, got {value!r}")
    return backoff


def _check_flag(argument: str, value: object, checked: Checked, given: Given) -> bool:
    if not isinstance(value, bool):
        raise InvalidJobError(argument, f"must be True or False, got {shown(value)}")
    return value


def _check_instant(argument: str, value: object, checked: Checked, given: Given) -> Instant | None:
    return as_instant(argument, value)


# In the order of Job's fields and `persched show`'s lines; checked in this order too (an option's
# check sees the ones before it). The arguments of the kinds of trigger (`_triggers.TRIGGERS`) are
# options like the others: interval_seconds (positional on schedule()), cron, run_at.
OPTIONS: Final[tuple[Option, ...]] = (
    # Option(name, attr, unit, default, check, ...)
    Option("interval_seconds", "interval", "seconds", None, _check_interval),
    Option("cron", "cron", "plain", None, _check_cron),
    Option("timezone", "timezone", "plain", "UTC", _check_timezone),
    Option(
        "recurrence",
        "recurrence",
        "plain",
        "fixed_rate",
        _check_choice,
        shown=("recurrence", "{} (one interval after the previous run ends; no grid)"),
    ),
    Option("misfire", "misfire", "plain", "coalesce", _check_choice),
    Option("max_catch_up", "max_catch_up", "plain", None, _check_max_catch_up),
    Option(
        "grace_seconds",
        "grace",
        "seconds",
        1.0,
        _duration(allow_zero=True),
        shown=("grace", "{} (a slot not started by then is missed)"),
    ),
    Option(
        "overlap",
        "overlap",
        "plain",
        "forbid",
        _check_choice,
        shown=("overlap", "{} (slots passing while a run is in flight are dropped as missed)"),
    ),
    Option(
        "jitter_seconds",
        "jitter",
        "seconds",
        0.0,
        _duration(allow_zero=True),
        shown=("jitter", "each run starts up to {} after its slot"),
    ),
    # it placed the grid's anchor once; only a correction reads it again
    Option("start_at", "start_at", "instant", None, _check_instant, read_by_claims=False),
    Option("end_at", "end_at", "instant", None, _check_end_at),
    Option(
        "max_runtime_seconds",
        "max_runtime",
        "seconds",
        None,
        _duration(allow_zero=False, optional=True),
        shown=("max runtime", "{} (a longer run is reported as overran)"),
    ),
    Option(
        "on_overrun",
        "on_overrun",
        "plain",
        "warn",
        _check_choice,
        shown=("on overrun", "{} (a run past its max runtime is asked to stop)"),
    ),
    Option(
        "executor", "executor", "plain", "thread", _check_choice, shown=("executor", "{} (each run in a child process)")
    ),
    Option(
        "stop_grace_seconds",
        "stop_grace",
        "seconds",
        5.0,
        _duration(allow_zero=False),
        shown=("stop grace", "a stopped child process is killed {} after SIGTERM"),
    ),
    Option("exclude", "exclude", "dates", None, _check_exclude),
    Option("pause_after_failures", "pause_after_failures", "plain", None, _check_pause_after_failures),
    Option("retries", "retries", "plain", 0, _check_retries),
    Option("retry_delay_seconds", "retry_delay", "seconds", 10.0, _duration(allow_zero=False)),
    Option("retry_backoff", "retry_backoff", "plain", 2.0, _check_backoff),
    Option("retry_max_delay_seconds", "retry_max_delay", "seconds", None, _duration(allow_zero=False, optional=True)),
    Option("retry_lost", "retry_lost", "plain", False, _check_flag),
    # kept as a window of one instant: start_at = end_at = run_at (OneShotTrigger)
    Option("run_at", None, "instant", None, _check_instant),
)
# Each option kept in a Policies field of its own is a persched_jobs column:
# (name, attr, to its column, from its column, read by claims).
_COLUMNS: Final = tuple(
    (option.name, option.attr, _TO_COLUMN[option.unit], _FROM_COLUMN[option.unit], option.read_by_claims)
    for option in OPTIONS
    if option.attr is not None
)
KEYWORD_OPTIONS: Final = tuple(option for option in OPTIONS if option.name != "interval_seconds")  # keyword-only
# (name, attr, from its column: None when kept as it is), for Policies.from_columns.
_READ_ALL: Final = tuple((name, attr, None if read is _plain else read) for name, attr, _, read, _ in _COLUMNS)
_READ_CLAIMS: Final = tuple(entry for entry, (*_, claims) in zip(_READ_ALL, _COLUMNS, strict=True) if claims)
POLICY_COLUMNS: Final = tuple(name for name, *_ in _COLUMNS)  # the persched_jobs columns of the options
# The ones claims and completions read (the store's dispatch columns): not those only a placement needs.
CLAIM_POLICY_COLUMNS: Final = tuple(
    option.name for option in OPTIONS if option.attr is not None and option.read_by_claims
)
_DATES_COLUMNS: Final = tuple(option.name for option in OPTIONS if option.unit == "dates")  # shown as entries
_DERIVED: Final = tuple(option for option in OPTIONS if option.attr is None)  # kept in other fields (run_at)
_READ_BY_ATTR: Final = {attr: (name, read) for name, attr, read in _READ_ALL}  # for _ColumnSpec


def job_policy_fields(column: Callable[[str], Any]) -> dict[str, Any]:
    """Return a row's option fields for `Job`, each column as it stands (run_at as its kind reads it back)."""
    fields = {name: column(name) for name in POLICY_COLUMNS}
    fields.update((name, dates_field(fields[name])) for name in _DATES_COLUMNS)
    if _DERIVED:
        spec = cast("TriggerSpec", _ColumnSpec(column))  # what the kinds read, not a whole Policies a row
        fields.update((option.name, option.to_column(option.read(spec))) for option in _DERIVED)
    return fields


class _ColumnSpec:
    """A row's `Policies` fields, each read from its column when asked: a listing builds no `Policies`."""

    __slots__ = ("_column",)

    def __init__(self, column: Callable[[str], Any]) -> None:
        self._column = column

    def __getattr__(self, attr: str) -> Any:  # noqa: ANN401 - a Policies field of any option
        try:
            name, read = _READ_BY_ATTR[attr]
        except KeyError:
            raise AttributeError(attr) from None
        value = self._column(name)
        return value if read is None or value is None else read(value)


def given_options(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """Return the keyword options among `arguments` (a front end's ``locals()``), as given."""
    return {option.name: arguments[option.name] for option in KEYWORD_OPTIONS}


def validate_policies(interval_seconds: object = None, **options: object) -> Policies:
    """Check `schedule()`'s policy arguments: first the kind of trigger, then each option of `OPTIONS`."""
    given: dict[str, object] = {"interval_seconds": interval_seconds}
    for name, value in options.items():
        if name not in _BY_NAME or name == "interval_seconds":
            raise InvalidJobError(name, f"is not an option of schedule(); use one of {sorted(_BY_NAME)}")
        given[name] = value
    for option in OPTIONS:
        given.setdefault(option.name, option.default)
    kind = _triggers.chosen_kind(lambda argument: given[argument] is not None)
    for option in OPTIONS:
        value = given[option.name]
        if value is not option.default and value != option.default:
            reason = kind.refusal(option.name, value)
            if reason is not None:
                raise InvalidJobError(option.name, reason)
    checked: dict[str, Any] = {}
    for option in OPTIONS:
        checked[option.attr or option.name] = option.check(option.name, given[option.name], checked, given)
    for option in _DERIVED:  # a kind's argument without a field of its own (run_at): its kind keeps it
        value = checked.pop(option.name)
        if value is not None:
            checked.update(kind.fields_of(value))
    return Policies(**checked)


_BY_NAME: Final = {option.name: option for option in OPTIONS}


def check_stored(policies: Policies) -> None:
    """Check policies read from a row as schedule() checks its arguments (the window's instants aside).

    A hand-made UPDATE so fails here, not deep inside a decision.

    Raises:
        InvalidJobError: The policies are not ones schedule() would write.
    """
    validate_policies(**policies.arguments())


def stored_interval(value: float | None) -> Micros | None:
    """Return the `Policies.interval` of a stored interval_seconds, checked apart from the other policies.

    Raises:
        InvalidJobError: It is not an interval schedule() would write.
    """
    us = _micros_of_column(value)
    if us is not None and 1 <= us <= _MAX_INTERVAL_MICROS:  # accepted: the check's answer, without its work
        return us
    return _check_interval("interval_seconds", _seconds_column(us), {}, {})  # None, or refused: says why


_MAX_INTERVAL_MICROS: Final = micros(MAX_INTERVAL_SECONDS)


def validate_definition(
    job_id: str,
    target: str,
    policies: Policies,
    args: object,
    kwargs: object,
    start_in: object,
    *,
    max_args_bytes: int = DEFAULT_MAX_ARGS_BYTES,
) -> JobDefinition:
    """Check the remaining arguments of `schedule()` (the job id, target and policies are checked by the caller)."""
    if not isinstance(args, (tuple, list)):
        raise InvalidJobError("args", f"must be a tuple or list, got {type(args).__name__}")
    args_json = as_json("args", list(args), max_args_bytes)
    if kwargs is None:
        kwargs = {}
    if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
        raise InvalidJobError("kwargs", f"must be a dict with str keys, got {shown(kwargs)}")
    kwargs_json = as_json("kwargs", kwargs, max_args_bytes)
    start = None if start_in is None else as_micros("start_in", start_in, allow_zero=True)
    reason = None if start is None else _triggers.kind_of(policies).refusal("start_in", start_in)
    if reason is not None:
        raise InvalidJobError("start_in", reason)
    if start is not None and policies.start_at is not None:
        raise InvalidJobError("start_in", "give start_in or start_at, not both")
    return JobDefinition(job_id, target, args_json, kwargs_json, policies, start)
