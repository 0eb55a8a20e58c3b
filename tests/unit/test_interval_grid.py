"""The fixed-rate grid of `persched._model.triggers.interval_trigger`, pure and O(1).

docs/reference/behaviour.md, "Fixed-rate" and "Time is exact to the microsecond", are the rules.

Slots are ``anchor + k * interval``, ``k >= 0``, in whole microseconds: exact integer arithmetic, so the
properties below compare with ``==`` at any anchor (an odd microsecond, the real time now), for any interval
from 1 µs to 10 years and at any distance from the anchor. Each property is stated from its definition
(on the grid, on the right side of `t`, nothing in between) or against a brute-force enumeration, never by
repeating the trigger's own floor division.
"""

from __future__ import annotations

import time
from typing import Final

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from persched._model.instant import US_PER_SECOND, Instant, Micros
from persched._model.triggers import interval_trigger

S: Final = US_PER_SECOND
DAY: Final = 86_400 * S
TEN_YEARS: Final = 10 * 366 * DAY  # MAX_INTERVAL_SECONDS, the longest interval schedule() accepts
A: Final = Instant(1_800_000_010_123_457)  # an anchor like a real first_run_at, on an odd microsecond
ODD: Final = 1_700_000_000_123_457  # µs
NOW: Final = time.time_ns() // 1000  # the real time now, in µs: where FakeClock() starts

PROPERTY = settings(max_examples=200, deadline=None, database=None)


def slot(anchor: int, interval: int, k: int) -> Instant:
    return Instant(anchor + k * interval)


def next_slot_after(anchor: int, interval: int, t: int) -> Instant:
    return interval_trigger(Instant(anchor), Micros(interval)).next_after(Instant(t))


def latest_slot_at_or_before(anchor: int, interval: int, t: int, floor: int) -> Instant:
    """The most recent slot at or before `t`, never earlier than `floor` (a claim's coalescing)."""
    latest = interval_trigger(Instant(anchor), Micros(interval)).latest_at_or_before(Instant(t))
    return Instant(floor) if latest is None else max(latest, Instant(floor))


def on_grid(anchor: int, interval: int, s: int) -> bool:
    return s >= anchor and (s - anchor) % interval == 0


# --- worked examples -------------------------------------------------------------------------------


def test_slot_numbers() -> None:
    assert [slot(A, 10 * S, k) for k in range(3)] == [A, A + 10 * S, A + 20 * S]
    assert slot(A, 100_000, 3) == A + 300_000  # 0.1 s: no drift, a slot is an int


@pytest.mark.parametrize(
    ("t", "expected"),
    [
        (A - 100 * S, A),  # before the anchor: the anchor itself
        (A - 1, A),
        (A, A + 10 * S),  # strictly after
        (A + 1, A + 10 * S),
        (A + 10 * S - 1, A + 10 * S),
        (A + 10 * S, A + 20 * S),
        (A + 35 * S, A + 40 * S),
    ],
)
def test_next_slot_after(t: int, expected: int) -> None:
    assert next_slot_after(A, 10 * S, t) == expected


@pytest.mark.parametrize(
    ("t", "floor", "expected"),
    [
        (A + 45 * S + 500_000, A + 10 * S, A + 40 * S),  # coalescing: the most recent slot it stands for
        (A + 40 * S, A + 10 * S, A + 40 * S),  # exactly on a slot
        (A + 40 * S - 1, A + 10 * S, A + 30 * S),  # one microsecond before it
        (A + 10 * S, A + 10 * S, A + 10 * S),
        (A + 12 * S, A + 20 * S, A + 20 * S),  # never earlier than the floor (the slot in the row)
        (A - 5 * S, A, A),  # before the anchor: the floor
    ],
)
def test_latest_slot_at_or_before(t: int, floor: int, expected: int) -> None:
    assert latest_slot_at_or_before(A, 10 * S, t, floor=floor) == expected


@pytest.mark.parametrize("interval", [1, 3, 1000, 100_000, 333_333])  # 1/3 s is 333,333 µs
def test_sub_second_intervals_land_exactly_on_slots(interval: int) -> None:
    for k in range(1, 2000):
        s = slot(A, interval, k)
        assert next_slot_after(A, interval, s) == slot(A, interval, k + 1)
        assert next_slot_after(A, interval, s - 1) == s
        assert latest_slot_at_or_before(A, interval, s, floor=A) == s
        assert latest_slot_at_or_before(A, interval, s - 1, floor=A) == slot(A, interval, k - 1)


@pytest.mark.parametrize("interval", [1, 1000])
def test_a_ten_year_jump_is_constant_time(interval: int) -> None:
    """No loop over missed slots (3e14 of them at 1 µs; a loop
    would run into pytest-timeout instead of returning), and the answer is exact."""
    t = A + TEN_YEARS + interval // 2
    n = next_slot_after(A, interval, t)
    latest = latest_slot_at_or_before(A, interval, t, floor=A)
    assert latest == A + TEN_YEARS
    assert n == A + TEN_YEARS + interval
    assert type(n) is int
    assert type(latest) is int


# --- properties ------------------------------------------------------------------------------------

anchors = st.one_of(
    st.integers(ODD - 10**12, ODD + 10**12),  # within 12 days of an odd microsecond
    st.integers(NOW - 10**12, NOW + 10**12),  # around the real time now
    st.integers(0, 2 * NOW),  # anywhere from 1970 to the 2070s
).map(Instant)
intervals = st.one_of(
    st.integers(1, TEN_YEARS),
    st.integers(1, 1000),
    st.sampled_from([1, 3, 7, 1000, 100_000, 333_333, S, 60 * S, 3600 * S, DAY, 12_345_678_901, TEN_YEARS]),
).map(Micros)


@st.composite
def grids(draw: st.DrawFn) -> tuple[Instant, Micros, Instant]:
    """An anchor, an interval and a query instant `t`: on a slot or next to one, or anywhere within
    twenty years of the anchor (either side)."""
    anchor, interval = draw(anchors), draw(intervals)
    k = draw(st.integers(-3, max(3, 2 * TEN_YEARS // interval)))
    nudge = draw(st.one_of(st.integers(-2, 2), st.integers(-interval, interval)))
    near_a_slot = anchor + k * interval + nudge
    anywhere = anchor + draw(st.integers(-2 * TEN_YEARS, 2 * TEN_YEARS))
    return anchor, interval, Instant(draw(st.sampled_from([near_a_slot, anywhere])))


@PROPERTY
@given(grids())
def test_next_slot_after_is_the_first_slot_after_t(grid: tuple[Instant, Micros, Instant]) -> None:
    anchor, interval, t = grid
    n = next_slot_after(anchor, interval, t)
    assert type(n) is int
    assert n > t
    assert on_grid(anchor, interval, n)
    assert n == anchor or n - interval <= t  # the slot before it (if any) is not after t


@PROPERTY
@given(grids())
def test_latest_slot_is_the_last_slot_at_or_before_t(grid: tuple[Instant, Micros, Instant]) -> None:
    anchor, interval, t = grid
    latest = interval_trigger(anchor, interval).latest_at_or_before(t)
    if t < anchor:
        assert latest is None
        assert latest_slot_at_or_before(anchor, interval, t, floor=anchor) == anchor
        return
    assert latest is not None
    assert type(latest) is int
    assert latest <= t
    assert on_grid(anchor, interval, latest)
    assert latest + interval > t  # the slot after it is after t
    assert next_slot_after(anchor, interval, t) == latest + interval  # nothing in between, from either side


@PROPERTY
@given(anchors, intervals, st.data())
def test_slot_k_is_anchor_plus_k_intervals_exactly(anchor: Instant, interval: Micros, data: st.DataObject) -> None:
    k = data.draw(st.one_of(st.integers(0, 5), st.integers(0, 2 * TEN_YEARS // interval)), label="k")
    s = slot(anchor, interval, k)
    trigger = interval_trigger(anchor, interval)
    assert trigger.next_after(Instant(s - 1)) == s
    assert trigger.latest_at_or_before(s) == s
    assert trigger.next_after(s) == s + interval
    assert trigger.latest_at_or_before(Instant(s - 1)) == (s - interval if k else None)
    assert trigger.count_between(anchor, s) == k + 1
    assert trigger.count_between(s, s) == 1
    assert trigger.count_between(Instant(s + 1), Instant(s + interval - 1)) == 0
    assert trigger.recent_slots(anchor, s, 1) == [s]


@PROPERTY
@given(anchors, intervals, st.data())
def test_recent_slots_and_count_between_agree_with_enumeration(
    anchor: Instant, interval: Micros, data: st.DataObject
) -> None:
    """On a range of at most ~50 intervals, near the anchor or up to twenty years past it."""
    k0 = data.draw(st.one_of(st.integers(0, 5), st.integers(0, 2 * TEN_YEARS // interval)), label="k0")
    a = Instant(anchor + k0 * interval + data.draw(st.integers(-3 * interval, 3 * interval), label="a - slot(k0)"))
    b = Instant(a + data.draw(st.integers(-interval, 50 * interval), label="b - a"))
    n = data.draw(st.integers(0, 60), label="n")
    enumerated = [
        s for s in (slot(anchor, interval, k) for k in range(max(0, k0 - 5), k0 + 60)) if a <= s <= b
    ]  # every slot of [a, b] has k in [k0 - 3, k0 + 53]
    trigger = interval_trigger(anchor, interval)
    assert trigger.count_between(a, b) == len(enumerated)
    assert trigger.recent_slots(a, b, n) == (enumerated[-n:] if n else [])
    if enumerated:
        assert trigger.next_after(Instant(a - 1)) == enumerated[0]
        assert trigger.latest_at_or_before(b) == enumerated[-1]


@PROPERTY
@given(anchors, intervals, st.integers(-10 * S, 10 * S))
def test_ten_years_from_the_anchor_is_still_exact(anchor: Instant, interval: Micros, nudge: int) -> None:
    """Float seconds near 2e9 s resolve ~0.24 µs; integers resolve every microsecond, however far."""
    t = Instant(anchor + TEN_YEARS + nudge)
    trigger = interval_trigger(anchor, interval)
    n, latest = trigger.next_after(t), trigger.latest_at_or_before(t)
    assert latest is not None
    assert latest <= t < n
    assert n - latest == interval
    assert on_grid(anchor, interval, latest)
    assert trigger.count_between(anchor, t) == (latest - anchor) // interval + 1
    assert trigger.recent_slots(Instant(latest - interval + 1), t, 3) == [latest]
