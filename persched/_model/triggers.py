"""When a job's slots fall: fixed-rate grids, cron expressions and one-shot instants, pure.

One class per kind of trigger in `TRIGGERS`, behind the `Trigger` protocol; nothing else asks
"interval or cron?". Slots are whole microseconds; cron slots fall on whole seconds. The cron
daylight-saving rules, and why mapping naive wall times keeps forward and reverse iteration in step:
docs/explanation/interfaces.md, "Cron and daylight saving".
"""

from __future__ import annotations

import functools
import hashlib
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, ClassVar, Final, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from ..errors import InvalidJobError
from .checks import WHOLE, shown
from .instant import US_PER_SECOND, Instant, Micros, to_datetime

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

__all__ = [
    "CRON_SHORTCUTS",
    "NEVER",
    "TRIGGERS",
    "JitterReach",
    "Slots",
    "Trigger",
    "TriggerSpec",
    "chosen_kind",
    "cron_trigger",
    "describe_duration",
    "interval_trigger",
    "jitter_offset",
    "kind_of",
    "validate_cron",
    "validate_timezone",
]

MAX_CRON_COUNT: Final = 10_000  # slots count_between walks before it answers None ("unknown count")
_FIELDS: Final = (  # (name, what it accepts), for error messages
    ("minute", "0-59"),
    ("hour", "0-23"),
    ("day of month", "1-31, L or LW"),
    ("month", "1-12 or JAN-DEC"),
    ("day of week", "0-7 or SUN-SAT, with L or #n"),
)
_SECOND: Final = ("second", "0-59")
CRON_SHORTCUTS: Final = {  # Vixie cron's (crontab(5)); @reboot has no meaning for a persistent schedule
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_REFERENCE: Final = datetime(2024, 1, 1)  # where validate_cron looks for a first firing (naive wall time)
_ONE_SECOND: Final = timedelta(seconds=1)


NEVER: Final = Instant(2**62)  # "no further slot": past any datetime (year 9999 is ~2.5e17 µs)


class TriggerSpec(Protocol):
    """What a kind of trigger reads of a job's validated policies (`persched._model.models.Policies`)."""

    @property
    def interval(self) -> Micros | None: ...
    @property
    def cron(self) -> str | None: ...
    @property
    def timezone(self) -> str: ...
    @property
    def recurrence(self) -> str: ...
    @property
    def start_at(self) -> Instant | None: ...
    @property
    def end_at(self) -> Instant | None: ...


class Slots(Protocol):
    """The slots of one job, as instants: a `Trigger` instance, or `persched._model.exclusions.ExcludingSlots`."""

    def next_after(self, t: Instant) -> Instant:
        """Return the first slot strictly after `t` (`NEVER` if there is none)."""

    def latest_at_or_before(self, t: Instant) -> Instant | None:
        """Return the most recent slot at or before `t`, or None if there is none."""

    def recent_slots(self, floor: Instant, t: Instant, n: int) -> list[Instant]:
        """Return up to `n` most recent slots ``s`` with ``floor <= s <= t``, oldest first, in O(n)."""

    def count_between(self, a: Instant, b: Instant) -> int | None:
        """Return how many slots ``s`` have ``a <= s <= b``, or None if that is too costly to know."""

    def describe(self) -> str:
        """Return the slots in words a person reads, e.g. "every 5 min"."""


class Trigger(Slots, Protocol):
    """The slots of one job (instance side, `Slots`); its class is one kind of trigger."""

    ARGUMENT: ClassVar[str]  # the schedule() argument that chooses this kind (also its Job field)

    @classmethod
    def holds(cls, spec: TriggerSpec) -> bool:
        """True if validated policies `spec` are of this kind."""

    @classmethod
    def refusal(cls, argument: str, value: object) -> str | None:
        """Why ``argument=value`` (not its default) of schedule() does not apply to this kind, or None."""

    @classmethod
    def argument_of(cls, spec: TriggerSpec) -> object:
        """Return the value of this kind's argument that gave `spec` (in `spec`'s units)."""

    @classmethod
    def fields_of(cls, value: object) -> dict[str, object]:
        """Return the policy fields that keep the checked argument `value` (`argument_of` reversed)."""

    @classmethod
    def place(cls, spec: TriggerSpec, now: Instant, start_in: Micros | None) -> tuple[Instant, Instant]:
        """Return ``(anchor, next_run_at)`` of a new job of this kind placed at `now`."""

    @classmethod
    def of(cls, spec: TriggerSpec, anchor: Instant) -> Trigger | None:
        """Return the slots of a job of this kind anchored at `anchor` (None: fixed delay, no grid)."""


@dataclass(frozen=True)
class IntervalTrigger:
    """Slots ``anchor + k * interval`` for whole ``k >= 0``: exact integer arithmetic."""

    anchor: Instant
    interval: Micros

    ARGUMENT: ClassVar[str] = "interval_seconds"

    @classmethod
    def holds(cls, spec: TriggerSpec) -> bool:
        return spec.interval is not None

    @classmethod
    def refusal(cls, argument: str, value: object) -> str | None:
        return None

    @classmethod
    def argument_of(cls, spec: TriggerSpec) -> object:
        return spec.interval

    @classmethod
    def fields_of(cls, value: object) -> dict[str, object]:
        return {"interval": value}

    @classmethod
    def place(cls, spec: TriggerSpec, now: Instant, start_in: Micros | None) -> tuple[Instant, Instant]:
        interval, start_at = spec.interval, spec.start_at
        assert interval is not None
        if start_at is None:
            anchor = Instant(now + (interval if start_in is None else start_in))
            return anchor, anchor
        if start_at >= now:
            return start_at, start_at
        if spec.recurrence == "fixed_delay":  # from a past start: at once
            return start_at, now
        # A grid anchored at a past start_at: its first slot from now on.
        return start_at, interval_trigger(start_at, interval).next_after(Instant(now - 1))

    @classmethod
    def of(cls, spec: TriggerSpec, anchor: Instant) -> Trigger | None:
        assert spec.interval is not None
        return None if spec.recurrence == "fixed_delay" else interval_trigger(anchor, spec.interval)

    def _slot(self, k: int) -> Instant:
        return Instant(self.anchor + k * self.interval)

    def _index_at_or_before(self, t: int) -> int:
        """The largest `k` with ``slot(k) <= t`` (may be negative)."""
        return (t - self.anchor) // self.interval

    def next_after(self, t: Instant) -> Instant:
        return self._slot(max(self._index_at_or_before(t) + 1, 0))

    def latest_at_or_before(self, t: Instant) -> Instant | None:
        k = self._index_at_or_before(t)
        return self._slot(k) if k >= 0 else None

    def recent_slots(self, floor: Instant, t: Instant, n: int) -> list[Instant]:
        last = self._index_at_or_before(t)
        first = max(last - n + 1, 0, -((self.anchor - floor) // self.interval))  # the first k with slot(k) >= floor
        return [self._slot(k) for k in range(first, last + 1)]

    def count_between(self, a: Instant, b: Instant) -> int | None:
        first = max(self._index_at_or_before(a - 1) + 1, 0)  # the first k with slot(k) >= a
        return max(self._index_at_or_before(b) - first + 1, 0)

    def describe(self) -> str:
        return f"every {describe_duration(self.interval)}"


@dataclass(frozen=True)
class CronTrigger:
    """Slots where a cron expression matches local wall time in `timezone`.

    Daylight saving: docs/explanation/interfaces.md, "Cron and daylight saving".
    """

    expression: str
    timezone: str

    ARGUMENT: ClassVar[str] = "cron"

    @classmethod
    def holds(cls, spec: TriggerSpec) -> bool:
        return spec.cron is not None

    @classmethod
    def refusal(cls, argument: str, value: object) -> str | None:
        if argument == "recurrence" and value == "fixed_delay":
            return "fixed_delay needs interval_seconds; a cron job runs on its expression"
        if argument == "start_in":
            return "a cron job starts on its expression; use start_at to delay it"
        return None

    @classmethod
    def argument_of(cls, spec: TriggerSpec) -> object:
        return spec.cron

    @classmethod
    def fields_of(cls, value: object) -> dict[str, object]:
        return {"cron": value}

    @classmethod
    def place(cls, spec: TriggerSpec, now: Instant, start_in: Micros | None) -> tuple[Instant, Instant]:
        floor = now if spec.start_at is None else max(now, spec.start_at)
        first = cls._of(spec).next_after(Instant(floor - 1))
        return first, first  # a slot exactly at `floor` counts

    @classmethod
    def of(cls, spec: TriggerSpec, anchor: Instant) -> Trigger | None:
        return cls._of(spec)

    @staticmethod
    def _of(spec: TriggerSpec) -> Trigger:
        assert spec.cron is not None
        return cron_trigger(spec.cron, spec.timezone)

    @property
    def _fields(self) -> str:
        """The expression as cronsim reads it: a shortcut's fields, else the expression itself."""
        return CRON_SHORTCUTS.get(self.expression, self.expression)

    def _wall(self, instant: int) -> datetime:
        return datetime.fromtimestamp(instant, ZoneInfo(self.timezone)).replace(tzinfo=None)

    def _transition(self, lo: int, hi: int) -> int:
        """The instant in ``(lo, hi]`` where the UTC offset changes (exactly one change lies there)."""
        zone = ZoneInfo(self.timezone)
        before = datetime.fromtimestamp(lo, zone).utcoffset()
        while hi - lo > 1:  # tzdata transitions fall on whole seconds: O(log of the DST shift)
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if datetime.fromtimestamp(mid, zone).utcoffset() == before else (lo, mid)
        return hi

    def _instant(self, wall: datetime) -> int:
        """The slot of a matching wall time: its first occurrence, or the end of the gap it falls in."""
        zone = ZoneInfo(self.timezone)
        first = round(wall.replace(tzinfo=zone, fold=0).timestamp())  # in a gap: the offset before it
        if self._wall(first) == wall:
            return first
        return self._transition(round(wall.replace(tzinfo=zone, fold=1).timestamp()), first)

    def _boundary(self, instant: int) -> datetime:
        """The wall time `w` such that the matches at or before `w` are exactly those with slot <= instant."""
        local = datetime.fromtimestamp(instant, ZoneInfo(self.timezone))
        if not local.fold:
            return local.replace(tzinfo=None)
        # Second occurrence of a repeated hour: every wall time of that hour fired at its first
        # occurrence, before `instant`, so the boundary is the last wall time of the repeated hour.
        first = round(local.replace(fold=0).timestamp())
        return self._wall(self._transition(first, instant) - 1)

    def _forward(self, after: int) -> Iterator[int]:
        """Distinct slots strictly after `after`, ascending."""
        it = CronSim(self._fields, self._boundary(after))
        while True:
            try:
                wall = next(it)
                s = self._instant(wall)
                if self._wall(s) != wall:  # a gap: skip its other wall times, they fire at `s` too
                    it = CronSim(self._fields, self._wall(s))
            except (StopIteration, OverflowError):
                return
            yield s

    def _backward(self, at_or_before: int) -> Iterator[int]:
        """Distinct slots at or before `at_or_before`, descending."""
        it = CronSim(self._fields, self._boundary(at_or_before) + _ONE_SECOND, reverse=True)
        previous = None
        while True:
            try:
                wall = next(it)
                s = self._instant(wall)
                if self._wall(s) != wall:  # a gap: continue before its first wall time
                    it = CronSim(self._fields, self._wall(s - 1) + _ONE_SECOND, reverse=True)
            except (StopIteration, OverflowError):
                return
            if s != previous:  # the wall time that ends a gap and the gap itself share a slot
                yield s
            previous = s

    # The private iterators work in whole seconds; a floor division picks the second at or before.

    def next_after(self, t: Instant) -> Instant:
        s = next(self._forward(t // US_PER_SECOND), None)
        return NEVER if s is None else Instant(s * US_PER_SECOND)

    def latest_at_or_before(self, t: Instant) -> Instant | None:
        s = next(self._backward(t // US_PER_SECOND), None)
        return None if s is None else Instant(s * US_PER_SECOND)

    def recent_slots(self, floor: Instant, t: Instant, n: int) -> list[Instant]:
        slots: list[Instant] = []
        for s in self._backward(t // US_PER_SECOND):
            if len(slots) >= n or s * US_PER_SECOND < floor:
                break
            slots.append(Instant(s * US_PER_SECOND))
        return slots[::-1]

    def count_between(self, a: Instant, b: Instant) -> int | None:
        count = 0
        for s in self._forward((a - 1) // US_PER_SECOND):  # slots >= a
            if s * US_PER_SECOND > b:
                return count
            count += 1
            if count > MAX_CRON_COUNT:
                return None
        return count

    def describe(self) -> str:
        return f"cron {self.expression}" + ("" if self.timezone == "UTC" else f" {self.timezone}")


@dataclass(frozen=True)
class OneShotTrigger:
    """One slot, `at`, stored as a window of one instant (start_at = end_at = run_at).

    Past it, `next_after` answers ``at + 1``, not `NEVER` (which no datetime column holds): that lies
    past the window, so the job is finished.
    """

    at: Instant

    ARGUMENT: ClassVar[str] = "run_at"

    @classmethod
    def holds(cls, spec: TriggerSpec) -> bool:
        return spec.interval is None and spec.cron is None

    @classmethod
    def refusal(cls, argument: str, value: object) -> str | None:
        if argument in ("start_at", "end_at"):
            return "a one-shot job (run_at) has no window; its one run is at run_at"
        if argument == "recurrence":
            return f"a one-shot job (run_at) does not recur, got {shown(value, WHOLE)}"
        if argument == "start_in":
            return "a one-shot job runs at its run_at; give run_at alone"
        if argument == "exclude":
            return "a one-shot job (run_at) has one slot, at run_at; excluded dates apply to interval and cron jobs"
        return None

    @classmethod
    def argument_of(cls, spec: TriggerSpec) -> object:
        return spec.end_at

    @classmethod
    def fields_of(cls, value: object) -> dict[str, object]:
        return {"start_at": value, "end_at": value}  # a window of one instant

    @classmethod
    def place(cls, spec: TriggerSpec, now: Instant, start_in: Micros | None) -> tuple[Instant, Instant]:
        # Also when it passed: it then runs at once, by its misfire policy.
        assert spec.end_at is not None
        return spec.end_at, spec.end_at

    @classmethod
    def of(cls, spec: TriggerSpec, anchor: Instant) -> Trigger | None:
        assert spec.end_at is not None
        return cls(spec.end_at)

    def next_after(self, t: Instant) -> Instant:
        return self.at if t < self.at else Instant(max(t, self.at) + 1)

    def latest_at_or_before(self, t: Instant) -> Instant | None:
        return self.at if self.at <= t else None

    def recent_slots(self, floor: Instant, t: Instant, n: int) -> list[Instant]:
        return [self.at] if n > 0 and floor <= self.at <= t else []

    def count_between(self, a: Instant, b: Instant) -> int | None:
        return 1 if a <= self.at <= b else 0

    def describe(self) -> str:
        return "once at " + to_datetime(self.at).isoformat().replace("+00:00", "Z")


# The kinds of trigger, in the order schedule()'s "give exactly one of ..." names their arguments.
TRIGGERS: Final[tuple[type[Trigger], ...]] = (IntervalTrigger, CronTrigger, OneShotTrigger)


def kind_of(spec: TriggerSpec) -> type[Trigger]:
    """Return the kind of trigger of validated policies `spec`."""
    for kind in TRIGGERS:
        if kind.holds(spec):
            return kind
    raise AssertionError(f"no kind of trigger holds {spec!r}")  # validated policies are of exactly one kind


def chosen_kind(is_given: Callable[[str], bool]) -> type[Trigger]:
    """Return the kind whose argument schedule() was given (`is_given(argument)`), exactly one.

    Raises:
        InvalidJobError: None or several of the kinds' arguments are given; it names the first of them.
    """
    given = [kind for kind in TRIGGERS if is_given(kind.ARGUMENT)]
    if len(given) != 1:
        arguments = [kind.ARGUMENT for kind in TRIGGERS]
        raise InvalidJobError(
            (given or TRIGGERS)[0].ARGUMENT,
            f"give exactly one of {', '.join(arguments[:-1])} and {arguments[-1]}",
        )
    return given[0]


def interval_trigger(anchor: Instant, interval: Micros) -> Trigger:
    """Return the fixed-rate grid ``anchor + k * interval``, ``k >= 0``.

    Raises:
        InvalidJobError: `interval` is below one microsecond (the store's resolution).
    """
    if interval < 1:
        raise InvalidJobError("interval_seconds", f"must be at least one microsecond, got {interval} µs")
    return IntervalTrigger(anchor, interval)


@functools.lru_cache(maxsize=1024)
def cron_trigger(expression: str, timezone: str = "UTC") -> Trigger:
    """Return the trigger of a cron expression on wall time in an IANA zone (cached).

    Raises:
        InvalidJobError: The expression or the zone is not valid (see `validate_cron`, `validate_timezone`).
    """
    return CronTrigger(validate_cron(expression), validate_timezone(timezone))


def validate_cron(expression: object) -> str:
    """Return `expression` with its whitespace collapsed, if it is a cron expression that fires.

    Raises:
        InvalidJobError: ("cron", reason); the reason names the bad field.
    """
    if not isinstance(expression, str):
        raise InvalidJobError("cron", f"must be a string such as '0 3 * * *', got {type(expression).__name__}")
    fields = expression.split()
    normal = " ".join(fields)
    if normal.startswith("@"):
        return _validate_shortcut(normal)
    if len(fields) not in (5, 6):
        raise InvalidJobError(
            "cron",
            f"{normal!r} has {len(fields)} fields; give 5 (minute hour day-of-month month day-of-week) "
            "or 6 (a seconds field first)",
        )
    names = _FIELDS if len(fields) == 5 else (_SECOND, *_FIELDS)
    for i, (token, (name, allowed)) in enumerate(zip(fields, names, strict=True), start=1):
        probe = ["*"] * len(fields)
        probe[i - 1] = token  # one field at a time, so the error can name it
        try:
            CronSim(" ".join(probe), _REFERENCE)
        except (CronSimError, ValueError):
            raise InvalidJobError(
                "cron", f"field {i} ({name}) {token!r} in {normal!r} is not valid: use {allowed}, *, a-b, a,b or /n"
            ) from None
    try:
        next(CronSim(normal, _REFERENCE))
    except CronSimError:  # every field is fine alone: the day of month never occurs in those months
        raise InvalidJobError(
            "cron", f"{normal!r} never fires: day of month {fields[-3]!r} never occurs in month {fields[-2]!r}"
        ) from None
    except StopIteration:
        raise InvalidJobError(
            "cron",
            f"{normal!r} never fires: day of month {fields[-3]!r}, month {fields[-2]!r} and day of week "
            f"{fields[-1]!r} never match together",
        ) from None
    return normal


def _validate_shortcut(normal: str) -> str:
    shortcut = normal.lower()
    if shortcut in CRON_SHORTCUTS:
        return shortcut
    if shortcut == "@reboot":
        raise InvalidJobError(
            "cron",
            "'@reboot' has no meaning here: a job's schedule outlives every restart; to run a callable at "
            "each start-up, schedule a one-shot then: schedule(job_id, fn, run_at=datetime.now(timezone.utc))",
        )
    raise InvalidJobError(
        "cron", f"{normal!r} is not a shortcut; use one of {', '.join(CRON_SHORTCUTS)}, or 5 or 6 fields"
    )


def validate_timezone(name: object) -> str:
    """Return `name` if it is an IANA time zone known to `zoneinfo` ("UTC" included).

    Raises:
        InvalidJobError: ("timezone", reason).
    """
    if not isinstance(name, str) or not name:
        raise InvalidJobError(
            "timezone", f"must be an IANA time zone name such as 'Europe/Paris', got {shown(name, WHOLE)}"
        )
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise InvalidJobError(
            "timezone", f"{name!r} is not an IANA time zone name, e.g. 'Europe/Paris' or 'UTC'"
        ) from None
    return name


class JitterReach:
    """The largest jitter (µs) of the due times one store handed out; it only grows.

    `persched._engine.window` subtracts it from a due time for a lower bound on the job's next_run_at;
    `persched._model.policy.JobPlan.due_at` counts every due time here.
    """

    def __init__(self) -> None:
        self._reach = 0
        self._lock = threading.Lock()

    def __call__(self) -> Micros:
        return Micros(self._reach)

    def widen(self, jitter: Micros) -> None:
        """Count a due time computed with `jitter`."""
        if jitter > self._reach:
            with self._lock:  # read-modify-write: two threads must not shrink it
                self._reach = max(self._reach, jitter)


def jitter_offset(job_id: str, generation: int, slot: Instant, jitter: Micros) -> Micros:
    """Return the run's offset after its slot, in ``[0, jitter)``: a hash, the same in every process."""
    if jitter <= 0:
        return Micros(0)
    key = f"{job_id}\x00{generation}\x00{slot}".encode()
    fraction = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big")  # uniform in [0, 2**64)
    return Micros((fraction * jitter) >> 64)


def _number(x: float) -> str:
    return f"{x:.6f}".rstrip("0").rstrip(".")


def describe_duration(us: int) -> str:
    """Return a duration in words: "250 ms", "1.5 s", "90 s", "5 min", "2 h", "1 day", "3 days"."""
    for unit, singular, plural in (
        (86_400_000_000, "day", "days"),
        (3_600_000_000, "h", "h"),
        (60_000_000, "min", "min"),
    ):
        if us >= unit and us % unit == 0:
            n = us // unit
            return f"{n} {singular if n == 1 else plural}"
    if 0 < us < US_PER_SECOND:
        return f"{_number(us / 1000)} ms"
    return f"{_number(us / US_PER_SECOND)} s"
