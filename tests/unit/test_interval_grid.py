"""The fixed-rate grid of `persched._triggers.interval_trigger` (SPEC §2), pure and O(1).

Slots are ``anchor + k * interval`` rounded to the microsecond, ``k >= 0``.
The three helpers below state the grid's arithmetic in the terms the
properties are written in.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from persched._triggers import interval_trigger


def slot(anchor: float, interval: float, k: int) -> float:
    return round(anchor + k * interval, 6)


def next_slot_after(anchor: float, interval: float, t: float) -> float:
    return interval_trigger(anchor, interval).next_after(t)


def latest_slot_at_or_before(anchor: float, interval: float, t: float, floor: float) -> float:
    """The most recent slot at or before `t`, never earlier than `floor` (a claim's coalescing)."""
    latest = interval_trigger(anchor, interval).latest_at_or_before(t)
    return floor if latest is None else max(latest, floor)


A = 1_800_000_010.0  # an anchor like a real first_run_at
TEN_YEARS = 10 * 366 * 86400.0


def test_slot_numbers() -> None:
    assert [slot(A, 10.0, k) for k in range(3)] == [A, A + 10, A + 20]
    assert slot(A, 0.1, 3) == round(A + 0.3, 6)  # no float drift: the store keeps microseconds


@pytest.mark.parametrize(
    ("t", "expected"),
    [
        (A - 100, A),  # before the anchor: the anchor itself
        (A - 1e-6, A),
        (A, A + 10),  # strictly after
        (A + 0.000001, A + 10),
        (A + 9.999999, A + 10),
        (A + 10, A + 20),
        (A + 35, A + 40),
    ],
)
def test_next_slot_after(t: float, expected: float) -> None:
    assert next_slot_after(A, 10.0, t) == expected


@pytest.mark.parametrize(
    ("t", "floor", "expected"),
    [
        (A + 45.5, A + 10, A + 40),  # coalescing: the most recent slot it stands for
        (A + 40, A + 10, A + 40),  # exactly on a slot
        (A + 10, A + 10, A + 10),
        (A + 12, A + 20, A + 20),  # never earlier than the floor (the slot in the row)
        (A - 5, A, A),  # before the anchor: the floor
    ],
)
def test_latest_slot_at_or_before(t: float, floor: float, expected: float) -> None:
    assert latest_slot_at_or_before(A, 10.0, t, floor=floor) == expected


def test_sub_second_intervals_land_exactly_on_slots() -> None:
    interval = 0.1
    for k in range(1, 2000):
        s = slot(A, interval, k)
        assert next_slot_after(A, interval, s) == slot(A, interval, k + 1)
        assert latest_slot_at_or_before(A, interval, s, floor=A) == s


def test_a_ten_year_jump_is_constant_time() -> None:
    """FIELD-REPORTS #12: no loop over missed slots (3e11 of them here; a loop
    would run into pytest-timeout instead of returning)."""
    t = A + TEN_YEARS + 0.0004
    n = next_slot_after(A, 0.001, t)
    latest = latest_slot_at_or_before(A, 0.001, t, floor=A)
    assert latest <= t < n
    assert n - latest == pytest.approx(0.001, abs=2e-6)


anchors = st.floats(min_value=1e9, max_value=4e9, allow_nan=False)
intervals = st.sampled_from([0.001, 0.003, 0.1, 0.25, 1.0, 7.0, 60.0, 3600.0, 86400.0, 1e-3 * 7, 12345.678])
offsets = st.floats(min_value=-1e5, max_value=1e8, allow_nan=False)


@given(anchors, intervals, offsets)
def test_next_slot_after_is_the_first_slot_after_t(anchor: float, interval: float, offset: float) -> None:
    anchor = round(anchor, 6)
    t = anchor + offset
    n = next_slot_after(anchor, interval, t)
    assert n > t
    assert n >= anchor
    k = round((n - anchor) / interval)
    assert slot(anchor, interval, k) == n  # on the grid
    if k > 0:
        assert slot(anchor, interval, k - 1) <= t  # and the first one after t


@given(anchors, intervals, offsets)
def test_latest_slot_is_the_last_slot_at_or_before_t(anchor: float, interval: float, offset: float) -> None:
    anchor = round(anchor, 6)
    t = anchor + offset
    latest = latest_slot_at_or_before(anchor, interval, t, floor=anchor)
    if t < anchor:
        assert latest == anchor
        return
    assert latest <= t
    k = round((latest - anchor) / interval)
    assert slot(anchor, interval, k) == latest
    assert slot(anchor, interval, k + 1) > t
    assert next_slot_after(anchor, interval, t) == slot(anchor, interval, k + 1)
