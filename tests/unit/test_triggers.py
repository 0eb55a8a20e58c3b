"""`persched._model.triggers`: interval and cron slots, the DST rules, validation, jitter, descriptions.

Instants are whole microseconds since the epoch (`persched._model.instant`), so every expected slot is an
exact ``int`` compared with ``==``. The DST tests check the rules of docs/how-to/schedules.md,
"Cron with a time zone", against instants worked out by hand and against a brute-force oracle written
from the rules, not against what a cron library happens to do; query instants are drawn at any microsecond,
not on whole seconds.
"""

from __future__ import annotations

import bisect
import functools
import math
import re
import time
from datetime import datetime, timedelta, timezone
from fractions import Fraction
from typing import TYPE_CHECKING, Final
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from persched._model.instant import US_PER_SECOND, Instant, Micros, from_datetime, micros, to_datetime
from persched._model.models import validate_policies
from persched._model.triggers import (
    NEVER,
    cron_trigger,
    describe_duration,
    interval_trigger,
    jitter_offset,
    validate_cron,
    validate_timezone,
)
from persched.errors import InvalidJobError

if TYPE_CHECKING:
    from collections.abc import Callable

S: Final = US_PER_SECOND
MINUTE: Final = 60 * S
DAY: Final = 86_400 * S
A: Final = Instant(1_800_000_010_123_457)  # an anchor like a real first_run_at, on an odd microsecond
TEN_YEARS: Final = 3653 * DAY
MAX_INTERVAL: Final = 10 * 366 * DAY  # MAX_INTERVAL_SECONDS

PROPERTY = settings(max_examples=200, deadline=None, database=None)


def at(month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0, *, year: int = 2026) -> Instant:
    """An instant given in UTC, in 2026 unless told."""
    return from_datetime(datetime(year, month, day, hour, minute, second, tzinfo=timezone.utc))


def walk(expression: str, zone: str, start: int, count: int) -> list[Instant]:
    trigger, out, t = cron_trigger(expression, zone), [], Instant(start)
    for _ in range(count):
        t = trigger.next_after(t)
        out.append(t)
    return out


def local(instant: int, zone: str) -> datetime:
    return to_datetime(instant).astimezone(ZoneInfo(zone))


# --- the DST dates the tests rely on, checked with zoneinfo itself ------------------------------


@pytest.mark.parametrize(
    ("zone", "before", "after", "jump_hours"),
    [
        ("Europe/Paris", at(3, 29, 1) - 1, at(3, 29, 1), 1),  # 02:00 CET -> 03:00 CEST
        ("Europe/Paris", at(10, 25, 1) - 1, at(10, 25, 1), -1),  # 03:00 CEST -> 02:00 CET
        ("America/New_York", at(3, 8, 7) - 1, at(3, 8, 7), 1),  # 02:00 EST -> 03:00 EDT
        ("America/New_York", at(11, 1, 6) - 1, at(11, 1, 6), -1),  # 02:00 EDT -> 01:00 EST
    ],
)
def test_dst_transitions_are_where_the_tests_assume(zone: str, before: int, after: int, jump_hours: int) -> None:
    offset_before = local(before, zone).utcoffset()
    offset_after = local(after, zone).utcoffset()
    assert offset_before is not None
    assert offset_after is not None
    assert offset_after - offset_before == timedelta(hours=jump_hours)


# --- DST rules, exact UTC instants -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("zone", "expression", "start", "expected"),
    [
        # Paris, spring forward: 02:30 does not exist on 03-29 -> once at 03:00 CEST = 01:00 UTC.
        ("Europe/Paris", "30 2 * * *", at(3, 28), [at(3, 28, 1, 30), at(3, 29, 1), at(3, 30, 0, 30)]),
        # Paris, fall back: 02:30 occurs twice on 10-25 -> once, at 02:30 CEST = 00:30 UTC (not 01:30 UTC).
        ("Europe/Paris", "30 2 * * *", at(10, 24), [at(10, 24, 0, 30), at(10, 25, 0, 30), at(10, 26, 1, 30)]),
        # New York, spring forward: 02:30 does not exist on 03-08 -> once at 03:00 EDT = 07:00 UTC.
        ("America/New_York", "30 2 * * *", at(3, 7), [at(3, 7, 7, 30), at(3, 8, 7), at(3, 9, 6, 30)]),
        # New York, fall back: 02:30 exists once on 11-01 (EST) = 07:30 UTC.
        ("America/New_York", "30 2 * * *", at(10, 31), [at(10, 31, 6, 30), at(11, 1, 7, 30), at(11, 2, 7, 30)]),
        # New York, fall back: 01:30 occurs twice on 11-01 -> once, at 01:30 EDT = 05:30 UTC (not 06:30 UTC).
        ("America/New_York", "30 1 * * *", at(10, 31), [at(10, 31, 5, 30), at(11, 1, 5, 30), at(11, 2, 6, 30)]),
        # Several missing wall times (02:00..02:45) and 03:00 itself are one slot at 03:00 CEST.
        ("Europe/Paris", "*/15 * * * *", at(3, 29, 0, 40), [at(3, 29, 0, 45), at(3, 29, 1), at(3, 29, 1, 15)]),
        # The repeated hour fires at its first occurrence only, wildcard hours included.
        ("Europe/Paris", "*/15 * * * *", at(10, 25, 0, 40), [at(10, 25, 0, 45), at(10, 25, 2), at(10, 25, 2, 15)]),
    ],
)
def test_dst_rules(zone: str, expression: str, start: Instant, expected: list[Instant]) -> None:
    assert walk(expression, zone, start, len(expected)) == expected
    assert walk(expression, zone, start + 1, len(expected)) == expected  # one microsecond later: the same
    trigger = cron_trigger(expression, zone)
    assert trigger.recent_slots(start, expected[-1], 10) == expected
    assert trigger.count_between(start, expected[-1]) == len(expected)
    assert trigger.count_between(start, Instant(expected[-1] - 1)) == len(expected) - 1


def test_the_second_occurrence_of_a_repeated_hour_is_not_a_slot() -> None:
    paris = cron_trigger("30 2 * * *", "Europe/Paris")
    second_0230 = at(10, 25, 1, 30)  # 02:30 CET, the repeated wall time
    assert paris.latest_at_or_before(second_0230) == at(10, 25, 0, 30)
    assert paris.latest_at_or_before(Instant(second_0230 + 1)) == at(10, 25, 0, 30)
    assert paris.next_after(at(10, 25, 0, 30)) == at(10, 26, 1, 30)
    quarterly = cron_trigger("*/15 * * * *", "Europe/Paris")
    assert quarterly.latest_at_or_before(at(10, 25, 1, 50)) == at(10, 25, 0, 45)  # 02:50 CET
    assert quarterly.next_after(at(10, 25, 1, 50)) == at(10, 25, 2)  # 03:00 CET


def test_utc_is_the_default_zone_and_slots_are_whole_seconds() -> None:
    trigger = cron_trigger("0 3 * * *")
    assert trigger.next_after(Instant(at(1, 1, 3) - 250_000)) == at(1, 1, 3)
    assert trigger.next_after(Instant(at(1, 1, 3) - 1)) == at(1, 1, 3)
    assert trigger.next_after(at(1, 1, 3)) == at(1, 2, 3)
    assert trigger.latest_at_or_before(Instant(at(1, 1, 3) + 999_999)) == at(1, 1, 3)
    assert trigger.latest_at_or_before(Instant(at(1, 1, 3) - 1)) == at(12, 31, 3, year=2025)


def test_six_fields_put_seconds_first() -> None:
    assert cron_trigger("15 0 3 * * *").next_after(at(1, 1)) == at(1, 1, 3, 0, 15)
    assert cron_trigger("*/20 * * * * *").recent_slots(Instant(0), at(1, 1, 0, 0, 50), 2) == [
        at(1, 1, 0, 0, 20),
        at(1, 1, 0, 0, 40),
    ]


@PROPERTY
@given(
    st.sampled_from(["0 3 * * *", "*/15 * * * *", "*/20 * * * * *", "7 * * * * *", "0 0 29 2 *"]),
    st.sampled_from(["UTC", "Europe/Paris", "America/New_York", "Asia/Kolkata"]),
    st.integers(at(1, 1, year=2000), at(1, 1, year=2040)),
)
def test_cron_slots_are_whole_seconds_at_any_microsecond(expression: str, zone: str, t: int) -> None:
    trigger, whole = cron_trigger(expression, zone), Instant(t - t % S)  # the whole second at or before t
    after, latest = trigger.next_after(Instant(t)), trigger.latest_at_or_before(Instant(t))
    assert latest is not None
    assert type(after) is int
    assert after % S == 0
    assert latest % S == 0
    assert latest <= t < after
    assert after == trigger.next_after(whole)
    assert latest == trigger.latest_at_or_before(whole)
    assert trigger.latest_at_or_before(Instant(after - 1)) == latest


# --- consistency: one set of slots, forward and backward, and the rules' oracle --------------------

PREDICATES: dict[str, Callable[[int, int], bool]] = {
    "30 2 * * *": lambda h, m: (h, m) == (2, 30),
    "*/15 * * * *": lambda h, m: m % 15 == 0,
    "0 1-3 * * *": lambda h, m: m == 0 and 1 <= h <= 3,
    "30 1 * * *": lambda h, m: (h, m) == (1, 30),
}
TRANSITIONS = [
    ("Europe/Paris", at(3, 29, 1)),
    ("Europe/Paris", at(10, 25, 1)),
    ("America/New_York", at(3, 8, 7)),
    ("America/New_York", at(11, 1, 6)),
]


def oracle(zone: str, matches: Callable[[int, int], bool], start: int, end: int) -> list[Instant]:
    """The rules, minute by minute: a first occurrence that matches, or the first instant after a gap
    in which some wall time matches (`start`, `end` on whole minutes)."""
    slots = []
    for x in range(start, end, MINUTE):
        here = local(x, zone)
        if here.fold == 0 and matches(here.hour, here.minute):
            slots.append(Instant(x))
            continue
        wall = local(x - MINUTE, zone).replace(tzinfo=None) + timedelta(minutes=1)
        while wall < here.replace(tzinfo=None):  # wall times skipped by a gap just before x
            if matches(wall.hour, wall.minute):
                slots.append(Instant(x))
                break
            wall += timedelta(minutes=1)
    return slots


@functools.cache
def oracle_around(zone: str, transition: int, expression: str) -> tuple[Instant, ...]:
    """The oracle's slots within two days of `transition`."""
    return tuple(oracle(zone, PREDICATES[expression], transition - 2 * DAY, transition + 2 * DAY))


@pytest.mark.parametrize("expression", sorted(PREDICATES))
@pytest.mark.parametrize(("zone", "transition"), TRANSITIONS)
def test_slots_follow_the_rules_and_agree_both_ways(zone: str, transition: int, expression: str) -> None:
    trigger = cron_trigger(expression, zone)
    start, end = Instant(transition - 2 * DAY), Instant(transition + 2 * DAY)
    expected = list(oracle_around(zone, transition, expression))
    assert walk(expression, zone, start - 1, len(expected)) == expected
    assert trigger.recent_slots(start, Instant(end - 1), len(expected) + 5) == expected
    assert trigger.count_between(start, Instant(end - 1)) == len(expected)


CASES = [(zone, transition, expression) for zone, transition in TRANSITIONS for expression in sorted(PREDICATES)]


@st.composite
def cron_queries(draw: st.DrawFn) -> tuple[str, int, str, Instant]:
    """A DST case and an instant within a day of its transition: anywhere, or next to an oracle slot."""
    zone, transition, expression = draw(st.sampled_from(CASES))
    slots = [s for s in oracle_around(zone, transition, expression) if abs(s - transition) < DAY]
    anywhere = transition + draw(st.integers(-DAY, DAY))
    near_a_slot = draw(st.sampled_from(slots)) + draw(st.sampled_from([-S, -1, 0, 1, S // 2]))
    return zone, transition, expression, Instant(draw(st.sampled_from([anywhere, near_a_slot])))


@PROPERTY
@given(cron_queries(), st.integers(0, DAY // 2), st.integers(0, 8))
def test_cron_answers_are_the_oracles_at_any_microsecond(
    query: tuple[str, int, str, Instant], width: int, n: int
) -> None:
    zone, transition, expression, t = query
    trigger, slots = cron_trigger(expression, zone), oracle_around(zone, transition, expression)
    i = bisect.bisect_right(slots, t)
    assert 0 < i < len(slots)  # the oracle covers t's neighbours
    after, latest = trigger.next_after(t), trigger.latest_at_or_before(t)
    assert after == slots[i]
    assert latest == slots[i - 1]
    assert latest <= t < after
    assert trigger.latest_at_or_before(after) == after
    assert trigger.next_after(latest) == after  # nothing in between, from either side
    assert trigger.latest_at_or_before(Instant(after - 1)) == latest
    assert trigger.latest_at_or_before(Instant(after - S // 2)) == latest
    assert trigger.recent_slots(latest, after, 5) == [latest, after]
    b = Instant(t + width)
    inside = list(slots[bisect.bisect_left(slots, t) : bisect.bisect_right(slots, b)])
    assert trigger.count_between(t, b) == len(inside)
    assert trigger.recent_slots(t, b, n) == (inside[-n:] if n else [])


# --- no loop over missed slots -------------------------------------------------------------------


def test_cron_after_ten_years_is_one_step() -> None:
    minutely, t0 = cron_trigger("* * * * *"), at(1, 1)
    began = time.perf_counter()
    later = Instant(t0 + TEN_YEARS + 30_500_000)
    assert minutely.latest_at_or_before(later) == t0 + TEN_YEARS
    assert minutely.next_after(later) == t0 + TEN_YEARS + MINUTE
    assert minutely.recent_slots(t0, later, 3) == [
        t0 + TEN_YEARS - 2 * MINUTE,
        t0 + TEN_YEARS - MINUTE,
        t0 + TEN_YEARS,
    ]
    assert time.perf_counter() - began < 1.0


def test_interval_after_ten_years_is_arithmetic() -> None:
    trigger = interval_trigger(A, Micros(1000))
    began = time.perf_counter()
    later = Instant(A + TEN_YEARS + 500)
    assert trigger.latest_at_or_before(later) == A + TEN_YEARS
    assert trigger.next_after(later) == A + TEN_YEARS + 1000
    assert trigger.recent_slots(A, later, 3) == [A + TEN_YEARS - 2000, A + TEN_YEARS - 1000, A + TEN_YEARS]
    assert trigger.count_between(A, later) == TEN_YEARS // 1000 + 1
    assert time.perf_counter() - began < 1.0


def test_cron_count_gives_up_on_huge_ranges() -> None:
    t0 = at(1, 1)
    assert cron_trigger("* * * * *").count_between(t0, Instant(t0 + 365 * DAY)) is None
    assert cron_trigger("0 3 * * *").count_between(t0, Instant(t0 + 10 * DAY)) == 10
    assert cron_trigger("30 2 * * *", "Europe/Paris").count_between(at(3, 1), Instant(at(4, 1) - 1)) == 31
    assert cron_trigger("0 3 * * *").count_between(Instant(t0 + DAY), t0) == 0


def test_rare_and_out_of_range_crons_end() -> None:
    leap = cron_trigger("0 0 29 2 *")
    assert leap.next_after(at(1, 1)) == at(2, 29, year=2028)
    assert leap.latest_at_or_before(at(1, 1)) == at(2, 29, year=2024)
    assert leap.next_after(at(3, 1, year=9999)) == NEVER  # past datetime's range: no slot, no loop
    assert at(12, 31, 23, 59, 59, year=9999) < NEVER  # later than any instant a datetime can hold
    assert leap.latest_at_or_before(at(1, 2, year=1)) is None


# --- interval edge cases -------------------------------------------------------------------------


def test_interval_before_the_anchor() -> None:
    trigger = interval_trigger(A, Micros(10 * S))
    assert trigger.next_after(Instant(A - 100 * S)) == A
    assert trigger.next_after(Instant(A - 1)) == A
    assert trigger.latest_at_or_before(Instant(A - 1)) is None
    assert trigger.recent_slots(Instant(A - 100 * S), Instant(A - 1), 5) == []
    assert trigger.count_between(Instant(A - 100 * S), Instant(A - 1)) == 0


def test_interval_exactly_on_a_slot() -> None:
    trigger = interval_trigger(A, Micros(10 * S))
    assert trigger.next_after(A) == A + 10 * S
    assert trigger.next_after(Instant(A + 30 * S)) == A + 40 * S
    assert trigger.latest_at_or_before(A) == A
    assert trigger.latest_at_or_before(Instant(A + 30 * S)) == A + 30 * S
    assert trigger.latest_at_or_before(Instant(A + 30 * S - 1)) == A + 20 * S


@pytest.mark.parametrize(
    ("anchor", "interval"),
    [
        (10**15 + 300_000, micros(0.1)),
        (10**15 + 700_000, micros(0.1)),
        (10**15 + 300_000, micros(1e-3)),
        (A, micros(1 / 3)),  # 333,333 µs: rounded once, then exact
        (A, 7),
    ],
)
def test_interval_slots_are_exact_integers(anchor: int, interval: int) -> None:
    """Was "float inexactness" (the division erred high and low around a slot); in microseconds the
    premise is gone, and the same checks now demand exact slots, one microsecond either side included."""
    trigger = interval_trigger(Instant(anchor), Micros(interval))
    for k in range(5_000):
        s = Instant(anchor + k * interval)
        assert trigger.next_after(s) == anchor + (k + 1) * interval
        assert trigger.latest_at_or_before(s) == s
        assert trigger.count_between(Instant(anchor), s) == k + 1
        assert trigger.count_between(s, s) == 1
        just_below = Instant(s - 1)
        assert trigger.next_after(just_below) == s
        if k:
            assert trigger.latest_at_or_before(just_below) == anchor + (k - 1) * interval


def test_rounding_to_microseconds_happens_once() -> None:
    assert micros(0.1) == 100_000
    assert micros(1 / 3) == 333_333
    assert micros(1e-3) == 1000
    assert micros(1e-7) == 0  # below the resolution: refused by interval_trigger and schedule()


@given(st.floats(allow_nan=False, allow_infinity=False) | st.integers(-(10**6), 10**6).map(lambda k: k / 2e6))
def test_rounding_to_microseconds_is_the_exact_values_half_to_even(value: float) -> None:
    # Half microseconds (k / 2e6) are the ties: each goes to the even neighbour of its exact value.
    assert micros(value) == round(Fraction(value) * US_PER_SECOND)


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_rounding_a_value_that_is_no_number_raises_as_a_fraction_does(value: float) -> None:
    with pytest.raises((OverflowError, ValueError)):
        micros(value)


def test_interval_recent_slots_are_oldest_first_and_capped() -> None:
    trigger = interval_trigger(A, Micros(10 * S))
    assert trigger.recent_slots(A, Instant(A + 95 * S), 3) == [A + 70 * S, A + 80 * S, A + 90 * S]
    assert trigger.recent_slots(Instant(A + 85 * S), Instant(A + 95 * S), 3) == [A + 90 * S]  # the floor
    assert trigger.recent_slots(Instant(A + 90 * S), Instant(A + 95 * S), 3) == [A + 90 * S]  # a floor on a slot
    assert trigger.recent_slots(Instant(A + 90 * S + 1), Instant(A + 95 * S), 3) == []  # ... and just past it
    assert trigger.recent_slots(Instant(A - 50 * S), Instant(A + 15 * S), 5) == [A, A + 10 * S]  # the anchor
    assert trigger.recent_slots(A, Instant(A + 95 * S), 0) == []
    hourly = cron_trigger("0 * * * *")
    assert hourly.recent_slots(at(1, 1), Instant(at(1, 1, 5, 30)), 2) == [at(1, 1, 4), at(1, 1, 5)]


def test_interval_count_between_is_exact() -> None:
    trigger = interval_trigger(A, Micros(10 * S))
    assert trigger.count_between(A, Instant(A + 100 * S)) == 11
    assert trigger.count_between(Instant(A + 1), Instant(A + 100 * S)) == 10
    assert trigger.count_between(A, Instant(A + 100 * S - 1)) == 10
    assert trigger.count_between(Instant(A - 100 * S), Instant(A + 5 * S)) == 1
    assert trigger.count_between(Instant(A + 100 * S), A) == 0


@pytest.mark.parametrize("interval", [0, -1, -S, micros(1e-7)])
def test_interval_must_be_at_least_a_microsecond(interval: int) -> None:
    with pytest.raises(InvalidJobError) as info:
        interval_trigger(A, Micros(interval))
    assert info.value.argument == "interval_seconds"
    assert interval_trigger(A, Micros(1)).next_after(A) == A + 1  # one microsecond is fine


@pytest.mark.parametrize("seconds", [0.0, -1.0, 1e-7, float("nan"), float("inf")])
def test_schedule_refuses_intervals_below_a_microsecond(seconds: float) -> None:
    """The float cases of the test above: floats are rounded (and refused) at schedule(), the edge."""
    with pytest.raises(InvalidJobError) as info:
        validate_policies(seconds)
    assert info.value.argument == "interval_seconds"


# --- validation ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "words"),
    [
        ("61 * * * *", ["field 1", "minute", "'61'"]),
        ("0 25 * * *", ["field 2", "hour", "'25'"]),
        ("* * 32 * *", ["field 3", "day of month", "'32'"]),
        ("* * * 13 *", ["field 4", "month", "'13'"]),
        ("* * * * 8", ["field 5", "day of week", "'8'"]),
        ("61 0 3 * * *", ["field 1", "second", "'61'"]),
        ("0 3 * * * 2026", ["field 6", "day of week", "'2026'"]),  # a year field is not seconds-last
        ("*/0 * * * *", ["minute", "'*/0'"]),
        ("* * *", ["3 fields", "5"]),
        ("", ["0 fields", "5"]),
        (5, ["string", "int"]),
        (None, ["string"]),
        ("0 0 30 2 *", ["never fires", "day of month", "'30'", "month", "'2'"]),
        ("0 0 */29 2 MON#5", ["never fires", "day of month", "day of week"]),
    ],
)
def test_validate_cron_names_the_bad_field(expression: object, words: list[str]) -> None:
    with pytest.raises(InvalidJobError) as info:
        validate_cron(expression)
    assert info.value.argument == "cron"
    for word in words:
        assert word in info.value.reason


# Vixie cron's shortcuts (crontab(5)), each with the five fields it stands for.
SHORTCUTS: Final = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


@pytest.mark.parametrize(("shortcut", "fields"), sorted(SHORTCUTS.items()))
def test_cron_shortcuts_fire_on_the_fields_they_stand_for(shortcut: str, fields: str) -> None:
    assert validate_cron(f" {shortcut.upper()} ") == shortcut  # kept as written, in lower case
    start = at(2, 27, 13, 5, 7) + 250_000
    assert walk(shortcut, "Europe/Paris", start, 30) == walk(fields, "Europe/Paris", start, 30)
    assert cron_trigger(shortcut).describe() == f"cron {shortcut}"


def test_cron_reboot_is_refused_with_what_to_do_instead() -> None:
    with pytest.raises(InvalidJobError) as info:
        validate_cron("@reboot")
    assert info.value.argument == "cron"
    assert "@reboot" in info.value.reason
    assert "run_at" in info.value.reason  # the one-shot to declare at start-up instead


def test_cron_unknown_shortcut_lists_the_known_ones() -> None:
    with pytest.raises(InvalidJobError) as info:
        validate_cron("@fortnightly")
    assert info.value.argument == "cron"
    assert "'@fortnightly'" in info.value.reason
    for shortcut in SHORTCUTS:
        assert shortcut in info.value.reason


def test_validate_cron_normalises_whitespace() -> None:
    assert validate_cron("  0   3 *\t* * ") == "0 3 * * *"
    assert validate_cron("0 0 29 2 *") == "0 0 29 2 *"  # rare is fine


@pytest.mark.parametrize("name", ["Mars/Olympus", "", 5, None, "../etc/passwd", "/etc/localtime", "utc"])
def test_validate_timezone_refuses(name: object) -> None:
    with pytest.raises(InvalidJobError) as info:
        validate_timezone(name)
    assert info.value.argument == "timezone"


def test_validate_timezone_accepts_iana_names() -> None:
    assert validate_timezone("UTC") == "UTC"
    assert validate_timezone("Europe/Paris") == "Europe/Paris"
    with pytest.raises(InvalidJobError) as info:
        cron_trigger("0 3 * * *", "Mars/Olympus")
    assert info.value.argument == "timezone"


def test_cron_triggers_are_cached_and_hashable() -> None:
    assert cron_trigger("0 3 * * *", "Europe/Paris") is cron_trigger("0 3 * * *", "Europe/Paris")
    ten = Micros(10 * S)
    assert len({cron_trigger("0 3 * * *"), interval_trigger(A, ten), interval_trigger(A, ten)}) == 2


# --- jitter --------------------------------------------------------------------------------------


def test_jitter_is_deterministic_bounded_and_spread() -> None:
    jitter = Micros(7_500_000)
    offsets = [jitter_offset("job", 3, Instant(A + k * S), jitter) for k in range(10_000)]
    assert all(0 <= o < jitter for o in offsets)
    assert all(type(o) is int for o in offsets)
    assert offsets == [jitter_offset("job", 3, Instant(A + k * S), jitter) for k in range(10_000)]
    low = sum(o < jitter // 2 for o in offsets)
    assert 4000 < low < 6000
    assert len(set(offsets)) > 9_900  # spread over the microseconds, not a few values
    assert jitter_offset("job", 3, Instant(A + 1), jitter) != jitter_offset("job", 3, A, jitter)  # per slot, to the µs
    assert jitter_offset("job", 4, A, jitter) != jitter_offset("job", 3, A, jitter)
    assert jitter_offset("other", 3, A, jitter) != jitter_offset("job", 3, A, jitter)
    assert jitter_offset("job", 3, A, Micros(0)) == 0


@PROPERTY
@given(
    st.text(min_size=1, max_size=20),
    st.integers(1, 2**31),
    st.integers(0, 2**62),
    st.one_of(st.integers(1, 10), st.integers(1, MAX_INTERVAL)),
)
def test_jitter_offset_is_in_zero_to_jitter(job_id: str, generation: int, slot: int, jitter: int) -> None:
    offset = jitter_offset(job_id, generation, Instant(slot), Micros(jitter))
    assert type(offset) is int
    assert 0 <= offset < jitter
    assert offset == jitter_offset(job_id, generation, Instant(slot), Micros(jitter))
    assert jitter_offset(job_id, generation, Instant(slot), Micros(1)) == 0
    assert jitter_offset(job_id, generation, Instant(slot), Micros(-jitter)) == 0


# --- descriptions --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("us", "words"),
    [
        (300 * S, "5 min"),
        (30 * S, "30 s"),
        (1_500_000, "1.5 s"),
        (90 * S, "90 s"),
        (7200 * S, "2 h"),
        (DAY, "1 day"),
        (3 * DAY, "3 days"),
        (250_000, "250 ms"),
        (1500, "1.5 ms"),
        (1, "0.001 ms"),  # the smallest interval, not "0 ms"
        (333_333, "333.333 ms"),
        (1_000_001, "1.000001 s"),
        (MAX_INTERVAL, "3660 days"),
    ],
)
def test_describe_duration(us: int, words: str) -> None:
    assert describe_duration(us) == words


UNITS: Final = {"ms": 1000, "s": S, "min": MINUTE, "h": 3600 * S, "day": DAY, "days": DAY}


@PROPERTY
@given(st.one_of(st.integers(1, 2 * S), st.integers(1, MAX_INTERVAL)))
def test_describe_duration_loses_no_microsecond(us: int) -> None:
    match = re.fullmatch(r"(\d+(?:\.\d+)?) (ms|s|min|h|days?)", describe_duration(us))
    assert match is not None
    assert Fraction(match[1]) * UNITS[match[2]] == us


def test_describe_triggers() -> None:
    assert interval_trigger(A, Micros(300 * S)).describe() == "every 5 min"
    assert interval_trigger(A, Micros(250_000)).describe() == "every 250 ms"
    assert interval_trigger(A, Micros(333_333)).describe() == "every 333.333 ms"
    assert cron_trigger("0 3 * * *", "Europe/Paris").describe() == "cron 0 3 * * * Europe/Paris"
    assert cron_trigger("0  3 * * *").describe() == "cron 0 3 * * *"


def test_never_is_an_int() -> None:
    """math.inf is gone: NEVER is an int, and no answer is a float."""
    assert type(NEVER) is int
    assert not math.isinf(NEVER)
    assert type(cron_trigger("0 3 * * *").next_after(A)) is int
