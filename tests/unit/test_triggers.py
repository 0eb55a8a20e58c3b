"""`persched._triggers`: interval and cron slots, the DST rules, validation, jitter, descriptions.

The DST tests check the rules of SPEC-policies "Cron" against instants worked out by hand and against
a brute-force oracle written from the rules, not against what a cron library happens to do.
"""

from __future__ import annotations

import math
import random
import time
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

import pytest

from persched._triggers import (
    cron_trigger,
    describe_seconds,
    interval_trigger,
    jitter_offset,
    validate_cron,
    validate_timezone,
)
from persched.errors import InvalidJobError

if TYPE_CHECKING:
    from collections.abc import Callable

A = 1_800_000_010.0  # an anchor like a real first_run_at
TEN_YEARS = 3653 * 86400.0


def at(month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0, *, year: int = 2026) -> float:
    """An instant given in UTC, in 2026 unless told."""
    return datetime(year, month, day, hour, minute, second, tzinfo=timezone.utc).timestamp()


def walk(expression: str, zone: str, start: float, count: int) -> list[float]:
    trigger, out, t = cron_trigger(expression, zone), [], start
    for _ in range(count):
        t = trigger.next_after(t)
        out.append(t)
    return out


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
def test_dst_transitions_are_where_the_tests_assume(zone: str, before: float, after: float, jump_hours: int) -> None:
    z = ZoneInfo(zone)
    offset_before = datetime.fromtimestamp(before, z).utcoffset()
    offset_after = datetime.fromtimestamp(after, z).utcoffset()
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
def test_dst_rules(zone: str, expression: str, start: float, expected: list[float]) -> None:
    assert walk(expression, zone, start, len(expected)) == expected
    trigger = cron_trigger(expression, zone)
    assert trigger.recent_slots(start, expected[-1], 10) == expected
    assert trigger.count_between(start, expected[-1]) == len(expected)


def test_the_second_occurrence_of_a_repeated_hour_is_not_a_slot() -> None:
    paris = cron_trigger("30 2 * * *", "Europe/Paris")
    second_0230 = at(10, 25, 1, 30)  # 02:30 CET, the repeated wall time
    assert paris.latest_at_or_before(second_0230) == at(10, 25, 0, 30)
    assert paris.next_after(at(10, 25, 0, 30)) == at(10, 26, 1, 30)
    quarterly = cron_trigger("*/15 * * * *", "Europe/Paris")
    assert quarterly.latest_at_or_before(at(10, 25, 1, 50)) == at(10, 25, 0, 45)  # 02:50 CET
    assert quarterly.next_after(at(10, 25, 1, 50)) == at(10, 25, 2)  # 03:00 CET


def test_utc_is_the_default_zone_and_slots_are_whole_seconds() -> None:
    trigger = cron_trigger("0 3 * * *")
    assert trigger.next_after(at(1, 1, 3) - 0.25) == at(1, 1, 3)
    assert trigger.next_after(at(1, 1, 3)) == at(1, 2, 3)
    assert trigger.latest_at_or_before(at(1, 1, 3) + 0.999) == at(1, 1, 3)
    assert trigger.latest_at_or_before(at(1, 1, 3) - 1e-6) == at(12, 31, 3, year=2025)


def test_six_fields_put_seconds_first() -> None:
    assert cron_trigger("15 0 3 * * *").next_after(at(1, 1)) == at(1, 1, 3, 0, 15)
    assert cron_trigger("*/20 * * * * *").recent_slots(0, at(1, 1, 0, 0, 50), 2) == [
        at(1, 1, 0, 0, 20),
        at(1, 1, 0, 0, 40),
    ]


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


def oracle(zone: str, matches: Callable[[int, int], bool], start: int, end: int) -> list[float]:
    """The rules, minute by minute: a first occurrence that matches, or the first instant after a gap
    in which some wall time matches."""
    z, slots = ZoneInfo(zone), []
    for x in range(start, end, 60):
        local = datetime.fromtimestamp(x, z)
        if local.fold == 0 and matches(local.hour, local.minute):
            slots.append(float(x))
            continue
        wall = datetime.fromtimestamp(x - 60, z).replace(tzinfo=None) + timedelta(minutes=1)
        while wall < local.replace(tzinfo=None):  # wall times skipped by a gap just before x
            if matches(wall.hour, wall.minute):
                slots.append(float(x))
                break
            wall += timedelta(minutes=1)
    return slots


@pytest.mark.parametrize("expression", sorted(PREDICATES))
@pytest.mark.parametrize(("zone", "transition"), TRANSITIONS)
def test_slots_follow_the_rules_and_agree_both_ways(zone: str, transition: float, expression: str) -> None:
    trigger = cron_trigger(expression, zone)
    start, end = int(transition) - 2 * 86400, int(transition) + 2 * 86400
    expected = oracle(zone, PREDICATES[expression], start, end)
    assert walk(expression, zone, start - 1, len(expected)) == expected
    assert trigger.recent_slots(start, end - 1, len(expected) + 5) == expected
    assert trigger.count_between(start, end - 1) == len(expected)

    rng = random.Random(f"{zone}{transition}{expression}")  # fixed seed per case
    for _ in range(300):
        t = rng.uniform(start + 86400, end - 86400)
        after, latest = trigger.next_after(t), trigger.latest_at_or_before(t)
        assert latest is not None
        assert latest <= t < after
        assert trigger.latest_at_or_before(after) == after
        assert trigger.next_after(latest) == after  # nothing in between, from either side
        assert trigger.latest_at_or_before(after - 0.5) == latest
        assert trigger.recent_slots(latest, after, 5) == [latest, after]


# --- no loop over missed slots -------------------------------------------------------------------


def test_cron_after_ten_years_is_one_step() -> None:
    minutely, t0 = cron_trigger("* * * * *"), at(1, 1)
    began = time.perf_counter()
    later = t0 + TEN_YEARS + 30.5
    assert minutely.latest_at_or_before(later) == t0 + TEN_YEARS
    assert minutely.next_after(later) == t0 + TEN_YEARS + 60
    assert minutely.recent_slots(t0, later, 3) == [t0 + TEN_YEARS - 120, t0 + TEN_YEARS - 60, t0 + TEN_YEARS]
    assert time.perf_counter() - began < 1.0


def test_interval_after_ten_years_is_arithmetic() -> None:
    trigger = interval_trigger(A, 1e-3)
    began = time.perf_counter()
    later = A + TEN_YEARS + 0.0005
    assert trigger.latest_at_or_before(later) == A + TEN_YEARS
    assert trigger.next_after(later) == round(A + TEN_YEARS + 0.001, 6)
    assert trigger.recent_slots(A, later, 3) == [
        round(A + TEN_YEARS - 0.002, 6),
        round(A + TEN_YEARS - 0.001, 6),
        A + TEN_YEARS,
    ]
    assert trigger.count_between(A, later) == round(TEN_YEARS * 1000) + 1
    assert time.perf_counter() - began < 1.0


def test_cron_count_gives_up_on_huge_ranges() -> None:
    t0 = at(1, 1)
    assert cron_trigger("* * * * *").count_between(t0, t0 + 365 * 86400) is None
    assert cron_trigger("0 3 * * *").count_between(t0, t0 + 10 * 86400) == 10
    assert cron_trigger("30 2 * * *", "Europe/Paris").count_between(at(3, 1), at(4, 1) - 1) == 31
    assert cron_trigger("0 3 * * *").count_between(t0 + 86400, t0) == 0


def test_rare_and_out_of_range_crons_end() -> None:
    leap = cron_trigger("0 0 29 2 *")
    assert leap.next_after(at(1, 1)) == at(2, 29, year=2028)
    assert leap.latest_at_or_before(at(1, 1)) == at(2, 29, year=2024)
    assert leap.next_after(at(3, 1, year=9999)) == float("inf")  # past datetime's range: no slot, no loop
    assert leap.latest_at_or_before(at(1, 2, year=1)) is None


# --- interval edge cases -------------------------------------------------------------------------


def test_interval_before_the_anchor() -> None:
    trigger = interval_trigger(A, 10.0)
    assert trigger.next_after(A - 100) == A
    assert trigger.next_after(A - 1e-6) == A
    assert trigger.latest_at_or_before(A - 1e-6) is None
    assert trigger.recent_slots(A - 100, A - 1, 5) == []
    assert trigger.count_between(A - 100, A - 1) == 0


def test_interval_exactly_on_a_slot() -> None:
    trigger = interval_trigger(A, 10.0)
    assert trigger.next_after(A) == A + 10
    assert trigger.next_after(A + 30) == A + 40
    assert trigger.latest_at_or_before(A) == A
    assert trigger.latest_at_or_before(A + 30) == A + 30
    assert trigger.latest_at_or_before(A + 29.999999) == A + 20


@pytest.mark.parametrize(
    ("anchor", "interval"),
    [(1e9 + 0.3, 0.1), (1e9 + 0.7, 0.1), (1e9 + 0.3, 1e-3), (A, 1 / 3)],  # the division errs high, and low
)
def test_interval_float_inexactness(anchor: float, interval: float) -> None:
    trigger = interval_trigger(anchor, interval)
    for k in range(5_000):
        s = round(anchor + k * interval, 6)
        assert trigger.next_after(s) == round(anchor + (k + 1) * interval, 6)
        assert trigger.latest_at_or_before(s) == s
        assert trigger.count_between(anchor, s) == k + 1
        assert trigger.count_between(s, s) == 1
        just_below = math.nextafter(s, 0.0)  # the division may say "on the slot"
        assert trigger.next_after(just_below) == s
        if k:
            assert trigger.latest_at_or_before(just_below) == round(anchor + (k - 1) * interval, 6)


def test_interval_recent_slots_are_oldest_first_and_capped() -> None:
    trigger = interval_trigger(A, 10.0)
    assert trigger.recent_slots(A, A + 95, 3) == [A + 70, A + 80, A + 90]
    assert trigger.recent_slots(A + 85, A + 95, 3) == [A + 90]  # the floor
    assert trigger.recent_slots(A - 50, A + 15, 5) == [A, A + 10]  # the anchor
    assert trigger.recent_slots(A, A + 95, 0) == []
    hourly = cron_trigger("0 * * * *")
    assert hourly.recent_slots(at(1, 1), at(1, 1, 5, 30), 2) == [at(1, 1, 4), at(1, 1, 5)]


def test_interval_count_between_is_exact() -> None:
    trigger = interval_trigger(A, 10.0)
    assert trigger.count_between(A, A + 100) == 11
    assert trigger.count_between(A + 0.5, A + 100) == 10
    assert trigger.count_between(A - 100, A + 5) == 1
    assert trigger.count_between(A + 100, A) == 0


@pytest.mark.parametrize("interval", [0.0, -1.0, 1e-7, float("nan"), float("inf")])
def test_interval_must_be_at_least_a_microsecond(interval: float) -> None:
    with pytest.raises(InvalidJobError) as info:
        interval_trigger(A, interval)
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
    assert len({cron_trigger("0 3 * * *"), interval_trigger(A, 10.0), interval_trigger(A, 10.0)}) == 2


# --- jitter --------------------------------------------------------------------------------------


def test_jitter_is_deterministic_bounded_and_spread() -> None:
    jitter = 7.5
    offsets = [jitter_offset("job", 3, A + k, jitter) for k in range(10_000)]
    assert all(0.0 <= o < jitter for o in offsets)
    assert offsets == [jitter_offset("job", 3, A + k, jitter) for k in range(10_000)]
    low = sum(o < jitter / 2 for o in offsets)
    assert 4000 < low < 6000
    assert jitter_offset("job", 4, A, jitter) != jitter_offset("job", 3, A, jitter)
    assert jitter_offset("other", 3, A, jitter) != jitter_offset("job", 3, A, jitter)
    assert jitter_offset("job", 3, A, 0.0) == 0.0


# --- descriptions --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "words"),
    [
        (300, "5 min"),
        (30, "30 s"),
        (1.5, "1.5 s"),
        (90, "90 s"),
        (7200, "2 h"),
        (86400, "1 day"),
        (3 * 86400, "3 days"),
        (0.25, "250 ms"),
        (0.0015, "1.5 ms"),
    ],
)
def test_describe_seconds(seconds: float, words: str) -> None:
    assert describe_seconds(seconds) == words


def test_describe_triggers() -> None:
    assert interval_trigger(A, 300).describe() == "every 5 min"
    assert interval_trigger(A, 0.25).describe() == "every 250 ms"
    assert cron_trigger("0 3 * * *", "Europe/Paris").describe() == "cron 0 3 * * * Europe/Paris"
    assert cron_trigger("0  3 * * *").describe() == "cron 0 3 * * *"
